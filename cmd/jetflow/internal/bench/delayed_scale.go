package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// DelayedScaleSizes are the waiting-set sizes of the delayed store
// figures.
var DelayedScaleSizes = []int{10_000, 100_000, 1_000_000}

// fillDelayed writes n delayed entries due between from and from+spread,
// the way a producer writes them (kv.Store.DelayedMsg: key <due
// second>.<run id>, value the envelope and due time), pipelined. They are
// entries without run records: the scheduler reads only the delayed
// bucket until an entry is due, and these never are during the phase.
func fillDelayed(ctx context.Context, url, prefix string, n int, from time.Time, spread time.Duration, size int) error {
	var failed atomic.Int64
	nc, js, err := connect(url, "bench-fill", jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { failed.Add(1) }))
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := kv.Open(ctx, js, streams.Config{Prefix: prefix})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	args, err := call(size).Encode()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	for i := range n {
		due := from.Add(time.Duration(float64(spread) * float64(i) / float64(max(n-1, 1)))).UTC()
		e := streams.Envelope{Function: noop.Name(), ID: nuid.Next(), Rev: 1, Attempt: 1, Scheduled: due, Created: from, Args: args}
		m, err := st.DelayedMsg(kv.Delayed{Envelope: e, Due: due})
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("bench: fill delayed: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return fmt.Errorf("%w: fill delayed: %w", ErrBench, ctx.Err())
	}
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%w: fill delayed: %d not acknowledged", ErrBench, f)
	}
	ds, err := streamInfo(ctx, js, streams.KVStream(streams.Config{Prefix: prefix}.WithDefaults().DelayedBucket()))
	if err != nil {
		return err
	}
	if ds.Msgs < uint64(n) {
		return fmt.Errorf("%w: fill delayed: %d of %d entries stored", ErrBench, ds.Msgs, n)
	}
	return nil
}

// DelayedScale is what the delayed store figures measured over one
// waiting set.
type DelayedScale struct {
	Waiting int
	Fill    time.Duration // writing the waiting entries
	// FirstFire is from Start of a scheduler over the waiting set to the
	// message of a run that was already due seen on its subject;
	// Leading is the part of it until the scheduler led.
	FirstFire, Leading time.Duration
	// Background is from Start to the first checkpoint stored: a first
	// term reads the whole bucket in the background (docs/scaling.md).
	Background time.Duration
	// Takeover is the same for a standby, from its leader's Stop
	// returning; TakeoverLeading is the part until the standby led.
	Takeover, TakeoverLeading time.Duration
	// Tick is the mean time of the leader's tick (reading the seconds that
	// come within the horizon) while it leads over the waiting set.
	Tick  time.Duration
	Ticks int64
	// HeapMB is the growth of the process's heap (after a GC) from before
	// the scheduler started to 2 s after its background read.
	HeapMB float64
	// Late is the lateness of runs due at a steady rate meanwhile.
	Late LateResult
}

// canaryFn is the function of the runs whose first publish is timed; no
// worker serves it, so they stay out of the lateness figures.
var canaryFn = jetflow.Define[noopArgs]("bench.canary")

// canaryDelay is how far ahead a canary run is due.
const canaryDelay = 50 * time.Millisecond

// canary schedules a run due now+d (a real run, with its record) and
// returns its id.
func canary(ctx context.Context, p *producer.Producer, d time.Duration) (string, error) {
	id, err := p.RunAfter(ctx, d, canaryFn.With(noopArgs{}))
	if err != nil {
		return "", fmt.Errorf("bench: canary: %w", err)
	}
	return id, nil
}

// seen watches the function subjects of the canary runs of prefix and
// notes when each run's message is seen.
type seen struct {
	sub *nats.Subscription
	mu  sync.Mutex
	at  map[string]time.Time
}

func watchCanaries(nc *nats.Conn, prefix string) (*seen, error) {
	s := &seen{at: map[string]time.Time{}}
	scfg := streams.Config{Prefix: prefix}
	sub, err := nc.Subscribe(scfg.FunctionSubject(canaryFn.Name(), "*"), func(m *nats.Msg) {
		now := time.Now()
		if _, id, ok := scfg.ParseFunctionSubject(m.Subject); ok {
			s.mu.Lock()
			if _, dup := s.at[id]; !dup {
				s.at[id] = now
			}
			s.mu.Unlock()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := nc.Flush(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	s.sub = sub
	return s, nil
}

// wait returns when the message of run id was seen.
func (s *seen) wait(ctx context.Context, id string) (time.Time, error) {
	for {
		s.mu.Lock()
		t, ok := s.at[id]
		s.mu.Unlock()
		if ok {
			return t, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%w: a due run was never published: %w", ErrBench, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func waitLeader(ctx context.Context, s *scheduler.Scheduler) error {
	for !s.IsLeader() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: scheduler never led: %w", ErrBench, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

func heapMB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// MeasureDelayedScale fills prefix's delayed store with waiting runs due a
// week from now, then measures a scheduler started over them, a standby
// taking over, the leader's tick, and the lateness of runs due at rate
// per second for spread meanwhile.
func MeasureDelayedScale(ctx context.Context, url, prefix string, waiting, perSec int, spread time.Duration) (DelayedScale, error) {
	res := DelayedScale{Waiting: waiting}
	r, err := newRole(ctx, url, "bench-producer", prefix)
	if err != nil {
		return res, err
	}
	defer r.close()
	start := time.Now()
	if err := fillDelayed(ctx, url, prefix, waiting, time.Now().Add(7*24*time.Hour), 7*24*time.Hour, 100); err != nil {
		return res, err
	}
	res.Fill = time.Since(start)

	scfg := scheduler.Config{Streams: streams.Config{Prefix: prefix}, LeaseTTL: 2 * time.Second}
	newSched := func(name string) (*scheduler.Scheduler, func(), error) {
		nc, js, err := connect(url, name)
		if err != nil {
			return nil, nil, err
		}
		s, err := scheduler.New(ctx, js, scfg)
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("bench: scheduler: %w", err)
		}
		return s, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = s.Stop(sctx)
			cancel()
			nc.Close()
		}, nil
	}

	// A scheduler starting over the waiting set: a run already due waits
	// in the delayed store (due 50 ms after it was written, so that the
	// producer stores it rather than publishing it).
	w, err := watchCanaries(r.nc, prefix)
	if err != nil {
		return res, err
	}
	defer w.sub.Unsubscribe()
	id, err := canary(ctx, r.p, canaryDelay)
	if err != nil {
		return res, err
	}
	time.Sleep(canaryDelay + 5*time.Millisecond) // due before the scheduler starts
	before := heapMB()
	a, stopA, err := newSched("bench-scheduler-a")
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := a.Start(ctx); err != nil {
		stopA()
		return res, fmt.Errorf("bench: scheduler: %w", err)
	}
	if err := waitLeader(ctx, a); err != nil {
		stopA()
		return res, err
	}
	res.Leading = time.Since(t0)
	at, err := w.wait(ctx, id)
	if err != nil {
		stopA()
		return res, err
	}
	res.FirstFire = at.Sub(t0)

	// A first term (no checkpoint yet) reads the whole bucket in the
	// background; it stores its first checkpoint when that read is done.
	leases, err := r.js.KeyValue(ctx, streams.Config{Prefix: prefix}.WithDefaults().LeasesBucket())
	if err != nil {
		stopA()
		return res, fmt.Errorf("bench: %w", err)
	}
	for {
		if _, err := leases.Get(ctx, "scheduler-delayed-low"); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			stopA()
			return res, fmt.Errorf("%w: no delayed checkpoint: %w", ErrBench, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	res.Background = time.Since(t0)

	// The leader's tick over the waiting set, and the heap it holds.
	st0 := a.Stats()
	time.Sleep(2 * time.Second)
	st1 := a.Stats()
	res.Ticks = st1.Ticks - st0.Ticks
	if res.Ticks > 0 {
		res.Tick = (st1.TickTime - st0.TickTime) / time.Duration(res.Ticks)
	}
	res.HeapMB = heapMB() - before

	// A standby takes over when the leader stops.
	b, stopB, err := newSched("bench-scheduler-b")
	if err != nil {
		stopA()
		return res, err
	}
	defer stopB()
	if err := b.Start(ctx); err != nil {
		stopA()
		return res, fmt.Errorf("bench: scheduler: %w", err)
	}
	id, err = canary(ctx, r.p, canaryDelay)
	if err != nil {
		stopA()
		return res, err
	}
	// The leader fires this one: wait for it, then stop the leader with
	// another run due, which only the standby can fire.
	if _, err := w.wait(ctx, id); err != nil {
		stopA()
		return res, err
	}
	stopA()
	id, err = canary(ctx, r.p, canaryDelay)
	if err != nil {
		return res, err
	}
	t0 = time.Now()
	if err := waitLeader(ctx, b); err != nil {
		return res, err
	}
	res.TakeoverLeading = time.Since(t0)
	at, err = w.wait(ctx, id)
	if err != nil {
		return res, err
	}
	res.Takeover = at.Sub(t0)
	stopB()

	// Lateness of runs due at a steady rate, a new scheduler over the
	// waiting set.
	n := max(int(float64(perSec)*spread.Seconds()), 1)
	res.Late, err = Lateness(ctx, url, prefix, n, 100, time.Second+time.Duration(float64(n)/20_000*float64(time.Second)), spread)
	if err != nil {
		return res, fmt.Errorf("lateness: %w", err)
	}
	return res, nil
}

// RunDelayedScale measures the delayed store at each size (default
// DelayedScaleSizes; 1,000 and 10,000 when quick), each on a fresh
// embedded server (default durability), and prints one line per size: the
// fill rate, a scheduler's start to its first fire, a standby's takeover,
// the tick, the heap the scheduler added, and the lateness of runs due at
// 1,000/s for 5 s meanwhile (200/s for 1 s when quick).
func RunDelayedScale(ctx context.Context, w io.Writer, quick bool, sizes []int) error {
	perSec, spread := 1000, 5*time.Second
	if len(sizes) == 0 {
		sizes = DelayedScaleSizes
		if quick {
			sizes = []int{1_000, 10_000}
		}
	}
	if quick {
		perSec, spread = 200, time.Second
	}
	fmt.Fprintf(w, "delayed store: runs waiting a week ahead, then a scheduler started over them; lateness of %d runs/s due over %s meanwhile\n", perSec, spread)
	for _, n := range sizes {
		s, stop, err := freshServer("delayed")
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
		d, err := MeasureDelayedScale(pctx, s.ClientURL(), "benchdelayed", n, perSec, spread)
		cancel()
		stop()
		if err != nil {
			return fmt.Errorf("delayed store, %d waiting: %w", n, err)
		}
		fmt.Fprintf(w, "delayed %9s waiting (filled at %s/s): start to first fire %s (leading after %s; whole bucket read in the background by %s), standby takeover to first fire %s (leading after %s), tick %s (%d ticks), scheduler heap %+.1f MB, lateness p50 %s p99 %s max %s (%d runs; scheduler publish p99 %s)\n",
			fmtRate(float64(n)), fmtRate(rate(n, d.Fill)), fmtDur(d.FirstFire), fmtDur(d.Leading), fmtDur(d.Background), fmtDur(d.Takeover), fmtDur(d.TakeoverLeading),
			fmtDur(d.Tick), d.Ticks, d.HeapMB, fmtDur(d.Late.Lateness.P50), fmtDur(d.Late.Lateness.P99), fmtDur(d.Late.Lateness.Max), d.Late.N, fmtDur(d.Late.Dispatch.P99))
		if d.Late.NotSuccess > 0 {
			return fmt.Errorf("%w: delayed store, %d waiting: %d of %d runs not success", ErrBench, n, d.Late.NotSuccess, d.Late.N)
		}
	}
	return nil
}
