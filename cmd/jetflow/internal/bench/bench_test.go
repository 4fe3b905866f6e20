package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
)

// TestQuick runs the whole benchmark small, in both durability modes, and
// checks that it completes (every phase verifies that nothing was lost) and
// prints every figure and the SUMMARY line. It asserts no timings.
func TestQuick(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := Measure(ctx, Options{
		Quick: true, N: 2000, AlwaysN: 100, LatenessRuns: 20, LatenessSpread: 300 * time.Millisecond,
		Dir: t.TempDir(), SyncEvery: time.Second,
	}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Mode != embedded.SyncInterval || res[1].Mode != embedded.SyncAlways {
		t.Fatalf("results for modes %v, want interval and always", res)
	}
	for _, r := range res {
		figures := map[string]float64{
			"raw publish": r.RawPublish, "raw publish+consume": r.RawPublishConsume,
			"enqueue async": r.EnqueueAsync, "enqueue batch": r.EnqueueBatch, "enqueue concurrent": r.EnqueueConc, "e2e": r.EndToEnd,
			"enqueue ratio": r.EnqueueRatio(), "e2e ratio": r.EndToEndRatio(),
			"e2e cpu": float64(r.EndToEndCPU), "raw cpu": float64(r.RawPublishConsumeCPU),
			"lateness p50": float64(r.Lateness.P50), "lateness max": float64(r.Lateness.Max),
			"raw latency p50": float64(r.RawLatency.P50),
		}
		for name, v := range figures {
			if v <= 0 {
				t.Errorf("mode=%s: %s = %v, want > 0", r.Mode, name, v)
			}
		}
		if r.Lateness.N != 20 || r.RawLatency.N != 20 || r.LatenessBad != 0 {
			t.Errorf("mode=%s: lateness over %d runs (%d not success), raw latency over %d, want 20, 0, 20",
				r.Mode, r.Lateness.N, r.LatenessBad, r.RawLatency.N)
		}
		// A run is raw's message and at least one record write more: the
		// ceiling lies below 1. SyncAlways has no floor (the disk limits).
		if r.Mode == embedded.SyncAlways {
			if r.Floor.Write != 0 {
				t.Errorf("mode=always: floor %+v measured, want none", r.Floor)
			}
		} else if c := r.Floor.Ceiling(r.RawPublishConsumeCPU, 1); r.Floor.Write <= 0 || c <= 0 || c >= 1 || r.Floor.RecordSize < 100 {
			t.Errorf("mode=%s: floor %+v gives a ceiling of %.2f, want between 0 and 1", r.Mode, r.Floor, c)
		}
		if r.Cost.JobPublishes < 1 || r.Cost.Acks < 1 || r.Cost.RecordWrites < 1 {
			t.Errorf("mode=%s: cost %+v: every run needs a publish, an ack and a terminal record", r.Mode, r.Cost)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "SUMMARY interval: enqueue ") || !strings.Contains(last, "| always: enqueue ") {
		t.Errorf("last line %q is not the SUMMARY of both modes", last)
	}
	for _, want := range []string{"mode=interval  e2e no-op runs/s", "mode=always    e2e no-op runs/s", "raw publish+consume", "lateness (RunAt", "writes per run", "floor: raw record write"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// benchServer starts an embedded server (SyncInterval, file storage) for one
// benchmark call.
func benchServer(b *testing.B) string {
	b.Helper()
	s, err := embedded.Start(embedded.Options{Dir: b.TempDir(), SyncEvery: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	return s.ClientURL()
}

// BenchmarkRawPublishConsume: b.N messages async-published to a work-queue
// stream, then consumed and acked.
func BenchmarkRawPublishConsume(b *testing.B) {
	url := benchServer(b)
	b.ResetTimer()
	t, err := RawPublishConsume(context.Background(), url, b.N, 100)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rate(b.N, t.Publish+t.Consume), "msgs/s")
	b.ReportMetric(float64(per(t.PublishCPU+t.ConsumeCPU, b.N).Nanoseconds()), "cpu-ns/msg")
}

// BenchmarkEnqueue: b.N runs through producer.Batch, 1000 per call.
func BenchmarkEnqueue(b *testing.B) {
	url := benchServer(b)
	b.ResetTimer()
	d, err := EnqueueBatch(context.Background(), url, "benchenq", b.N, 100)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rate(b.N, d.Wall), "runs/s")
	b.ReportMetric(float64(per(d.CPU, b.N).Nanoseconds()), "cpu-ns/run")
}

// BenchmarkEndToEnd: b.N no-op runs enqueued with Batch while a worker runs
// them, until every record is success. ns/op includes starting the worker;
// runs/s is from the first enqueue to the last record. For profiles:
//
//	go test -run '^$' -bench EndToEnd -benchtime 100000x -cpuprofile cpu.out ./cmd/jetflow/internal/bench
func BenchmarkEndToEnd(b *testing.B) {
	url := benchServer(b)
	b.ResetTimer()
	e, err := EndToEnd(context.Background(), url, "benche2e", b.N, 100)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rate(b.N, e.Elapsed), "runs/s")
	b.ReportMetric(e.Cost.Wire, "wire-msgs/run")
	b.ReportMetric(float64(per(e.CPU, b.N).Nanoseconds()), "cpu-ns/run")
}

// BenchmarkEndToEndClaimFirst is BenchmarkEndToEnd with every run claimed before its handler starts.
func BenchmarkEndToEndClaimFirst(b *testing.B) {
	url := benchServer(b)
	b.ResetTimer()
	e, err := EndToEndClaimFirst(context.Background(), url, "benche2e", b.N, 100)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rate(b.N, e.Elapsed), "runs/s")
	b.ReportMetric(e.Cost.Wire, "wire-msgs/run")
	b.ReportMetric(float64(per(e.CPU, b.N).Nanoseconds()), "cpu-ns/run")
}

// BenchmarkEndToEndOverlapped is BenchmarkEndToEnd with the worker running
// while the runs are enqueued.
func BenchmarkEndToEndOverlapped(b *testing.B) {
	url := benchServer(b)
	b.ResetTimer()
	e, err := EndToEndOverlapped(context.Background(), url, "benche2e", b.N, 100)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rate(b.N, e.Elapsed), "runs/s")
	b.ReportMetric(rate(b.N, e.Handled), "handled/s")
	b.ReportMetric(e.Cost.Wire, "wire-msgs/run")
	b.ReportMetric(float64(per(e.CPU, b.N).Nanoseconds()), "cpu-ns/run")
}

// The workflow figures run end to end (quick sizes) and print each line.
func TestRunWorkflowQuick(t *testing.T) {
	// 1,000 waits never continuing take minutes under -race.
	defer func(q []int) { wfWaitsQuick = q }(wfWaitsQuick)
	wfWaitsQuick = []int{10, 100}
	var out strings.Builder
	if err := RunWorkflow(context.Background(), &out, true); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"3-step workflows", "1000 sequential steps", "100 waits, never continuing", "100 waits, continuing as new every 100",
		"resume after sleep", "parked/s", "SendEvent to the next step", "resume after a server restart"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q line in:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}

// TestCluster runs the cluster figures small on three clustered servers in
// this process: every run is checked (waitSuccess), the delayed runs all
// succeed, and the figures are printed. Not parallel: the phases it runs
// create R3 streams meanwhile. It asserts no timings.
func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := RunCluster(ctx, &out, ClusterOptions{N: 300, LatenessRuns: 20, SyncEvery: time.Second, KeepStreams: true})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"raw R3 publish+consume", "e2e no-op runs/s", "ratio", "cost:", "floor: raw R3 record write", "lateness", "raw R3 publish->consume latency", "lateness split: scheduler publish"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// The fairness figures run end to end (quick sizes) and print each line.
func TestRunFairnessQuick(t *testing.T) {
	var out strings.Builder
	if err := RunFairness(context.Background(), &out, true); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"pool without keys", "pool with keys (100 keys)", "key limit 2", "tenant B p99 with A / without A"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q line in:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}

// TestIndexQuick fills small runs buckets and checks that every index
// figure is printed at each size (each verifies its page came from the
// index and its counts add up). It asserts no timings.
func TestIndexQuick(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := RunIndex(ctx, &out, []int{3000, 12000})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []string{"3k", "12k"} {
		for _, want := range []string{"list page, state=failed", "list page, function", "counts (all functions)", "repair sweep (index candidates)", "scan: counts"} {
			if !strings.Contains(out.String(), "index "+size+"  "+want) {
				t.Errorf("no %q figure at %s", want, size)
			}
		}
	}
}

// TestMain starts every section's servers with a 1 s fsync interval (see
// SetSyncEvery): durability is not what these tests test. The test binary
// is the child of startServerProcess too.
func TestMain(m *testing.M) {
	if ServeIfChild() {
		return
	}
	SetSyncEvery(time.Second)
	os.Exit(m.Run())
}

// BenchmarkEnqueueMany: Enqueue from 1000 goroutines for 3 s, then raw
// synchronous publishes from as many. For profiles:
//
//	go test -run '^$' -bench EnqueueMany -benchtime 1x -cpuprofile cpu.out ./cmd/jetflow/internal/bench
func BenchmarkEnqueueMany(b *testing.B) {
	url := benchServer(b)
	b.ResetTimer()
	for range b.N {
		m, err := measureMany(context.Background(), url, ManyGoroutines, 3*time.Second, 100)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(m.Jetflow.Rate(), "runs/s")
		b.ReportMetric(m.Raw.Rate(), "raw-msgs/s")
		b.ReportMetric(m.Ratio(), "ratio")
		b.ReportMetric(float64(per(m.Jetflow.CPU, m.Jetflow.Calls).Nanoseconds()), "cpu-ns/run")
		b.ReportMetric(float64(per(m.Raw.CPU, m.Raw.Calls).Nanoseconds()), "raw-cpu-ns/msg")
	}
}

// The delayed store figures run end to end over a small waiting set and
// print their lines; every phase checks its runs (the lateness runs of
// both terms all started, none twice).
func TestRunDelayedScaleSmall(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if err := RunDelayedScale(context.Background(), &out, true, []int{500}, false); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"500 waiting", "first term lateness p50", "takeover lateness p50", "raw publish->consume p50", "per waiting run"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in:\n%s", want, out.String())
		}
	}
}

// A CPU profile is read back and charged to components: the samples of a
// loop that encodes JSON go mostly to encoding/json, and the shares add
// up to the whole.
func TestWhereTheTimeGoes(t *testing.T) {
	// The profile samples the whole process: wait (10 s at most) for what
	// the tests before left running (servers shutting down, streams being
	// removed) to go quiet, so that the loop's samples are most of them.
	quiet := time.Now().Add(10 * time.Second)
	for time.Now().Before(quiet) {
		cpu0 := cpuTime()
		time.Sleep(100 * time.Millisecond)
		if cpuTime()-cpu0 < 10*time.Millisecond {
			break
		}
	}
	sh, err := profiled(func() error {
		// 300 ms of this process's CPU (about 30 samples), however busy the
		// machine: wall time alone may give a loaded process few samples.
		cpu0, end := cpuTime(), time.Now().Add(20*time.Second)
		v := map[string]any{"a": []int{1, 2, 3}, "b": strings.Repeat("x", 100)}
		for cpuTime()-cpu0 < 300*time.Millisecond && time.Now().Before(end) {
			// Many encodings per look at the clock: its system call
			// would take a share of its own.
			for range 200 {
				if _, err := json.Marshal(v); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Skipf("no profile: %v", err) // go test -cpuprofile holds the profiler
	}
	// Under -race the runtime's share (the race detector's, the
	// scheduler's, what else the process runs) took 48-76% of the samples:
	// encoding/json must be named, and lead every other named component.
	sum, js, other := 0.0, 0.0, 0.0
	for _, s := range sh {
		sum += s.Fraction
		switch s.Component {
		case "encoding/json":
			js = s.Fraction
		case "Go runtime":
		default:
			other = max(other, s.Fraction)
		}
	}
	t.Logf("shares %s", fmtShares(sh))
	if len(sh) == 0 || sum < 0.999 || sum > 1.001 || js < 0.15 || js <= other {
		t.Fatalf("shares %s (sum %.3f), want encoding/json at least 15%% and ahead of every other named component", fmtShares(sh), sum)
	}
}

func TestRunTriggerQuick(t *testing.T) {
	var out strings.Builder
	if err := RunTrigger(context.Background(), &out, true); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"trigger EnqueueAsync", "trigger trigger, stream -> runs    2000 runs", "2000 runs made, 0 found existing", "trigger / EnqueueAsync"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q line in:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}

// BenchmarkEndToEndWithScheduler is BenchmarkEndToEnd with a scheduler
// leading meanwhile: its run indexer follows every record write.
func BenchmarkEndToEndWithScheduler(b *testing.B) { benchWithScheduler(b, EndToEndWithScheduler) }

// BenchmarkEndToEndClaimFirstWithScheduler is BenchmarkEndToEndClaimFirst
// with a scheduler leading meanwhile (the default on a cluster).
func BenchmarkEndToEndClaimFirstWithScheduler(b *testing.B) {
	benchWithScheduler(b, EndToEndClaimFirstWithScheduler)
}

// benchWithScheduler runs an end-to-end phase with a scheduler leading and
// reports its rate, the index's, the index entries a run and the CPU.
func benchWithScheduler(b *testing.B, phase func(ctx context.Context, url, prefix string, n, size int) (E2E, error)) {
	url := benchServer(b)
	b.ResetTimer()
	e, err := phase(context.Background(), url, "benche2e", b.N, 100)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rate(b.N, e.Elapsed), "runs/s")
	b.ReportMetric(rate(b.N, e.Indexed), "indexed/s")
	b.ReportMetric(e.IndexEntries, "entries/run")
	b.ReportMetric(float64(per(e.CPU, b.N).Nanoseconds()), "cpu-ns/run")
}

// BenchmarkLateness is the bench's lateness phase alone, on a fresh
// embedded server with the embedded defaults (fsync every 10 ms; set
// JETFLOW_BENCH_SYNC_EVERY, a duration, to change it): 5,000 delayed runs
// due over 5 s, once per iteration (run it with -benchtime 1x -count N).
// It reports handler start minus due time and the scheduler's share (the
// run's message seen minus due time), in ms.
func BenchmarkLateness(b *testing.B) {
	every, err := time.ParseDuration(cmp.Or(os.Getenv("JETFLOW_BENCH_SYNC_EVERY"), "0s"))
	if err != nil {
		b.Fatalf("JETFLOW_BENCH_SYNC_EVERY: %v", err)
	}
	for range b.N {
		s, err := embedded.Start(embedded.Options{Dir: b.TempDir(), SyncEvery: every})
		if err != nil {
			b.Fatal(err)
		}
		r, err := Lateness(context.Background(), s.ClientURL(), "benchlate", 5000, 100, 3*time.Second, 5*time.Second)
		s.Stop()
		if err != nil {
			b.Fatal(err)
		}
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(r.Lateness.P50), "p50-ms")
		b.ReportMetric(ms(r.Lateness.P99), "p99-ms")
		b.ReportMetric(ms(r.Lateness.Max), "max-ms")
		b.ReportMetric(ms(r.Dispatch.P99), "dispatch-p99-ms")
	}
}
