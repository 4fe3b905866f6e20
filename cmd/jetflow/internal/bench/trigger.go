package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// The two functions of the trigger figures: one enqueued directly, one
// started by a trigger; both are no-ops that count.
var (
	trigBenchDirect = jetflow.Define[poolBenchArgs]("bench.trigger.direct")
	trigBenchRun    = jetflow.Define[poolBenchArgs]("bench.trigger.run")
)

// RunTrigger measures a trigger on a fresh embedded server (default
// durability), with a worker, a producer and a trigger runner on their own
// connections in one process: N no-op runs enqueued with EnqueueAsync
// (pipelined, no record), then N messages stored on an existing stream
// beforehand and turned into runs by a trigger (default window, 1000), each
// timed from the first enqueue (the trigger's start) to the N-th handler's
// return. It prints both rates and their ratio. N is 20,000 (2,000 when
// quick).
//
// A triggered run costs more round trips than an EnqueueAsync run: its id
// is derived from the message (an idempotency key), so its record is
// written create-only before its message is published (one atomic batch
// of records per fetch of up to 256 messages, then the publishes
// pipelined), and the trigger's message is fetched and acked; and the
// trigger reads the function's queue depth once per fetch (the window).
func RunTrigger(ctx context.Context, out io.Writer, quick bool) error {
	n := 20_000
	if quick {
		n = 2_000
	}
	s, stop, err := freshServer("trigger")
	if err != nil {
		return err
	}
	defer stop()
	line := func(format string, a ...any) { fmt.Fprintf(out, "trigger "+format+"\n", a...) }

	scfg := streams.Config{Prefix: "benchtrig"}
	jss, closeAll, err := connectEach(s.ClientURL(), "bench-trigger-worker", "bench-trigger-producer", "bench-trigger-runner", "bench-trigger-source")
	if err != nil {
		return err
	}
	defer closeAll()
	wjs, pjs, rjs, sjs := jss[0], jss[1], jss[2], jss[3]

	var direct, triggered atomic.Int64
	stopWorker, err := startWorker(ctx, wjs, scfg, func(w *worker.Worker) error {
		worker.Handle(w, trigBenchDirect, func(context.Context, *worker.Job[poolBenchArgs]) error { direct.Add(1); return nil }, benchOptions)
		worker.Handle(w, trigBenchRun, func(context.Context, *worker.Job[poolBenchArgs]) error { triggered.Add(1); return nil }, benchOptions)
		return nil
	})
	if err != nil {
		return err
	}
	defer stopWorker()
	p, err := producer.New(ctx, pjs, producer.Config{Streams: scfg})
	if err != nil {
		return err
	}

	// Plain EnqueueAsync.
	start := time.Now()
	pend := make([]*producer.Pending, 0, n)
	for i := 0; i < n; i++ {
		pd, err := p.EnqueueAsync(ctx, trigBenchDirect.With(poolBenchArgs{I: i}))
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		pend = append(pend, pd)
	}
	for _, pd := range pend {
		if err := pd.Wait(ctx); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
	}
	if err := poolBenchWait(ctx, 10*time.Minute, func() bool { return direct.Load() >= int64(n) }); err != nil {
		return fmt.Errorf("enqueued runs: %d of %d ran: %w", direct.Load(), n, err)
	}
	dDirect := time.Since(start)

	// The same number of messages on an existing stream, through a trigger.
	if _, err := sjs.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCHSRC", Subjects: []string{"benchsrc.>"}}); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if _, err := sjs.PublishAsync("benchsrc.orders", []byte(fmt.Sprintf(`{"i":%d}`, i))); err != nil {
			return err
		}
	}
	select {
	case <-sjs.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	rp, err := producer.New(ctx, rjs, producer.Config{Streams: scfg})
	if err != nil {
		return err
	}
	r := trigger.New(rp, trigger.Config{})
	if err := trigger.Bind(r, trigger.Func(trigBenchRun), trigger.Spec[poolBenchArgs]{Name: "bench", Stream: "BENCHSRC"}); err != nil {
		return err
	}
	start = time.Now()
	if err := r.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Stop(sctx)
	}()
	if err := poolBenchWait(ctx, 10*time.Minute, func() bool { return triggered.Load() >= int64(n) }); err != nil {
		return fmt.Errorf("triggered runs: %d of %d ran: %w", triggered.Load(), n, err)
	}
	dTrig := time.Since(start)
	// The runner counts a fetch's runs once their messages are published,
	// which their handlers may beat: wait for its count too.
	var st kv.TriggerStats
	if err := poolBenchWait(ctx, time.Minute, func() bool {
		st = r.Stats("bench")
		return st.Runs+st.Existing >= int64(n)
	}); err != nil {
		return fmt.Errorf("trigger counted %d runs made and %d existing of %d: %w", st.Runs, st.Existing, n, err)
	}

	rDirect, rTrig := rate(n, dDirect), rate(n, dTrig)
	line("EnqueueAsync               %d runs in %s = %10s runs/s (no record, pipelined; worker concurrency 64)", n, fmtDur(dDirect), fmtRate(rDirect))
	line("trigger, stream -> runs    %d runs in %s = %10s runs/s (window %d, fetches of %d; %d runs made, %d found existing)",
		n, fmtDur(dTrig), fmtRate(rTrig), trigger.DefaultWindow, trigger.DefaultBatch, st.Runs, st.Existing)
	line("trigger / EnqueueAsync     %.3f   (a triggered run: its record written create-only first, in one atomic batch per fetch, then its message; plus the trigger message's fetch and ack)",
		rTrig/max(rDirect, 1e-9))
	return nil
}
