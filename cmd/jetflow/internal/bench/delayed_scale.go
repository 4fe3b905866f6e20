package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
)

// DelayedScaleSizes are the waiting-set sizes of the delayed store
// figures.
var DelayedScaleSizes = []int{10_000, 100_000, 1_000_000}

// fillWaiting schedules n runs the way a producer does (Batch: each run's
// record, pending, and its delayed entry), due evenly between from and
// from+spread, from two goroutines.
func fillWaiting(ctx context.Context, p *producer.Producer, n int, from time.Time, spread time.Duration, size int) error {
	const parts = 2
	errs := make([]error, parts)
	var wg sync.WaitGroup
	per := (n + parts - 1) / parts
	for g := range parts {
		lo, hi := g*per, min((g+1)*per, n)
		if lo >= hi {
			continue
		}
		wg.Go(func() {
			errs[g] = enqueueBatches(ctx, p, hi-lo, call(size), func(i int) time.Time {
				return from.Add(time.Duration(float64(spread) * float64(lo+i) / float64(max(n-1, 1))))
			})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	return nil
}

// DelayedScale is what the delayed store figures measured over one
// waiting set.
type DelayedScale struct {
	Waiting int
	Fill    time.Duration // scheduling the waiting runs (records and entries)
	// Start is the lateness of runs due at a steady rate in the first
	// seconds of a scheduler's first term over the waiting set (no
	// checkpoint: it reads the whole delayed bucket in the background,
	// and its repair sweep and run index read every record).
	Start LateResult
	// Leading is from Start to leading; Background from Start to the
	// first delayed checkpoint stored (the background read over), zero
	// when none was stored during the phase.
	Leading, Background time.Duration
	// Takeover is the lateness of runs due at the same rate in the first
	// seconds after a standby took over from a leader that stopped;
	// TakeoverLeading is from the leader's Stop to the standby leading.
	Takeover        LateResult
	TakeoverLeading time.Duration
	// Raw is publish-to-consume latency at the same rate, in the same
	// run, right after.
	Raw Percentiles
	// Tick is the mean time of the first leader's tick (reading the
	// seconds that come within the horizon).
	Tick  time.Duration
	Ticks int64
	// HeapBefore is the process's heap (after a GC; the embedded server
	// is in the same process) with the waiting set filled and no
	// scheduler; HeapStart after the first phase, HeapTakeover after the
	// second, in bytes.
	HeapBefore, HeapStart, HeapTakeover uint64
}

// PerRun is the heap growth from before the scheduler to after the
// takeover phase, in bytes per waiting run.
func (d DelayedScale) PerRun() float64 {
	return (float64(d.HeapTakeover) - float64(d.HeapBefore)) / float64(max(d.Waiting, 1))
}

func heapBytes() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// lateSink collects the lateness of the runs of one phase: handler start
// minus due time, and the message's arrival on its subject minus due time
// (the scheduler's share). A run started twice is counted (twice).
type lateSink struct {
	mu         sync.Mutex
	want       int
	late, disp []time.Duration
	seen       map[string]bool
	twice      int
	done       chan struct{}
}

func (l *lateSink) reset(n int) {
	l.mu.Lock()
	l.want, l.late, l.disp, l.done = n, make([]time.Duration, 0, n), make([]time.Duration, 0, n), make(chan struct{})
	l.seen, l.twice = make(map[string]bool, n), 0
	l.mu.Unlock()
}

func (l *lateSink) handled(id string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		return
	}
	if l.seen[id] {
		l.twice++
		return
	}
	l.seen[id] = true
	l.late = append(l.late, d)
	if len(l.late) == l.want {
		close(l.done)
	}
}

func (l *lateSink) published(d time.Duration) {
	l.mu.Lock()
	if l.done != nil {
		l.disp = append(l.disp, d)
	}
	l.mu.Unlock()
}

// wait returns the phase's figures once its n runs started.
func (l *lateSink) wait(ctx context.Context) (LateResult, error) {
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		return LateResult{}, fmt.Errorf("%w: %d of %d delayed runs started: %w", ErrBench, len(l.late), l.want, ctx.Err())
	}
	// Give a run started twice the time to show.
	time.Sleep(time.Second)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.twice > 0 {
		return LateResult{}, fmt.Errorf("%w: %d of %d delayed runs started twice", ErrBench, l.twice, l.want)
	}
	return LateResult{N: l.want, Lateness: percentiles(l.late), Dispatch: percentiles(l.disp)}, nil
}

// schedulePhase schedules n runs due evenly over window from when
// (returned), after the time the Batch calls take, and waits until lead
// before when.
func schedulePhase(ctx context.Context, p *producer.Producer, n int, window, lead time.Duration) (time.Time, error) {
	when := time.Now().Add(time.Second + time.Duration(float64(n)/5_000*float64(time.Second)))
	err := enqueueBatches(ctx, p, n, call(100), func(i int) time.Time {
		return when.Add(time.Duration(float64(window) * float64(i) / float64(max(n-1, 1))))
	})
	if err != nil {
		return when, err
	}
	if d := time.Until(when.Add(-lead)); d > 0 {
		time.Sleep(d)
	}
	return when, nil
}

// MeasureDelayedScale schedules waiting runs due two hours from now (over
// an hour), then measures the lateness of runs due at perSec a second for
// the first window of a scheduler's first term over them, and again after
// a standby took over from it; beside raw publish-to-consume latency at the
// same rate, and the heap before and after.
func MeasureDelayedScale(ctx context.Context, url, prefix string, waiting, perSec int, window time.Duration) (DelayedScale, error) {
	res := DelayedScale{Waiting: waiting}
	var sink lateSink
	f, err := startFlow(ctx, url, prefix, handlerOptions, true, func(_ context.Context, j *worker.Job[noopArgs]) error {
		sink.handled(j.ID(), time.Since(j.ScheduledTime()))
		return nil
	})
	if err != nil {
		return res, err
	}
	defer f.close()
	start := time.Now()
	if err := fillWaiting(ctx, f.prod.p, waiting, time.Now().Add(2*time.Hour), time.Hour, 100); err != nil {
		return res, err
	}
	res.Fill = time.Since(start)
	sub, err := f.obs.nc.Subscribe(benchStreams(prefix).FunctionSubject(noop.Name(), "*"), func(m *nats.Msg) {
		now := time.Now()
		if e, err := benchStreams(prefix).ParseMessage(m.Subject, m.Header, m.Data); err == nil && !e.Scheduled.IsZero() {
			sink.published(now.Sub(e.Scheduled))
		}
	})
	if err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}

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
		var once sync.Once
		return s, func() {
			once.Do(func() {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = s.Stop(sctx)
				cancel()
				nc.Close()
			})
		}, nil
	}
	n := max(int(float64(perSec)*window.Seconds()), 1)
	res.HeapBefore = heapBytes()

	// A first term over the waiting set: started 200 ms before the first
	// lateness run is due.
	a, stopA, err := newSched("bench-scheduler-a")
	if err != nil {
		return res, err
	}
	defer func() { stopA() }()
	sink.reset(n)
	if _, err := schedulePhase(ctx, f.prod.p, n, window, 200*time.Millisecond); err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := a.Start(ctx); err != nil {
		return res, fmt.Errorf("bench: scheduler: %w", err)
	}
	bg := make(chan time.Duration, 1)
	go watchCheckpoint(ctx, f.prod, prefix, t0, window+5*time.Second, bg)
	if err := waitLeader(ctx, a); err != nil {
		return res, err
	}
	res.Leading = time.Since(t0)
	st0 := a.Stats()
	if res.Start, err = sink.wait(ctx); err != nil {
		return res, fmt.Errorf("first term: %w", err)
	}
	st1 := a.Stats()
	if res.Ticks = st1.Ticks - st0.Ticks; res.Ticks > 0 {
		res.Tick = (st1.TickTime - st0.TickTime) / time.Duration(res.Ticks)
	}
	res.Background = <-bg
	res.HeapStart = heapBytes()

	// A standby takes over when the leader stops, 1 s before the first
	// lateness run is due.
	b, stopB, err := newSched("bench-scheduler-b")
	if err != nil {
		return res, err
	}
	defer stopB()
	if err := b.Start(ctx); err != nil {
		return res, fmt.Errorf("bench: scheduler: %w", err)
	}
	sink.reset(n)
	if _, err := schedulePhase(ctx, f.prod.p, n, window, time.Second); err != nil {
		return res, err
	}
	stopA()
	// What the stopped leader held is garbage now, as in its own process.
	a, stopA = nil, func() {}
	t0 = time.Now()
	if err := waitLeader(ctx, b); err != nil {
		return res, err
	}
	res.TakeoverLeading = time.Since(t0)
	if res.Takeover, err = sink.wait(ctx); err != nil {
		return res, fmt.Errorf("takeover: %w", err)
	}
	res.HeapTakeover = heapBytes()

	// Raw publish-to-consume latency at the same rate, the standby
	// leading over the waiting set.
	if res.Raw, err = RawLatency(ctx, url, n, 100, window); err != nil {
		return res, fmt.Errorf("raw latency: %w", err)
	}
	// Each phase's runs all started, once each (lateSink); their records
	// are not counted: a scan of a million records would outlast the
	// phases.
	return res, nil
}

// watchCheckpoint sends on out how long after t0 the first delayed
// checkpoint was stored (a first term stores it once its background read
// of the whole bucket is over), or zero after within.
func watchCheckpoint(ctx context.Context, r *role, prefix string, t0 time.Time, within time.Duration, out chan<- time.Duration) {
	defer close(out)
	leases, err := r.js.KeyValue(ctx, streams.Config{Prefix: prefix}.WithDefaults().LeasesBucket())
	if err != nil {
		return
	}
	for time.Since(t0) < within {
		if _, err := leases.Get(ctx, "scheduler-delayed-low"); err == nil {
			out <- time.Since(t0)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
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

// RunDelayedScale measures the delayed store at each size (default
// DelayedScaleSizes; 1,000 and 10,000 when quick), each on a fresh
// embedded server (default durability), and prints two lines per size:
// the lateness of runs due at 300/s over the first 10 s (100/s over 3 s
// when quick) of a scheduler's first term and after a standby's takeover, beside raw
// publish-to-consume latency; and the fill, the heap per waiting run and
// the tick.
func RunDelayedScale(ctx context.Context, w io.Writer, quick bool, sizes []int, serverProcess bool) error {
	perSec, window := 300, 10*time.Second
	if len(sizes) == 0 {
		sizes = DelayedScaleSizes
		if quick {
			sizes = []int{1_000, 10_000}
		}
	}
	if quick {
		perSec, window = 100, 3*time.Second
	}
	where := "embedded in the bench's process (its heap included)"
	if serverProcess {
		where = "in a process of its own (its heap not included)"
	}
	fmt.Fprintf(w, "delayed store: runs waiting (records and entries, due 2 h ahead); lateness of %d runs/s due over the first %s of a scheduler's first term, and after a standby's takeover; the server %s\n", perSec, window, where)
	for _, n := range sizes {
		url, stop, err := delayedScaleServer(serverProcess)
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, 60*time.Minute)
		d, err := MeasureDelayedScale(pctx, url, "benchdelayed", n, perSec, window)
		cancel()
		stop()
		if err != nil {
			return fmt.Errorf("delayed store, %d waiting: %w", n, err)
		}
		fmt.Fprintf(w, "delayed %9s waiting: first term lateness p50 %s p99 %s max %s (scheduler publish p99 %s); takeover lateness p50 %s p99 %s max %s (publish p99 %s); raw publish->consume p50 %s p99 %s max %s\n",
			fmtRate(float64(n)), fmtDur(d.Start.Lateness.P50), fmtDur(d.Start.Lateness.P99), fmtDur(d.Start.Lateness.Max), fmtDur(d.Start.Dispatch.P99),
			fmtDur(d.Takeover.Lateness.P50), fmtDur(d.Takeover.Lateness.P99), fmtDur(d.Takeover.Lateness.Max), fmtDur(d.Takeover.Dispatch.P99),
			fmtDur(d.Raw.P50), fmtDur(d.Raw.P99), fmtDur(d.Raw.Max))
		bgText := "not within the phase"
		if d.Background > 0 {
			bgText = fmtDur(d.Background)
		}
		fmt.Fprintf(w, "delayed %9s waiting: filled at %s/s; leading after %s, whole bucket read by %s; takeover leading after %s; tick %s (%d ticks); heap %.0f MB before, %.0f MB after the first term, %.0f MB after the takeover: %+.0f B per waiting run\n",
			fmtRate(float64(n)), fmtRate(rate(n, d.Fill)), fmtDur(d.Leading), bgText, fmtDur(d.TakeoverLeading), fmtDur(d.Tick), d.Ticks,
			float64(d.HeapBefore)/(1<<20), float64(d.HeapStart)/(1<<20), float64(d.HeapTakeover)/(1<<20), d.PerRun())
	}
	return nil
}

// delayedScaleServer starts a fresh server for one waiting set: embedded
// in this process, or in a process of its own.
func delayedScaleServer(own bool) (url string, stop func(), err error) {
	if own {
		return startServerProcess("delayed")
	}
	s, stop, err := freshServer("delayed")
	if err != nil {
		return "", nil, err
	}
	return s.ClientURL(), stop, nil
}
