package jetflowtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options configure an Env. Every zero field takes the default named.
type Options struct {
	// Register registers the functions the env's worker serves; it is
	// called before the worker starts. Default: none (see Handle).
	Register func(w *worker.Worker) error
	// Start is the clock's time when the env starts. Default: now, to the
	// second, UTC.
	Start time.Time
	// Worker, Producer and Scheduler configure the parts; their Now is the
	// env's clock, whatever is set. Their Streams default to Streams.
	Worker    worker.Config
	Producer  producer.Config
	Scheduler scheduler.Config
	// Crons configures the scheduler's crons (Scheduler.ConfigureCrons):
	// code-defined crons in Crons.Crons, synced when the env starts.
	// Its Now is the env's clock.
	Crons scheduler.CronConfig
	// Streams names subjects and buckets (default prefix "jetflow").
	Streams streams.Config
	// Timeout bounds each wait of Advance and of the Require helpers, and
	// the Drain of the cleanup. Default 30 s.
	Timeout time.Duration
	// Logger receives the parts' logs. Default: discard.
	Logger *slog.Logger
}

// Env is jetflow running inside one test: a server, a producer, a worker,
// a scheduler driven by the env, and the clock they share. Its fields are
// for the test to use; the env stops everything when the test ends.
type Env struct {
	Server    *embedded.Server
	Conn      *nats.Conn
	JS        jetstream.JetStream
	Producer  *producer.Producer
	Worker    *worker.Worker
	Scheduler *scheduler.Scheduler
	Crons     *scheduler.Crons
	Clock     *Clock

	t       testing.TB
	opts    Options
	mu      sync.Mutex
	workers []*worker.Worker
}

// Clock is the env's fake clock: it stands still until the env moves it.
// Its Now is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// set moves the clock to t (never back).
func (c *Clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

// New starts an embedded server (on t.TempDir(), a random port), a
// producer, a worker serving what opts.Register registers, and a scheduler
// with opts.Crons, on one fake clock; everything stops when the test ends
// (t.Cleanup). It fails the test if any part does not start.
func New(t testing.TB, opts Options) *Env {
	t.Helper()
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	start := opts.Start
	if start.IsZero() {
		start = time.Now().UTC().Truncate(time.Second)
	}
	e := &Env{t: t, opts: opts, Clock: &Clock{now: start}}
	// A sync interval of a second: durability is not what a test tests, and
	// nats-server's file store races on very short ones under -race.
	srv, err := embedded.Start(embedded.Options{Dir: t.TempDir(), Port: -1, SyncEvery: time.Second})
	if err != nil {
		t.Fatalf("jetflowtest: start server: %v", err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatalf("jetflowtest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetflowtest: %v", err)
	}
	e.Server, e.Conn, e.JS = srv, nc, js
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()

	pc := opts.Producer
	pc.Now, pc.Streams = e.Clock.Now, orStreams(pc.Streams, opts.Streams)
	if pc.Logger == nil {
		pc.Logger = opts.Logger
	}
	if e.Producer, err = producer.New(ctx, js, pc); err != nil {
		t.Fatalf("jetflowtest: producer: %v", err)
	}
	sc := opts.Scheduler
	sc.Now, sc.Streams = e.Clock.Now, orStreams(sc.Streams, opts.Streams)
	if sc.Logger == nil {
		sc.Logger = opts.Logger
	}
	if e.Scheduler, err = scheduler.New(ctx, js, sc); err != nil {
		t.Fatalf("jetflowtest: scheduler: %v", err)
	}
	cc := opts.Crons
	cc.Now = e.Clock.Now
	if e.Crons, err = e.Scheduler.ConfigureCrons(cc); err != nil {
		t.Fatalf("jetflowtest: crons: %v", err)
	}
	if err := e.Crons.Sync(ctx); err != nil {
		t.Fatalf("jetflowtest: sync crons: %v", err)
	}
	if e.Worker, err = e.startWorker(ctx, opts.Register); err != nil {
		t.Fatalf("jetflowtest: worker: %v", err)
	}
	return e
}

func orStreams(s, def streams.Config) streams.Config {
	if s == (streams.Config{}) {
		return def
	}
	return s
}

// startWorker starts a worker on the env's clock serving what register
// registers, stopped when the test ends.
func (e *Env) startWorker(ctx context.Context, register func(w *worker.Worker) error) (*worker.Worker, error) {
	wc := e.opts.Worker
	wc.Now, wc.Streams = e.Clock.Now, orStreams(wc.Streams, e.opts.Streams)
	wc.TrustClock = true // every role runs on this clock
	if wc.Logger == nil {
		wc.Logger = e.opts.Logger
	}
	w, err := worker.New(ctx, e.JS, wc)
	if err != nil {
		return nil, err
	}
	if register != nil {
		if err := register(w); err != nil {
			return nil, fmt.Errorf("register: %w", err)
		}
	}
	if err := w.Start(context.Background()); err != nil {
		return nil, err
	}
	e.t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.StopAndCancel(sctx)
	})
	e.mu.Lock()
	e.workers = append(e.workers, w)
	e.mu.Unlock()
	return w, nil
}

// Handle starts one more worker on the env, serving fn with h (and opts),
// stopped when the test ends: a handler may be added after New, once what
// it needs (the env's producer, say) exists. It fails the test if the
// worker does not start.
func Handle[A any](e *Env, fn jetflow.Function[A], h func(ctx context.Context, j *worker.Job[A]) error, opts ...worker.Options) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.Timeout)
	defer cancel()
	if _, err := e.startWorker(ctx, func(w *worker.Worker) error { return worker.Register(w, fn, h, opts...) }); err != nil {
		e.t.Fatalf("jetflowtest: worker for %s: %v", fn.Name(), err)
	}
}

// streams is the naming configuration of the env's producer.
func (e *Env) streams() streams.Config {
	return orStreams(e.opts.Producer.Streams, e.opts.Streams)
}

// Now is the env's clock.
func (e *Env) Now() time.Time { return e.Clock.Now() }

// Advance moves the clock forward by d. On the way it stops at every due
// time in order (a delayed run, a retry's backoff, a cron fire), fires
// what is due then and waits until the runs it started have ended (Drain),
// so that what they schedule within d fires too. It fails the test when a
// run does not end within Options.Timeout. Call it from the test's
// goroutine.
func (e *Env) Advance(d time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.Timeout)
	defer cancel()
	if err := e.AdvanceContext(ctx, d); err != nil {
		e.t.Fatalf("jetflowtest: advance %s: %v", d, err)
	}
}

// AdvanceContext is Advance bounded by ctx; it returns an error instead of
// failing the test.
func (e *Env) AdvanceContext(ctx context.Context, d time.Duration) error {
	target := e.Clock.Now().Add(d)
	stuck := 0
	for {
		if err := e.Drain(ctx); err != nil {
			return err
		}
		next, ok, err := e.nextEvent(ctx)
		if err != nil {
			return err
		}
		if !ok || next.After(target) {
			break
		}
		if !next.After(e.Clock.Now()) {
			// Due now, and still there after firing what is due: tried a
			// few times, then it is an error rather than a spin.
			if stuck++; stuck > 3 {
				return fmt.Errorf("jetflowtest: something due at %s does not fire (a cron or delayed run the scheduler cannot take)",
					next.Format(time.RFC3339Nano))
			}
			continue
		}
		stuck = 0
		e.Clock.set(next)
	}
	e.Clock.set(target)
	return e.Drain(ctx)
}

// nextEvent is the earliest time something is due: a delayed run or an
// enabled cron's next fire.
func (e *Env) nextEvent(ctx context.Context) (time.Time, bool, error) {
	next, ok, err := e.Scheduler.NextDue(ctx)
	if err != nil {
		return time.Time{}, false, err
	}
	crons, err := e.Crons.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return time.Time{}, false, err
	}
	for _, c := range crons {
		if c.Enabled && !c.Next.IsZero() && (!ok || c.Next.Before(next)) {
			next, ok = c.Next, true
		}
	}
	return next, ok, nil
}

// fireDue publishes the delayed runs due by the clock and fires the crons
// due: what the scheduler's leader does as time passes.
func (e *Env) fireDue(ctx context.Context) error {
	if _, err := e.Scheduler.DispatchDue(ctx); err != nil {
		return err
	}
	_, err := e.Crons.Tick(ctx)
	return err
}

// Drain fires what is due by the clock and waits until no run is due or
// running: every run due now has ended (those it scheduled for now too).
// Runs scheduled later stay pending; Advance reaches them. Runs of a
// function no worker of the env serves stay pending too (RequireEnqueued
// finds them). Its error names the runs still busy when ctx ends.
func (e *Env) Drain(ctx context.Context) error {
	delay := time.Millisecond
	for {
		if err := e.fireDue(ctx); err != nil {
			return fmt.Errorf("jetflowtest: fire due runs: %w", err)
		}
		busy, err := e.busy(ctx)
		if err != nil {
			return err
		}
		if len(busy) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("jetflowtest: runs still due or running at %s: %s: %w",
				e.Clock.Now().Format(time.RFC3339), describe(busy), ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// busy lists the runs due by the clock that have not ended, of the
// functions the env's workers serve (others would wait forever).
func (e *Env) busy(ctx context.Context) ([]*jetflow.Run, error) {
	now := e.Clock.Now()
	infos, err := kv.ReadFunctions(ctx, e.JS, e.streams(), "")
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("jetflowtest: read functions: %w", err)
	}
	served := make(map[string]bool, len(infos))
	for _, fi := range infos {
		served[fi.Name] = true
	}
	var out []*jetflow.Run
	for _, st := range []jetflow.State{jetflow.Pending, jetflow.InProgress} {
		runs, err := e.list(ctx, producer.Filter{State: st})
		if err != nil {
			return nil, err
		}
		for _, r := range runs {
			if served[r.Name] && (r.State == jetflow.InProgress || !r.ScheduledTime.After(now)) {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// list reads every run matching f, page after page.
func (e *Env) list(ctx context.Context, f producer.Filter) ([]*jetflow.Run, error) {
	f.Limit = 1000
	var out []*jetflow.Run
	for {
		page, err := e.Producer.List(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("jetflowtest: list runs: %w", err)
		}
		out = append(out, page.Runs...)
		if page.Next == "" {
			return out, nil
		}
		f.After = page.Next
	}
}

func describe(runs []*jetflow.Run) string {
	parts := make([]string, 0, len(runs))
	for i, r := range runs {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("and %d more", len(runs)-10))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s (%s, due %s)", r.Name, r.ID, r.State, r.ScheduledTime.Format(time.RFC3339)))
	}
	sort.Strings(parts[:min(len(parts), 10)])
	return strings.Join(parts, ", ")
}
