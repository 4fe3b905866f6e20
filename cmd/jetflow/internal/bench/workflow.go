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
	b := &wfBench{ctx: ctx, out: out, scfg: streams.Config{Prefix: "benchwf"}, n: n, m: m, parkers: parkers}

	var tp wfThroughput
	if err := b.rawBaseline(rs.srv.ClientURL(), &tp); err != nil {
		return err
	}
	// stop undoes what start did, also when start failed half way.
	stop, err := b.start(rs.srv.ClientURL())
	defer stop()
	if err != nil {
		return err
	}
	if err := b.plainRuns(&tp); err != nil {
		return err
	}
	if err := b.threeStepWorkflows(&tp); err != nil {
		return err
	}
	tp.print(b.line, n)
	if err := b.stepCost(); err != nil {
		return err
	}
	if err := b.waits(quick); err != nil {
		return err
	}
	if err := b.resumeAfterSleep(); err != nil {
		return err
	}
	if err := b.parking(tp.wfRate); err != nil {
		return err
	}
	if err := b.sendEvent(); err != nil {
		return err
	}
	return b.resumeAfterRestart(rs.restart)
}

// wfBench is what RunWorkflow's phases share: the producer (beside the
// worker and the scheduler that start runs), the producer's connection, on
// which the phases read the streams' write counts, and the figures' sizes.
type wfBench struct {
	ctx  context.Context
	out  io.Writer
	scfg streams.Config
	p    *producer.Producer
	pjs  jetstream.JetStream
	// n 3-step workflows (3n plain runs), m sleeping or awaiting
	// workflows, parkers parked workflows.
	n, m, parkers int
}

// line prints one figure, after "workflow ".
func (b *wfBench) line(format string, a ...any) {
	fmt.Fprintf(b.out, "workflow "+format+"\n", a...)
}

// wfThroughput are the first figures: raw JetStream, 3N plain runs and N
// 3-step workflows (with the streams' writes before and after them).
type wfThroughput struct {
	rawRate, plainRate, wfRate float64
	rawCPU, plainCPU, wfCPU    time.Duration
	writesBefore, writesAfter  wfWriteCounts
}

// print prints the throughput figures, n being the number of workflows.
func (f wfThroughput) print(line func(string, ...any), n int) {
	line("raw publish+consume %s msg/s (cpu %s/msg); plain no-op runs %s runs/s (%s of raw), cpu %s/run", fmtRate(f.rawRate), fmtDur(f.rawCPU), fmtRate(f.plainRate), trimFloat(ratio(f.plainRate, f.rawRate)), fmtDur(f.plainCPU))
	line("3-step workflows %s /s, cpu %s/workflow; 3 plain runs %s /s; ratio %s (target >= 0.5)", fmtRate(f.wfRate), fmtDur(f.wfCPU), fmtRate(f.plainRate/3), trimFloat(ratio(f.wfRate, f.plainRate/3)))
	line("writes per 3-step workflow %.1f: %s (3 plain runs: 6, a message and a record each)", f.writesAfter.total(f.writesBefore, n), f.writesAfter.describe(f.writesBefore, n))
}

// rawBaseline measures raw JetStream publish-then-consume of 3N messages,
// before anything else runs on the server.
func (b *wfBench) rawBaseline(url string, f *wfThroughput) error {
	raw, err := RawPublishConsume(b.ctx, url, 3*b.n, 100)
	if err != nil {
		return fmt.Errorf("raw: %w", err)
	}
	f.rawRate, f.rawCPU = rate(3*b.n, raw.Publish+raw.Consume), per(raw.PublishCPU+raw.ConsumeCPU, 3*b.n)
	return nil
}

// start connects the worker, the producer and the scheduler (a connection
// each), registers the handler of the plain runs and every workflow of the
// figures, and returns once the scheduler leads. stop undoes what start
// did, in reverse order, also when start failed.
func (b *wfBench) start(url string) (stop func(), err error) {
	var undo []func()
	stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	jss, closeAll, err := connectEach(url, "bench-wf-worker", "bench-wf-producer", "bench-wf-scheduler")
	if err != nil {
		return stop, err
	}
	undo = append(undo, closeAll)
	wjs, pjs, sjs := jss[0], jss[1], jss[2]

	stopWorker, err := startWorker(b.ctx, wjs, b.scfg, func(w *worker.Worker) error {
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
		return stop, err
	}
	undo = append(undo, stopWorker)
	s, err := scheduler.New(b.ctx, sjs, scheduler.Config{Streams: b.scfg, LeaseTTL: time.Second})
	if err != nil {
		return stop, err
	}
	if err := s.Start(b.ctx); err != nil {
		return stop, err
	}
	undo = append(undo, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(sctx)
	})
	b.p, err = producer.New(b.ctx, pjs, producer.Config{Streams: b.scfg})
	if err != nil {
		return stop, err
	}
	b.pjs = pjs
	if err := poolBenchWait(b.ctx, time.Minute, s.IsLeader); err != nil {
		return stop, fmt.Errorf("scheduler leader: %w", err)
	}
	return stop, nil
}

// plainRuns measures 3N plain no-op runs through EnqueueAsync, from the
// first enqueue to the last handler's end: runs/s and CPU per run.
func (b *wfBench) plainRuns(f *wfThroughput) error {
	n := 3 * b.n
	wfBenchPlain.Store(0)
	start, cpu := time.Now(), cpuTime()
	pend := make([]*producer.Pending, 0, n)
	for i := range n {
		pd, err := b.p.EnqueueAsync(b.ctx, wfBenchPlainFn.With(wfBenchSteps{K: i}))
		if err != nil {
			return fmt.Errorf("plain runs: %w", err)
		}
		pend = append(pend, pd)
	}
	for _, pd := range pend {
		if err := pd.Wait(b.ctx); err != nil {
			return fmt.Errorf("plain runs: %w", err)
		}
	}
	if err := poolBenchWait(b.ctx, 10*time.Minute, func() bool { return wfBenchPlain.Load() >= int64(n) }); err != nil {
		return fmt.Errorf("plain runs: %d of %d ran: %w", wfBenchPlain.Load(), n, err)
	}
	f.plainRate, f.plainCPU = rate(n, time.Since(start)), per(cpuTime()-cpu, n)
	return nil
}

// threeStepWorkflows measures N workflows of 3 no-op steps, started 32 at
// a time and timed to the last one's end: workflows/s, CPU per workflow,
// and the streams' writes before and after them.
func (b *wfBench) threeStepWorkflows(f *wfThroughput) error {
	n := b.n
	wfBenchDone.Store(0)
	var err error
	if f.writesBefore, err = wfWrites(b.ctx, b.pjs, b.scfg); err != nil {
		return err
	}
	start, cpu := time.Now(), cpuTime()
	if err := wfBenchStart(b.ctx, n, func(ctx context.Context, i int) error {
		_, err := workflow.Start(ctx, b.p, wfBenchStepsDef, wfBenchSteps{K: 3})
		return err
	}); err != nil {
		return fmt.Errorf("3-step workflows: %w", err)
	}
	if err := poolBenchWait(b.ctx, 10*time.Minute, func() bool { return wfBenchDone.Load() >= int64(n) }); err != nil {
		return fmt.Errorf("3-step workflows: %d of %d ended: %w", wfBenchDone.Load(), n, err)
	}
	f.wfRate, f.wfCPU = rate(n, time.Since(start)), per(cpuTime()-cpu, n)
	// Writes of the workflows (the purge runs they schedule are due after
	// the retention period: their later writes are not counted).
	if err := poolBenchWait(b.ctx, time.Minute, func() bool {
		st, err := streamInfo(b.ctx, b.pjs, streams.KVStream(b.scfg.WithDefaults().RunsBucket()))
		return err == nil && st.LastSeq > 0 // settle: outcome writes are asynchronous
	}); err != nil {
		return err
	}
	f.writesAfter, err = wfWrites(b.ctx, b.pjs, b.scfg)
	return err
}

// stepCost measures the cost of one step in a workflow of 10, 100 and
// 1000 sequential steps (one workflow each), which must stay flat.
func (b *wfBench) stepCost() error {
	for _, k := range []int{10, 100, 1000} {
		wfBenchDone.Store(0)
		start := time.Now()
		if _, err := workflow.Start(b.ctx, b.p, wfBenchStepsDef, wfBenchSteps{K: k}); err != nil {
			return err
		}
		if err := poolBenchWait(b.ctx, 10*time.Minute, func() bool { return wfBenchDone.Load() >= 1 }); err != nil {
			return fmt.Errorf("%d-step workflow: %w", k, err)
		}
		b.line("%d sequential steps: %s per step", k, fmtDur(per(time.Since(start), k)))
	}
	return nil
}

// waits measures one workflow that waits n times (an event each time), for
// each n of the sizes (wfWaitsCosts).
func (b *wfBench) waits(quick bool) error {
	sizes := []int{10, 100, 1_000, 10_000}
	if quick {
		sizes = wfWaitsQuick
	}
	return wfWaitsCosts(b.ctx, b.out, b.p, b.pjs, b.scfg, sizes, wfWaitsEvery, wfWaitsPlainMax)
}

// waitNoted waits until m latencies have been noted.
func (b *wfBench) waitNoted(m int) error {
	return poolBenchWait(b.ctx, 5*time.Minute, func() bool {
		wfBenchLatMu.Lock()
		defer wfBenchLatMu.Unlock()
		return len(wfBenchLat) >= m
	})
}

// resumeAfterSleep measures the lateness of the first step after a
// durable sleep: M workflows due over 2 s, the first 1 s from now.
func (b *wfBench) resumeAfterSleep() error {
	m := b.m
	wfBenchTake()
	first := time.Now().Add(time.Second)
	if err := wfBenchStart(b.ctx, m, func(ctx context.Context, i int) error {
		due := first.Add(2 * time.Second * time.Duration(i) / time.Duration(m))
		_, err := workflow.Start(ctx, b.p, wfBenchSleepDef, wfBenchSleep{Due: due})
		return err
	}); err != nil {
		return fmt.Errorf("sleeping workflows: %w", err)
	}
	if err := b.waitNoted(m); err != nil {
		return fmt.Errorf("sleeping workflows: %w", err)
	}
	sl := percentiles(wfBenchTake())
	b.line("resume after sleep (%d): lateness p50 %s p99 %s max %s (target p99 < 25ms)", sl.N, fmtDur(sl.P50), fmtDur(sl.P99), fmtDur(sl.Max))
	return nil
}

// parking measures P workflows that start and sleep for an hour, from the
// first Start to the last park, as parked/s beside 3-step workflows/s
// measured again just after (wfRate is the first 3-step figure); then the
// writes per parked workflow and the goroutines and heap of this process
// before and after: once parked, a workflow holds nothing in the process
// that runs it.
func (b *wfBench) parking(wfRate float64) error {
	parkers := b.parkers
	before := procMem()
	pBefore, err := wfWrites(b.ctx, b.pjs, b.scfg)
	if err != nil {
		return err
	}
	took, _, err := wfBenchPark(b.ctx, b.p, b.pjs, b.scfg, parkers)
	if err != nil {
		return err
	}
	pAfter, err := wfWrites(b.ctx, b.pjs, b.scfg)
	if err != nil {
		return err
	}
	after := procMem()
	parkRate := rate(parkers, took)
	// 3-step workflows again, at once after: the load of a shared machine
	// changes over the minutes between the first figure and this one.
	stepsRate, err := wfBench3Steps(b.ctx, b.p, b.n)
	if err != nil {
		return err
	}
	b.line("parking (%d workflows that start, then sleep an hour): %s parked/s; 3-step workflows %s /s just after (%s at the start); ratio %s (target >= 0.5)",
		parkers, fmtRate(parkRate), fmtRate(stepsRate), fmtRate(wfRate), trimFloat(ratio(parkRate, stepsRate)))
	b.line("writes per parked workflow %.1f: %s", pAfter.total(pBefore, parkers), pAfter.describe(pBefore, parkers))
	b.line("%d workflows asleep: goroutines %d -> %d, heap %.1f -> %.1f MB of this process, the embedded nats-server's state of their keys included (target: bounded whatever the workflows asleep; the worker keeps at most %d executions, a goroutine each, and 1024 parked journals per definition)",
		parkers, before.goroutines, after.goroutines, before.heapMB, after.heapMB, workflow.DefaultCachedExecutions)
	return nil
}

// sendEvent measures the delay from SendEvent to the step after the await:
// M workflows, each parked on its await, sent an event each at a steady
// 200 events/s.
func (b *wfBench) sendEvent() error {
	m := b.m
	ids := make([]string, m)
	if err := wfBenchStart(b.ctx, m, func(ctx context.Context, i int) error {
		id, err := workflow.Start(ctx, b.p, wfBenchEventDef, wfBenchNone{})
		ids[i] = id
		return err
	}); err != nil {
		return fmt.Errorf("awaiting workflows: %w", err)
	}
	// Each waits once its first segment has parked on the await.
	if err := poolBenchWait(b.ctx, 5*time.Minute, func() bool {
		for _, id := range ids {
			st, err := workflow.Get(b.ctx, b.p, id)
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
			if err := workflow.SendEvent(b.ctx, b.p, ids[i], "go", time.Now()); err != nil {
				fmt.Fprintln(b.out, "workflow send event:", err)
			}
		}()
	}
	tick.Stop()
	if err := b.waitNoted(m); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	ev := percentiles(wfBenchTake())
	b.line("SendEvent to the next step (%d at 200/s): p50 %s p99 %s max %s (target p99 < 25ms)", ev.N, fmtDur(ev.P50), fmtDur(ev.P99), fmtDur(ev.Max))
	return nil
}

// resumeAfterRestart, the last phase, measures resumes after a server
// restart: the server stops (restart) while M workflows sleep, due over
// the restart.
func (b *wfBench) resumeAfterRestart(restart func(down time.Duration) (time.Time, error)) error {
	rf, err := wfBenchRestart(b.ctx, b.p, b.pjs, b.scfg, restart, b.m, time.Second)
	if err != nil {
		return err
	}
	b.line("resume after a server restart (%d of %d due after it stopped; down %s): lateness from due or back p50 %s p99 %s max %s (target max < worker ReplayGrace + 1s = %s)",
		rf.affected, b.m, fmtDur(rf.down), fmtDur(rf.late.P50), fmtDur(rf.late.P99), fmtDur(rf.late.Max), fmtDur(worker.DefaultReplayGrace+time.Second))
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
