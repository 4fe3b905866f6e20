package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jetflow-dev/jetflow/cmd/jetflow/internal/bench"
	"github.com/jetflow-dev/jetflow/embedded"
)

func init() {
	register("bench", "measure jetflow beside raw JetStream (embedded server, both durability modes)", runBench)
}

func runBench(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "bench", "[-n N] [--mode interval|always|both] [--lateness-runs N] [--quick] [--pool] [--fairness] [--cron] [--workflow] [--trigger] [--cluster | --cluster-url URL] [--index [--index-sizes N,N]] [--enqueue-many] [--delayed-scale [--delayed-sizes N,N]] [--json]")
	n := fs.Int("n", 0, "runs per throughput figure in interval mode (default 100000, 2000 with -quick)")
	alwaysN := fs.Int("always-n", 0, "runs per throughput figure in always mode (default n/20, at least 500)")
	mode := fs.String("mode", "both", "durability mode: interval, always or both")
	late := fs.Int("lateness-runs", 0, "delayed runs of the lateness figure, due over 5 s (default 5000: 1,000/s; 100 over 1 s with -quick)")
	size := fs.Int("args-size", 0, "bytes of JSON args per run and per raw message (default 100)")
	dir := fs.String("dir", "", "data directory (default a temporary directory, removed afterwards)")
	quick := fs.Bool("quick", false, "small figures for a smoke run")
	claimFirst := fs.Bool("skip-claimfirst", false, "skip the end-to-end figure with every run claimed before its handler starts")
	pool := fs.Bool("pool", false, "also measure work pools (before the core figures)")
	fairness := fs.Bool("fairness", false, "also measure per-key fairness and keyed throughput of work pools (before the core figures)")
	cron := fs.Bool("cron", false, "also measure the cron evaluator (before the core figures)")
	wf := fs.Bool("workflow", false, "also measure durable workflows (before the core figures)")
	many := fs.Bool("enqueue-many", false, "also measure Enqueue from 10, 100 and 1000 goroutines beside raw synchronous publishes (before the core figures)")
	delayed := fs.Bool("delayed-scale", false, "also measure the delayed store with runs waiting (before the core figures)")
	sizes := fs.String("delayed-sizes", "", "waiting runs of --delayed-scale, comma-separated (default 10000,100000,1000000; 1000,10000 with -quick)")
	noProfile := fs.Bool("skip-profile", false, "skip the profiled repeats that print where the time goes")
	cluster := fs.Bool("cluster", false, "also measure on a 3-node cluster started in this process (R3), beside raw R3 (before the core figures)")
	clusterURL := fs.String("cluster-url", "", "measure on the running cluster at this URL (R3) instead of starting one (implies --cluster)")
	clusterN := fs.Int("cluster-n", 0, "runs per cluster throughput figure (default 20000, 2000 with -quick)")
	syncEvery := fs.Duration("sync-every", 0, "fsync interval of the servers it starts in interval mode (default 10ms, the embedded default)")
	asJSON := fs.Bool("json", false, "print the core figures as one JSON array on stdout (one object per mode); the text goes to stderr")
	index := fs.Bool("index", false, "also measure the run index: List pages, counts and the repair sweep over a runs bucket of each --index-sizes (before the core figures)")
	indexSizes := fs.String("index-sizes", "100000,1000000", "runs bucket sizes of --index, comma-separated (each needs about 400 bytes of disk per record)")
	trig := fs.Bool("trigger", false, "also measure triggers beside EnqueueAsync (before the core figures)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("bench: unexpected argument %q", pos[0])
	}
	var delayedSizes []int
	if *sizes != "" {
		for _, f := range strings.Split(*sizes, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || v <= 0 {
				return usageErrorf("bench: --delayed-sizes %q: want positive numbers separated by commas", *sizes)
			}
			delayedSizes = append(delayedSizes, v)
		}
	}
	o := bench.Options{N: *n, AlwaysN: *alwaysN, LatenessRuns: *late, ArgsSize: *size, Dir: *dir, Quick: *quick, SkipClaimFirst: *claimFirst, SkipProfile: *noProfile}
	switch *mode {
	case "both":
	case "interval":
		o.Modes = []embedded.Sync{embedded.SyncInterval}
	case "always":
		o.Modes = []embedded.Sync{embedded.SyncAlways}
	default:
		return usageErrorf("bench: --mode %q: want interval, always or both", *mode)
	}
	if *syncEvery < 0 {
		return usageErrorf("bench: --sync-every %s: must be positive", *syncEvery)
	}
	bench.SetSyncEvery(*syncEvery)
	o.SyncEvery = *syncEvery
	out := stdout(ctx)
	if *asJSON {
		out = stderr(ctx)
	}
	if *pool {
		if err := bench.RunPool(ctx, out, *quick); err != nil {
			return fmt.Errorf("bench pool: %w", err)
		}
	}
	if *fairness {
		if err := bench.RunFairness(ctx, out, *quick); err != nil {
			return fmt.Errorf("bench fairness: %w", err)
		}
	}
	if *cron {
		if err := bench.RunCron(ctx, out, *quick); err != nil {
			return fmt.Errorf("bench cron: %w", err)
		}
	}
	if *index {
		var sizes []int
		for _, f := range strings.Split(*indexSizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || (len(sizes) > 0 && n <= sizes[len(sizes)-1]) {
				return usageErrorf("bench: --index-sizes %q: positive sizes in increasing order", *indexSizes)
			}
			sizes = append(sizes, n)
		}
		if err := bench.RunIndex(ctx, out, sizes); err != nil {
			return fmt.Errorf("bench index: %w", err)
		}
	}
	if *wf {
		if err := bench.RunWorkflow(ctx, out, *quick); err != nil {
			return fmt.Errorf("bench workflow: %w", err)
		}
	}
	if *trig {
		if err := bench.RunTrigger(ctx, out, *quick); err != nil {
			return fmt.Errorf("bench trigger: %w", err)
		}
	}
	if *cluster || *clusterURL != "" {
		co := bench.ClusterOptions{URL: *clusterURL, N: *clusterN}
		if *quick && co.N == 0 {
			co.N, co.LatenessRuns = 2000, 100
		}
		if err := bench.RunCluster(ctx, out, co); err != nil {
			return fmt.Errorf("bench cluster: %w", err)
		}
	}
	if *many {
		if err := bench.RunEnqueueMany(ctx, out, *quick); err != nil {
			return fmt.Errorf("bench enqueue-many: %w", err)
		}
	}
	if *delayed {
		if err := bench.RunDelayedScale(ctx, out, *quick, delayedSizes); err != nil {
			return fmt.Errorf("bench delayed-scale: %w", err)
		}
	}
	// The core figures come last, so that SUMMARY is the last line.
	res, err := bench.Measure(ctx, o, out)
	if err != nil || !*asJSON {
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
