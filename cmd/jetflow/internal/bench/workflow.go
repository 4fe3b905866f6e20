package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

type wfBenchSteps struct {
	K int `json:"k"`
}

type wfBenchSleep struct {
	Due time.Time `json:"due"`
}

type wfBenchNone struct{}

// The workflow figures' state: counters and the latencies their last steps
// report (one bench at a time).
var (
	wfBenchDone    atomic.Int64
	wfBenchPlain   atomic.Int64
	wfBenchLatMu   sync.Mutex
	wfBenchLat     []time.Duration
	wfBenchPlainFn = jetflow.Define[wfBenchSteps]("bench.wf.plain")
)

func wfBenchNote(d time.Duration) {
	wfBenchLatMu.Lock()
	wfBenchLat = append(wfBenchLat, d)
	wfBenchLatMu.Unlock()
}

func wfBenchTake() []time.Duration {
	wfBenchLatMu.Lock()
	defer wfBenchLatMu.Unlock()
	out := wfBenchLat
	wfBenchLat = nil
	return out
}

func wfNoop(context.Context) (int, error) { return 0, nil }

var (
	// K no-op inline steps; the last one counts the workflow as done (as
	// the plain runs' handler counts each run).
	wfBenchStepsDef = workflow.Define("bench.wf.steps", func(wf *workflow.Context, in wfBenchSteps) (int, error) {
		for i := range in.K {
			fn := wfNoop
			if i == in.K-1 {
				fn = func(context.Context) (int, error) { wfBenchDone.Add(1); return 0, nil }
			}
			if _, err := workflow.Step(wf, fmt.Sprintf("s%d", i), fn); err != nil {
				return 0, err
			}
		}
		return in.K, nil
	})
	// A durable sleep until Due, then a step that reports its lateness.
	wfBenchSleepDef = workflow.Define("bench.wf.sleep", func(wf *workflow.Context, in wfBenchSleep) (int, error) {
		wf.SleepUntil(in.Due)
		_, err := workflow.Step(wf, "woke", func(context.Context) (int, error) {
			wfBenchNote(time.Since(in.Due))
			return 0, nil
		})
		return 0, err
	})
	// An await of event "go", whose payload is when it was sent, then a
	// step that reports how long after the send it started.
	wfBenchEventDef = workflow.Define("bench.wf.event", func(wf *workflow.Context, _ wfBenchNone) (int, error) {
		sent, err := workflow.AwaitEvent[time.Time](wf, "go", time.Minute)
		if err != nil {
			return 0, err
		}
		_, err = workflow.Step(wf, "got", func(context.Context) (int, error) {
			wfBenchNote(time.Since(sent))
			return 0, nil
		})
		return 0, err
	})
)

// RunWorkflow measures durable workflows on a fresh embedded server
// (default durability), in one process (producer, worker, scheduler), and
// prints each figure beside raw JetStream publish-then-consume and plain
// runs measured in the same run:
//   - N workflows of 3 no-op inline steps (started 32 at a time, timed to
//     the last one's end) against 3N plain no-op runs (EnqueueAsync), as
//     workflows/s beside plain runs/s ÷ 3;
//   - the cost of one step in workflows of 10, 100 and 1000 sequential
//     steps (one workflow each), which must stay flat;
//   - one workflow that waits n times (wfWaitsCosts);
//   - the lateness of the first step after a durable sleep (M workflows
//     due over 2 s);
//   - P workflows that start and sleep for an hour, from the first Start
//     to the last park, as parked/s beside the 3-step workflows/s;
//   - the delay from SendEvent to the step after the await (M workflows).
//
// N is 2,000, M 500 and P 10,000 (200, 50 and 1,000 when quick).
func RunWorkflow(ctx context.Context, out io.Writer, quick bool) error {
	n, m, parkers := 2_000, 500, 10_000
	if quick {
		n, m, parkers = 200, 50, 1_000
	}
	rs, err := startRestartable("wf")
	if err != nil {
		return err
	}
	defer rs.stop()
	srv := rs.srv
	line := func(format string, a ...any) { fmt.Fprintf(out, "workflow "+format+"\n", a...) }

	raw, err := RawPublishConsume(ctx, srv.ClientURL(), 3*n, 100)
	if err != nil {
		return fmt.Errorf("raw: %w", err)
	}
	rawRate, rawCPU := rate(3*n, raw.Publish+raw.Consume), per(raw.PublishCPU+raw.ConsumeCPU, 3*n)

	scfg := streams.Config{Prefix: "benchwf"}
	jss, closeAll, err := connectEach(srv.ClientURL(), "bench-wf-worker", "bench-wf-producer", "bench-wf-scheduler")
	if err != nil {
		return err
	}
	defer closeAll()
	wjs, pjs, sjs := jss[0], jss[1], jss[2]

	stopWorker, err := startWorker(ctx, wjs, scfg, func(w *worker.Worker) error {
		worker.Handle(w, wfBenchPlainFn, func(context.Context, *worker.Job[wfBenchSteps]) error { wfBenchPlain.Add(1); return nil }, benchOptions)
		return errors.Join(
			workflow.Register(w, wfBenchStepsDef, workflow.RegisterOptions{Concurrency: 64}),
			workflow.Register(w, wfBenchSleepDef, workflow.RegisterOptions{Concurrency: 64}),
			workflow.Register(w, wfBenchEventDef, workflow.RegisterOptions{Concurrency: 64}),
			workflow.Register(w, wfWaitsDef, workflow.RegisterOptions{Concurrency: 64}),
			workflow.Register(w, wfWaitsUncachedDef, workflow.RegisterOptions{Concurrency: 64, CachedExecutions: -1}),
			workflow.Register(w, wfRestartDef, workflow.RegisterOptions{Concurrency: 64}))
	})
	if err != nil {
		return err
	}
	defer stopWorker()
	s, err := scheduler.New(ctx, sjs, scheduler.Config{Streams: scfg, LeaseTTL: time.Second})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(sctx)
	}()
	p, err := producer.New(ctx, pjs, producer.Config{Streams: scfg})
	if err != nil {
		return err
	}
	if err := poolBenchWait(ctx, time.Minute, s.IsLeader); err != nil {
		return fmt.Errorf("scheduler leader: %w", err)
	}

	// 3N plain runs.
	wfBenchPlain.Store(0)
	start, cpu := time.Now(), cpuTime()
	pend := make([]*producer.Pending, 0, 3*n)
	for i := range 3 * n {
		pd, err := p.EnqueueAsync(ctx, wfBenchPlainFn.With(wfBenchSteps{K: i}))
		if err != nil {
			return fmt.Errorf("plain runs: %w", err)
		}
		pend = append(pend, pd)
	}
	for _, pd := range pend {
		if err := pd.Wait(ctx); err != nil {
			return fmt.Errorf("plain runs: %w", err)
		}
	}
	if err := poolBenchWait(ctx, 10*time.Minute, func() bool { return wfBenchPlain.Load() >= int64(3*n) }); err != nil {
		return fmt.Errorf("plain runs: %d of %d ran: %w", wfBenchPlain.Load(), 3*n, err)
	}
	plainRate, plainCPU := rate(3*n, time.Since(start)), per(cpuTime()-cpu, 3*n)

	// N workflows of 3 steps.
	wfBenchDone.Store(0)
	wBefore, err := wfWrites(ctx, pjs, scfg)
	if err != nil {
		return err
	}
	start, cpu = time.Now(), cpuTime()
	if err := wfBenchStart(ctx, n, func(ctx context.Context, i int) error {
		_, err := workflow.Start(ctx, p, wfBenchStepsDef, wfBenchSteps{K: 3})
		return err
	}); err != nil {
		return fmt.Errorf("3-step workflows: %w", err)
	}
	if err := poolBenchWait(ctx, 10*time.Minute, func() bool { return wfBenchDone.Load() >= int64(n) }); err != nil {
		return fmt.Errorf("3-step workflows: %d of %d ended: %w", wfBenchDone.Load(), n, err)
	}
	wfRate, wfCPU := rate(n, time.Since(start)), per(cpuTime()-cpu, n)
	// Writes of the workflows (the purge runs they schedule are due after
	// the retention period: their later writes are not counted).
	if err := poolBenchWait(ctx, time.Minute, func() bool {
		st, err := streamInfo(ctx, pjs, streams.KVStream(scfg.WithDefaults().RunsBucket()))
		return err == nil && st.LastSeq > 0 // settle: outcome writes are asynchronous
	}); err != nil {
		return err
	}
	wAfter, err := wfWrites(ctx, pjs, scfg)
	if err != nil {
		return err
	}
	line("raw publish+consume %s msg/s (cpu %s/msg); plain no-op runs %s runs/s (%s of raw), cpu %s/run", fmtRate(rawRate), fmtDur(rawCPU), fmtRate(plainRate), trimFloat(ratio(plainRate, rawRate)), fmtDur(plainCPU))
	line("3-step workflows %s /s, cpu %s/workflow; 3 plain runs %s /s; ratio %s (target >= 0.5)", fmtRate(wfRate), fmtDur(wfCPU), fmtRate(plainRate/3), trimFloat(ratio(wfRate, plainRate/3)))
	line("writes per 3-step workflow %.1f: %s (3 plain runs: 6, a message and a record each)", wAfter.total(wBefore, n), wAfter.describe(wBefore, n))

	// The cost of a step at 10, 100 and 1000 steps.
	for _, k := range []int{10, 100, 1000} {
		wfBenchDone.Store(0)
		start := time.Now()
		if _, err := workflow.Start(ctx, p, wfBenchStepsDef, wfBenchSteps{K: k}); err != nil {
			return err
		}
		if err := poolBenchWait(ctx, 10*time.Minute, func() bool { return wfBenchDone.Load() >= 1 }); err != nil {
			return fmt.Errorf("%d-step workflow: %w", k, err)
		}
		line("%d sequential steps: %s per step", k, fmtDur(per(time.Since(start), k)))
	}

	// One workflow that waits n times (an event each time).
	sizes := []int{10, 100, 1_000, 10_000}
	if quick {
		sizes = wfWaitsQuick
	}
	if err := wfWaitsCosts(ctx, out, p, pjs, scfg, sizes, wfWaitsEvery, wfWaitsPlainMax); err != nil {
		return err
	}

	// Resume after a durable sleep.
	wfBenchTake()
	first := time.Now().Add(time.Second)
	if err := wfBenchStart(ctx, m, func(ctx context.Context, i int) error {
		due := first.Add(2 * time.Second * time.Duration(i) / time.Duration(m))
		_, err := workflow.Start(ctx, p, wfBenchSleepDef, wfBenchSleep{Due: due})
		return err
	}); err != nil {
		return fmt.Errorf("sleeping workflows: %w", err)
	}
	if err := poolBenchWait(ctx, 5*time.Minute, func() bool {
		wfBenchLatMu.Lock()
		defer wfBenchLatMu.Unlock()
		return len(wfBenchLat) >= m
	}); err != nil {
		return fmt.Errorf("sleeping workflows: %w", err)
	}
	sl := percentiles(wfBenchTake())
	line("resume after sleep (%d): lateness p50 %s p99 %s max %s (target p99 < 25ms)", sl.N, fmtDur(sl.P50), fmtDur(sl.P99), fmtDur(sl.Max))

	// Parking: workflows that start and sleep for an hour, beside the
	// 3-step workflows above; once parked they hold nothing in the process
	// that runs them.
	before := procMem()
	pBefore, err := wfWrites(ctx, pjs, scfg)
	if err != nil {
		return err
	}
	took, _, err := wfBenchPark(ctx, p, pjs, scfg, parkers)
	if err != nil {
		return err
	}
	pAfter, err := wfWrites(ctx, pjs, scfg)
	if err != nil {
		return err
	}
	after := procMem()
	parkRate := rate(parkers, took)
	// 3-step workflows again, at once after: the load of a shared machine
	// changes over the minutes between the first figure and this one.
	stepsRate, err := wfBench3Steps(ctx, p, n)
	if err != nil {
		return err
	}
	line("parking (%d workflows that start, then sleep an hour): %s parked/s; 3-step workflows %s /s just after (%s at the start); ratio %s (target >= 0.5)",
		parkers, fmtRate(parkRate), fmtRate(stepsRate), fmtRate(wfRate), trimFloat(ratio(parkRate, stepsRate)))
	line("writes per parked workflow %.1f: %s", pAfter.total(pBefore, parkers), pAfter.describe(pBefore, parkers))
	line("%d workflows asleep: goroutines %d -> %d, heap %.1f -> %.1f MB of this process, the embedded nats-server's state of their keys included (target: bounded whatever the workflows asleep; the worker keeps at most %d executions, a goroutine each, and 1024 parked journals per definition)",
		parkers, before.goroutines, after.goroutines, before.heapMB, after.heapMB, workflow.DefaultCachedExecutions)

	// SendEvent to the next step.
	ids := make([]string, m)
	if err := wfBenchStart(ctx, m, func(ctx context.Context, i int) error {
		id, err := workflow.Start(ctx, p, wfBenchEventDef, wfBenchNone{})
		ids[i] = id
		return err
	}); err != nil {
		return fmt.Errorf("awaiting workflows: %w", err)
	}
	// Each waits once its first segment has parked on the await.
	if err := poolBenchWait(ctx, 5*time.Minute, func() bool {
		for _, id := range ids {
			st, err := workflow.Get(ctx, p, id)
			if err != nil || !st.Waiting {
				return false
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("awaiting workflows: %w", err)
	}
	// At a steady 200 events/s (a burst measures its own queue instead).
	tick := time.NewTicker(5 * time.Millisecond)
	for i := range m {
		<-tick.C
		go func() {
			if err := workflow.SendEvent(ctx, p, ids[i], "go", time.Now()); err != nil {
				fmt.Fprintln(out, "workflow send event:", err)
			}
		}()
	}
	tick.Stop()
	if err := poolBenchWait(ctx, 5*time.Minute, func() bool {
		wfBenchLatMu.Lock()
		defer wfBenchLatMu.Unlock()
		return len(wfBenchLat) >= m
	}); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	ev := percentiles(wfBenchTake())
	line("SendEvent to the next step (%d at 200/s): p50 %s p99 %s max %s (target p99 < 25ms)", ev.N, fmtDur(ev.P50), fmtDur(ev.P99), fmtDur(ev.Max))

	// Resumes after a server restart, last: the server stops while M
	// workflows sleep, due over the restart.
	rf, err := wfBenchRestart(ctx, p, pjs, scfg, rs.restart, m, time.Second)
	if err != nil {
		return err
	}
	line("resume after a server restart (%d of %d due after it stopped; down %s): lateness from due or back p50 %s p99 %s max %s (target max < worker ReplayGrace + 1s = %s)",
		rf.affected, m, fmtDur(rf.down), fmtDur(rf.late.P50), fmtDur(rf.late.P99), fmtDur(rf.late.Max), fmtDur(worker.DefaultReplayGrace+time.Second))
	return nil
}

// wfBench3Steps is the rate of n workflows of 3 no-op steps, started 32 at
// a time and timed to the last one's end.
func wfBench3Steps(ctx context.Context, p *producer.Producer, n int) (float64, error) {
	wfBenchDone.Store(0)
	start := time.Now()
	if err := wfBenchStart(ctx, n, func(ctx context.Context, i int) error {
		_, err := workflow.Start(ctx, p, wfBenchStepsDef, wfBenchSteps{K: 3})
		return err
	}); err != nil {
		return 0, fmt.Errorf("3-step workflows: %w", err)
	}
	if err := poolBenchWait(ctx, 10*time.Minute, func() bool { return wfBenchDone.Load() >= int64(n) }); err != nil {
		return 0, fmt.Errorf("3-step workflows: %d of %d ended: %w", wfBenchDone.Load(), n, err)
	}
	return rate(n, time.Since(start)), nil
}

// wfBenchStart calls start(i) for i in [0, n), 32 at a time.
func wfBenchStart(ctx context.Context, n int, start func(ctx context.Context, i int) error) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var mu sync.Mutex
	var first error
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := start(ctx, i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

type memFigures struct {
	goroutines int
	heapMB     float64
}

// procMem is this process's goroutines and heap after a GC.
func procMem() memFigures {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memFigures{goroutines: runtime.NumGoroutine(), heapMB: float64(ms.HeapAlloc) / (1 << 20)}
}

// wfWriteCounts is the last sequence of each stream a workflow writes.
type wfWriteCounts map[string]uint64

// wfWrites reads the last sequence (the writes so far) of the runs,
// journal and delayed buckets and of the function stream.
func wfWrites(ctx context.Context, js jetstream.JetStream, scfg streams.Config) (wfWriteCounts, error) {
	c := scfg.WithDefaults()
	out := wfWriteCounts{}
	for label, name := range map[string]string{
		"runs bucket": streams.KVStream(c.RunsBucket()), "journal": streams.KVStream(c.JournalBucket()),
		"delayed store": streams.KVStream(c.DelayedBucket()), "function stream": c.FunctionStream(),
	} {
		st, err := streamInfo(ctx, js, name)
		if err != nil {
			return nil, err
		}
		out[label] = st.LastSeq
	}
	return out, nil
}

func (a wfWriteCounts) total(b wfWriteCounts, n int) float64 {
	var t uint64
	for k, v := range a {
		t += v - b[k]
	}
	return float64(t) / float64(n)
}

func (a wfWriteCounts) describe(b wfWriteCounts, n int) string {
	var parts []string
	for _, k := range []string{"function stream", "runs bucket", "journal", "delayed store"} {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(a[k]-b[k])/float64(n)))
	}
	return strings.Join(parts, ", ")
}
