package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// replicas is the replica count of the streams and buckets the phases
// create: 0 (one) on a single server, 3 while RunCluster runs (which
// therefore runs alone).
var replicas atomic.Int32

// benchStreams is the streams configuration of a phase's prefix.
func benchStreams(prefix string) streams.Config {
	return streams.Config{Prefix: prefix, Replicas: int(replicas.Load())}
}

// ClusterOptions configure RunCluster.
type ClusterOptions struct {
	// URL of a running cluster (every node's client URL, comma
	// separated); empty: start three clustered servers in this process.
	URL string
	// N runs (and raw messages) per throughput figure. Default 20,000.
	N int
	// LatenessRuns delayed runs of the lateness figure. Default 1,000.
	LatenessRuns int
	ArgsSize     int
	// SyncEvery is the servers' fsync interval (default 10 ms). Tests
	// under -race set 1 s: nats-server v2.15.2 arms a new stream's sync
	// timer before it stores it, a race a short interval can hit.
	SyncEvery time.Duration
	// KeepStreams keeps each phase's streams and buckets until the end
	// (tests under -race: deleting a stream while its sync timer may fire
	// trips a data race inside nats-server). By default each phase's are
	// deleted after it, so that the next runs beside its own only, as a
	// deployment's single prefix does: three servers syncing every stream
	// of every phase before it every 10 ms weigh on the later figures.
	KeepStreams bool
}

// RunCluster measures jetflow on a three-node cluster, with every stream
// and bucket replicated three times (R3), beside raw JetStream
// publish-then-consume on an R3 work-queue stream in the same run: raw,
// jetflow end to end (the worker's default on a replicated stream: every
// run claimed before it starts), raw again (the ratios are against the mean
// of both raw runs), jetflow with runs claimed late (ClaimAfter set, an
// opt-in on a cluster), jetflow with a scheduler leading (its run indexer
// following every record write), and delayed-run lateness. Started in this process,
// the three servers share this machine's cores with the clients: the
// ratio, not the rate, is the figure to compare with a real cluster.
func RunCluster(ctx context.Context, out io.Writer, o ClusterOptions) error {
	if o.N == 0 {
		o.N = 20_000
	}
	if o.LatenessRuns == 0 {
		o.LatenessRuns = 1_000
	}
	if o.ArgsSize == 0 {
		o.ArgsSize = 100
	}
	url, where := o.URL, "a cluster at "+o.URL
	if url == "" {
		u, stop, err := startCluster(ctx, cmp.Or(o.SyncEvery, time.Duration(syncEvery.Load())))
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		defer stop()
		url, where = u, "three clustered servers in this process"
	}
	replicas.Store(3)
	defer replicas.Store(0)
	line := func(format string, a ...any) { fmt.Fprintf(out, "cluster "+format+"\n", a...) }
	line("%s; R3 streams and buckets; %d runs per figure, args %d bytes", where, o.N, o.ArgsSize)

	raw, err := RawPublishConsume(ctx, url, o.N, o.ArgsSize)
	if err != nil {
		return fmt.Errorf("cluster raw: %w", err)
	}
	done := func(prefix string) error {
		if o.KeepStreams {
			return nil
		}
		return dropPrefix(url, prefix)
	}
	if !o.KeepStreams {
		// A stream that stays while the phases delete theirs (keepStream).
		if err := keep(url); err != nil {
			return err
		}
		defer func() { _ = dropWhere(url, func(n string) bool { return n == keepStream }) }()
	}
	e2e, err := EndToEnd(ctx, url, "benchcle2e", o.N, o.ArgsSize)
	if err != nil {
		return fmt.Errorf("cluster end to end: %w", err)
	}
	if err := done("benchcle2e"); err != nil {
		return err
	}
	raw2, err := RawPublishConsume(ctx, url, o.N, o.ArgsSize)
	if err != nil {
		return fmt.Errorf("cluster raw again: %w", err)
	}
	rawRate := (rate(o.N, raw.Publish+raw.Consume) + rate(o.N, raw2.Publish+raw2.Consume)) / 2
	e2eRate := rate(o.N, e2e.Elapsed)
	line("raw R3 publish+consume %s msgs/s (%s before, %s after)", fmtRate(rawRate),
		fmtRate(rate(o.N, raw.Publish+raw.Consume)), fmtRate(rate(o.N, raw2.Publish+raw2.Consume)))
	line("e2e no-op runs/s %s   raw R3 publish+consume %s/s   ratio %.2f (target >= 0.40)   cpu %s/run (raw %s/msg)",
		fmtRate(e2eRate), fmtRate(rawRate), ratio(e2eRate, rawRate), fmtDur(per(e2e.CPU, o.N)),
		fmtDur(per(raw.PublishCPU+raw.ConsumeCPU, o.N)))
	line("cost: %s", e2e.Cost)
	if t := e2e.claimText(); t != "" {
		line("%s", t)
	}
	// Runs claimed late (ClaimAfter set: an opt-in on a cluster, with the
	// limit docs/scaling.md describes).
	lc, err := EndToEndLateClaims(ctx, url, "benchcllate2e", o.N, o.ArgsSize)
	if err != nil {
		return fmt.Errorf("cluster end to end, late claims: %w", err)
	}
	if err := done("benchcllate2e"); err != nil {
		return err
	}
	line("e2e late claims (ClaimAfter set, opt-in) runs/s %s   raw R3 publish+consume %s/s   ratio %.2f   cpu %s/run",
		fmtRate(rate(o.N, lc.Elapsed)), fmtRate(rawRate), ratio(rate(o.N, lc.Elapsed), rawRate), fmtDur(per(lc.CPU, o.N)))
	// With a scheduler leading, as a deployment runs one: its run indexer
	// reads every record write and stores an index entry for each.
	sc, err := EndToEndWithScheduler(ctx, url, "benchclsched", o.N, o.ArgsSize)
	if err != nil {
		return fmt.Errorf("cluster end to end with a scheduler: %w", err)
	}
	if err := done("benchclsched"); err != nil {
		return err
	}
	line("e2e with a scheduler (claimed first, the default) runs/s %s   raw R3 publish+consume %s/s   ratio %.2f   cpu %s/run, the scheduler's included (%.2f index messages stored a run: the entries of consecutive writes batched, %.0f record writes a run; the index caught up %s after the first enqueue, the runs were done at %s)",
		fmtRate(rate(o.N, sc.Elapsed)), fmtRate(rawRate), ratio(rate(o.N, sc.Elapsed), rawRate), fmtDur(per(sc.CPU, o.N)), sc.IndexEntries, sc.Cost.RecordWrites, fmtDur(sc.Indexed), fmtDur(sc.Elapsed))
	floor, err := measureFloor(ctx, url, o.N, o.ArgsSize)
	if err != nil {
		return fmt.Errorf("cluster floor: %w", err)
	}
	rawCPU := per(raw.PublishCPU+raw.ConsumeCPU+raw2.PublishCPU+raw2.ConsumeCPU, 2*o.N)
	line("floor: raw R3 record write %s/write (%d B records, async, a subject each, expected sequence 0); cpu ratio if a run cost raw's message + its %.0f record writes and nothing more %.2f (measured %.2f); late claims (1 write) %.2f (measured %.2f)",
		fmtDur(floor.Write), floor.RecordSize, e2e.Cost.RecordWrites, floor.Ceiling(rawCPU, max(1, int(e2e.Cost.RecordWrites+0.5))), ratio(float64(rawCPU), float64(per(e2e.CPU, o.N))),
		floor.Ceiling(rawCPU, 1), ratio(float64(rawCPU), float64(per(lc.CPU, o.N))))
	late, err := Lateness(ctx, url, "benchcllate", o.LatenessRuns, o.ArgsSize, 2*time.Second, 3*time.Second)
	if err != nil {
		return fmt.Errorf("cluster lateness: %w", err)
	}
	// Raw R3 latency right after, for comparison; the lateness line is
	// printed even if it fails.
	rawLine := "raw R3 publish->consume latency not measured"
	rawLate, rawErr := RawLatency(ctx, url, o.LatenessRuns, o.ArgsSize, 3*time.Second)
	if rawErr == nil {
		rawLine = fmt.Sprintf("raw R3 publish->consume latency p50 %s p99 %s max %s", fmtDur(rawLate.P50), fmtDur(rawLate.P99), fmtDur(rawLate.Max))
	}
	line("lateness (RunAt, %d runs over 3s) p50 %s p99 %s max %s; %d not recorded success   %s",
		late.N, fmtDur(late.Lateness.P50), fmtDur(late.Lateness.P99), fmtDur(late.Lateness.Max), late.NotSuccess, rawLine)
	line("%s", splitLine(late.Dispatch))
	if rawErr != nil {
		return fmt.Errorf("cluster raw latency: %w", rawErr)
	}
	if late.NotSuccess > 0 {
		return fmt.Errorf("cluster lateness: %d of %d runs not recorded success", late.NotSuccess, late.N)
	}
	return nil
}

// startCluster starts three clustered embedded servers (file storage in a
// temporary directory) and returns their client URLs, comma separated.
func startCluster(ctx context.Context, syncEvery time.Duration) (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "jetflow-bench-cluster-")
	if err != nil {
		return "", nil, err
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
	}
	srvs := make([]*embedded.Server, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range srvs {
		var routes []string
		for j, p := range ports {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			srvs[i], errs[i] = embedded.Start(embedded.Options{
				Dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), ServerName: fmt.Sprintf("bench-n%d", i),
				Cluster:      &embedded.Cluster{Name: "bench", Host: "127.0.0.1", Port: ports[i], Routes: routes},
				ReadyTimeout: 30 * time.Second, SyncEvery: syncEvery,
			})
		}()
	}
	wg.Wait()
	stop = func() {
		for _, s := range srvs {
			if s != nil {
				s.Stop()
			}
		}
		os.RemoveAll(dir)
	}
	if err := errors.Join(errs...); err != nil {
		stop()
		return "", nil, err
	}
	urls := make([]string, 3)
	for i, s := range srvs {
		urls[i] = s.ClientURL()
	}
	url = strings.Join(urls, ",")
	// JetStream is ready once the meta group has a leader: an R3 stream
	// can be created.
	nc, js, err := connect(url, "bench-cluster-ready")
	if err != nil {
		stop()
		return "", nil, err
	}
	defer nc.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, cerr := js.CreateStream(cctx, jetstream.StreamConfig{Name: "BENCH_READY", Subjects: []string{"bench.ready"}, Replicas: 3})
		if cerr == nil {
			cerr = js.DeleteStream(cctx, "BENCH_READY")
		}
		cancel()
		if cerr == nil {
			return url, stop, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return "", nil, fmt.Errorf("cluster not ready: %w", cerr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// dropPrefix deletes the streams and buckets of a phase's prefix (and only
// those: the cluster may be a user's, --cluster-url).
func dropPrefix(url, prefix string) error {
	return dropWhere(url, func(n string) bool {
		return strings.HasPrefix(n, strings.ToUpper(prefix)+"_") || strings.HasPrefix(n, "KV_"+prefix+"_")
	})
}
