package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/jetflow-dev/jetflow/cmd/jetflow/internal/bench"
	"github.com/jetflow-dev/jetflow/embedded"
)

func init() {
	register("bench", "measure jetflow beside raw JetStream (embedded server, both durability modes)", runBench)
}

// benchConfig is what bench's flags say: the core figures' options, and
// the extra measures to take before them.
type benchConfig struct {
	o                                       bench.Options
	quick, asJSON                           bool
	pool, fairness, cron, wf, many, delayed bool
	serverProcess                           bool
	trig, cluster, index                    bool
	clusterURL                              string
	clusterN                                int
	delayedSizes, indexSizes                []int
}

func runBench(ctx context.Context, args []string) error {
	c, err := parseBenchFlags(ctx, args)
	if err != nil {
		return err
	}
	bench.SetSyncEvery(c.o.SyncEvery)
	out := stdout(ctx)
	if c.asJSON {
		out = stderr(ctx)
	}
	for _, part := range c.parts(ctx, out) {
		if !part.on {
			continue
		}
		if err := part.run(); err != nil {
			return fmt.Errorf("bench %s: %w", part.name, err)
		}
	}
	// The core figures come last, so that SUMMARY is the last line.
	res, err := bench.Measure(ctx, c.o, out)
	if err != nil || !c.asJSON {
		return err
	}
	js := make([]bench.JSON, len(res))
	for i, r := range res {
		js[i] = bench.JSONOf(r)
	}
	enc := json.NewEncoder(stdout(ctx))
	enc.SetIndent("", "  ")
	return enc.Encode(js)
}

// benchPart is an extra measure of bench, taken when on.
type benchPart struct {
	name string
	on   bool
	run  func() error
}

// parts are the extra measures, in the order they are taken.
func (c *benchConfig) parts(ctx context.Context, out io.Writer) []benchPart {
	return []benchPart{
		{"pool", c.pool, func() error { return bench.RunPool(ctx, out, c.quick) }},
		{"fairness", c.fairness, func() error { return bench.RunFairness(ctx, out, c.quick) }},
		{"cron", c.cron, func() error { return bench.RunCron(ctx, out, c.quick) }},
		{"index", c.index, func() error { return bench.RunIndex(ctx, out, c.indexSizes) }},
		{"workflow", c.wf, func() error { return bench.RunWorkflow(ctx, out, c.quick) }},
		{"trigger", c.trig, func() error { return bench.RunTrigger(ctx, out, c.quick) }},
		{"cluster", c.cluster || c.clusterURL != "", func() error {
			co := bench.ClusterOptions{URL: c.clusterURL, N: c.clusterN}
			if c.quick && co.N == 0 {
				co.N, co.LatenessRuns = 2000, 100
			}
			return bench.RunCluster(ctx, out, co)
		}},
		{"enqueue-many", c.many, func() error { return bench.RunEnqueueMany(ctx, out, c.quick) }},
		{"delayed-scale", c.delayed, func() error { return bench.RunDelayedScale(ctx, out, c.quick, c.delayedSizes, c.serverProcess) }},
	}
}

// parseBenchFlags reads and checks bench's flags.
func parseBenchFlags(ctx context.Context, args []string) (*benchConfig, error) {
	c := &benchConfig{}
	o := &c.o
	fs := newFlagSet(ctx, "bench", "[-n N] [--mode interval|always|both] [--lateness-runs N] [--quick] [--pool] [--fairness] [--cron] [--workflow] [--trigger] [--cluster | --cluster-url URL] [--index [--index-sizes N,N]] [--enqueue-many] [--delayed-scale [--delayed-sizes N,N] [--server-process]] [--json]")
	fs.IntVar(&o.N, "n", 0, "runs per throughput figure in interval mode (default 100000, 2000 with -quick)")
	fs.IntVar(&o.AlwaysN, "always-n", 0, "runs per throughput figure in always mode (default n/20, at least 500)")
	mode := fs.String("mode", "both", "durability mode: interval, always or both")
	fs.IntVar(&o.LatenessRuns, "lateness-runs", 0, "delayed runs of the lateness figure, due over 5 s (default 5000: 1,000/s; 100 over 1 s with -quick)")
	fs.IntVar(&o.ArgsSize, "args-size", 0, "bytes of JSON args per run and per raw message (default 100)")
	fs.StringVar(&o.Dir, "dir", "", "data directory (default a temporary directory, removed afterwards)")
	fs.BoolVar(&c.quick, "quick", false, "small figures for a smoke run")
	fs.BoolVar(&o.SkipClaimFirst, "skip-claimfirst", false, "skip the end-to-end figure with every run claimed before its handler starts")
	fs.BoolVar(&c.pool, "pool", false, "also measure work pools (before the core figures)")
	fs.BoolVar(&c.fairness, "fairness", false, "also measure per-key fairness and keyed throughput of work pools (before the core figures)")
	fs.BoolVar(&c.cron, "cron", false, "also measure the cron evaluator (before the core figures)")
	fs.BoolVar(&c.wf, "workflow", false, "also measure durable workflows (before the core figures)")
	fs.BoolVar(&c.many, "enqueue-many", false, "also measure Enqueue from 10, 100 and 1000 goroutines beside raw synchronous publishes (before the core figures)")
	fs.BoolVar(&c.delayed, "delayed-scale", false, "also measure the delayed store with runs waiting (before the core figures)")
	fs.BoolVar(&c.serverProcess, "server-process", false, "--delayed-scale: run the server in a process of its own, as a deployment with failover does (default: embedded in the bench's process)")
	sizes := fs.String("delayed-sizes", "", "waiting runs of --delayed-scale, comma-separated (default 10000,100000,1000000; 1000,10000 with -quick)")
	fs.BoolVar(&o.SkipProfile, "skip-profile", false, "skip the profiled repeats that print where the time goes")
	fs.BoolVar(&c.cluster, "cluster", false, "also measure on a 3-node cluster started in this process (R3), beside raw R3 (before the core figures)")
	fs.StringVar(&c.clusterURL, "cluster-url", "", "measure on the running cluster at this URL (R3) instead of starting one (implies --cluster)")
	fs.IntVar(&c.clusterN, "cluster-n", 0, "runs per cluster throughput figure (default 20000, 2000 with -quick)")
	fs.DurationVar(&o.SyncEvery, "sync-every", 0, "fsync interval of the servers it starts in interval mode (default 10ms, the embedded default)")
	fs.BoolVar(&c.asJSON, "json", false, "print the core figures as one JSON array on stdout (one object per mode); the text goes to stderr")
	fs.BoolVar(&c.index, "index", false, "also measure the run index: List pages, counts and the repair sweep over a runs bucket of each --index-sizes (before the core figures)")
	indexSizes := fs.String("index-sizes", "100000,1000000", "runs bucket sizes of --index, comma-separated (each needs about 400 bytes of disk per record)")
	fs.BoolVar(&c.trig, "trigger", false, "also measure triggers beside EnqueueAsync (before the core figures)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, usageErrorf("bench: unexpected argument %q", pos[0])
	}
	o.Quick = c.quick
	if *sizes != "" {
		var ok bool
		if c.delayedSizes, ok = parseSizes(*sizes, false); !ok {
			return nil, usageErrorf("bench: --delayed-sizes %q: want positive numbers separated by commas", *sizes)
		}
	}
	switch *mode {
	case "both":
	case "interval":
		o.Modes = []embedded.Sync{embedded.SyncInterval}
	case "always":
		o.Modes = []embedded.Sync{embedded.SyncAlways}
	default:
		return nil, usageErrorf("bench: --mode %q: want interval, always or both", *mode)
	}
	if o.SyncEvery < 0 {
		return nil, usageErrorf("bench: --sync-every %s: must be positive", o.SyncEvery)
	}
	if c.index {
		var ok bool
		if c.indexSizes, ok = parseSizes(*indexSizes, true); !ok {
			return nil, usageErrorf("bench: --index-sizes %q: positive sizes in increasing order", *indexSizes)
		}
	}
	return c, nil
}

// parseSizes parses a comma-separated list of positive numbers, in
// increasing order when increasing is set.
func parseSizes(text string, increasing bool) ([]int, bool) {
	var sizes []int
	for _, f := range strings.Split(text, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, false
		}
		if increasing && len(sizes) > 0 && n <= sizes[len(sizes)-1] {
			return nil, false
		}
		sizes = append(sizes, n)
	}
	return sizes, true
}
