package worker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/lifecycle"
	"github.com/jetflow-dev/jetflow/internal/liveness"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/internal/srvclock"
	"github.com/jetflow-dev/jetflow/internal/stall"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/metric"
)

// Config configures a Worker. Every zero field takes the default named.
type Config struct {
	// Streams names subjects and buckets (default prefix "jetflow").
	Streams streams.Config
	// Middleware wraps every handler of this worker, the first outermost
	// (inside jetflow's own telemetry middleware). Default none.
	Middleware []Middleware
	// Provision: what New does about missing streams and buckets. Default
	// producer.ProvisionAuto (create what is missing; writes nothing on a
	// provisioned server).
	Provision producer.Provisioning
	// Logger for warnings and debug output. Default: discard.
	Logger *slog.Logger
	// ID names this worker in the functions registry. Default: generated.
	ID string
	// Concurrency is the default number of runs of one function this
	// process runs at once. Default 10.
	Concurrency int
	// AckWait is how long a run may go without a heartbeat before JetStream
	// redelivers it. Handlers heartbeat every AckWait/3. Default 30 s.
	AckWait time.Duration
	// LostAfter is how long a worker that receives the message of a run
	// claimed elsewhere must see its record unchanged (no heartbeat), on
	// its own clock, before it takes the run as lost (a retryable run is
	// then run again, an at-most-once run fails). It must outlast a leader
	// election of the runs bucket, during which live workers cannot write
	// heartbeats. Default max(2*AckWait, 30 s).
	LostAfter time.Duration
	// ReplayGrace: after its connection to NATS broke and came back, a
	// worker treats a first delivery of a message stored before the
	// reconnect as a possible replay (a server that crashed redelivers what
	// it had not recorded as acknowledged, as first deliveries): it reads the
	// record and claims the run before it starts, and one it finds
	// unclaimed waits until ReplayGrace after the reconnect, the time every
	// worker has to claim the runs it had in flight. It must exceed the
	// spread of the workers' reconnects (nats.go's ReconnectWait, 2 s by
	// default, plus its jitter). Default DefaultReplayGrace (5 s).
	ReplayGrace time.Duration
	// ProgressInterval coalesces progress writes: at most one per interval
	// per run. Default 250 ms.
	ProgressInterval time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// TrustClock takes Now as the NATS server's time for retries' due
	// times, as when every role runs on one fake clock (jetflowtest).
	// Default false: retries are due in the server's time, the worker
	// measuring its own offset from it (ClockOffset).
	TrustClock bool
}

// Options configure one function on this worker (HandleOptions).
type Options struct {
	// Concurrency in this process. Default Config.Concurrency.
	Concurrency int
	// Prefetch is how many runs this process pulls ahead, waiting for a
	// free runner (nats.go's PullMaxMessages). Default and minimum
	// Concurrency. More helps short handlers on a cluster; a run whose
	// message was stored half of AckWait ago is claimed before it starts.
	Prefetch int
	// MaxParallel is the most runs of this function in flight across all
	// workers (the consumer's MaxAckPending). Default 1000.
	MaxParallel int
	// Timeout ends a run as failed with jetflow.ErrTimeout, even when the
	// handler ignores its context. Default none.
	Timeout time.Duration
	// MaxAttempts of a retryable function, first attempt included. Default 5.
	MaxAttempts int
	// Backoff between attempts: exponential with full jitter, default
	// initial 1 s, base 2, max 1 h (delay after n failures is uniform in
	// [0, min(1h, 1s*2^(n-1))]).
	Backoff jetflow.Backoff
	// ClaimAfter is when a retryable run's claim (its inProgress record) is
	// written: a run still running ClaimAfter after it started is claimed
	// then; a shorter one goes from pending to its outcome, one write less.
	// Only a fresh delivery starts unclaimed (README, guarantee 3; the cases:
	// docs/design/guarantees.md). Negative: claim first. Default:
	// DefaultClaimAfter on one server, claim first on a cluster.
	ClaimAfter time.Duration
	// NoClaim never writes the claim of a retryable run (progress reports
	// still move the record to inProgress). AtMostOnce runs always claim.
	NoClaim bool
}

// pullExpiry is how long a pull request of the worker's consumers lasts,
// and pullHeartbeat how often the server says a waiting one is alive.
//
// nats.go's Consume pulls again when the messages it still expects fall
// below half its batch, and otherwise only after two heartbeats go missing.
// Its count of expected messages can outlive the requests themselves: the
// bench caught the server with no pull request waiting, 55,000 runs
// pending and nothing unacknowledged, while the client waited for messages
// no request would bring, until two heartbeats went missing (2 s at
// nats.go's default of half the expiry). A pull lost with a consumer
// leader (a cluster node that died, or a leader change: nats.go resets its
// count then but does not pull again, nats-io/nats.go#2063) ends the same
// way. Heartbeats every 500 ms (the shortest nats.go allows) bound such a stall
// to about a second, for two small messages a second per function and
// worker while idle; a stall that ends a busy spell is cut shorter still
// (watchPulls, consumer.go).
const (
	pullExpiry    = 2 * time.Second
	pullHeartbeat = 500 * time.Millisecond
)

// DefaultClaimAfter is the default Options.ClaimAfter.
const DefaultClaimAfter = 100 * time.Millisecond

// claimFirst reports whether runs of e are claimed before they start.
func (e *fnEntry) claimFirst() bool {
	return e.kind == jetflow.AtMostOnce || !e.opts.NoClaim && e.opts.ClaimAfter < 0
}

// claimLate reports whether runs of e are claimed once they have run
// ClaimAfter.
func (e *fnEntry) claimLate() bool {
	return !e.claimFirst() && !e.opts.NoClaim
}

// Worker runs handlers for the functions registered on it.
type Worker struct {
	cfg   Config
	scfg  streams.Config
	js    jetstream.JetStream
	nc    *nats.Conn
	store *kv.Store // reads
	// readConfirmed reads a record after a refused write: store.Decide
	// (a test reads a replica behind instead).
	readConfirmed func(ctx context.Context, id string) (*jetflow.Run, bool, error)
	runs          *engine.Runs // every record write
	p             producerPlumbing
	log           *slog.Logger
	now           func() time.Time
	life          lifecycle.L

	mu         sync.Mutex
	fns        map[string]*fnEntry
	running    map[string]*active
	canceled   map[string]time.Time
	inflight   sync.WaitGroup
	givingBack chan struct{} // slots of giveBackClaim, maxGiveBacks
	started    bool
	stopping   bool
	stopCh     chan struct{}
	out        outcomes
	claims     claims
	replay     replayGuard
	stall      *stall.Detector // stops of this process (heldLong)
	// beforeStart, when set (by a test, before Start), is called as a
	// handler is about to start, before claimIfWaited: a stand-in for a
	// pause of the process there.
	beforeStart func(*jobCore)
	live        liveness.Watch // records of other workers' runs seen unchanged
	// work is the context every handler's context derives from:
	// stopWork cancels them all at once, those starting later included.
	work     context.Context
	stopWork context.CancelCauseFunc
	clock    *srvclock.Clock // the server's time: retries' due times
	// replicated: the function stream has replicas (a cluster); set at
	// Start, before the first delivery.
	replicated bool
	// The runs bucket's leader_since as last read (runsLeaderSince).
	leaderMu    sync.Mutex
	leaderRead  time.Time
	leaderSince time.Time
	leaderErr   error
	health      workerHealth // what liveness and readiness read (health.go)
}

type fnEntry struct {
	name string
	kind jetflow.Kind
	opts Options
	run  func(ctx context.Context, j *jobCore) error
	// handle is run wrapped in the middleware, built at Start.
	handle HandlerFunc
	work   chan delivery // to the runners
	// arrivals: how long deliveries may have waited for a runner.
	arrivals arrivals
	cc       jetstream.ConsumeContext // nil while paused; guarded by Worker.mu after Start
	cons     jetstream.Consumer
	// paused: the function is paused (kv.SetPaused): no pull; a delivery
	// still buffered goes back to the stream at once.
	paused bool
	attr   metric.MeasurementOption
	// The options of the hot path's measurements, built once: a variadic
	// call through an interface allocates its slice each time.
	addAttr                []metric.AddOption
	recAttr, recOK, recErr []metric.RecordOption
	// checking: a look for a consumer gone is under way; consumeStopped:
	// nats.go said the consumer was deleted and stopped its Consume
	// (consumer.go).
	checking, consumeStopped atomic.Bool
}

// active is a run in progress in this process.
type active struct {
	cancel context.CancelCauseFunc
	msg    jetstream.Msg
	job    *jobCore
	// claimed: the late claim was written or is being written.
	claimed bool
}

// New returns a worker on js. It looks jetflow's streams and buckets up and
// creates what is missing unless Config.Provision says not to (see
// producer.Provisioning; docs/permissions.md lists what a worker's NATS
// user needs). Register handlers with Handle, then Start.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Worker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ID == "" {
		cfg.ID = nuid.Next()
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 10
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.LostAfter <= 0 {
		cfg.LostAfter = max(2*cfg.AckWait, 30*time.Second)
	}
	if cfg.ReplayGrace <= 0 {
		cfg.ReplayGrace = DefaultReplayGrace
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = 250 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p, err := producer.New(ctx, js, producer.Config{Streams: cfg.Streams, Provision: cfg.Provision, Logger: cfg.Logger, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg: cfg, scfg: cfg.Streams.WithDefaults(), js: js, nc: js.Conn(), store: engine.Of(p).Store(), runs: engine.Of(p).Runs(),
		p:   producerPlumbing{p, engine.Of(p)},
		log: cfg.Logger, now: cfg.Now,
		fns: map[string]*fnEntry{}, running: map[string]*active{}, canceled: map[string]time.Time{},
		stopCh: make(chan struct{}), replay: replayGuard{kick: make(chan struct{}, 1)},
		stall: stall.New(cfg.AckWait/4, cfg.AckWait), clock: newClock(cfg), givingBack: make(chan struct{}, maxGiveBacks),
	}
	w.work, w.stopWork = context.WithCancelCause(context.Background())
	w.readConfirmed = w.store.Decide
	return w, nil
}

// Producer is the producer the worker schedules child runs with.
func (w *Worker) Producer() *producer.Producer { return w.p.Producer }

// producerPlumbing is the worker's producer: its public calls (RunAt for
// children) and its plumbing, which it does not export (Dispatch, Release,
// Complete: engine.Dispatcher).
type producerPlumbing struct {
	*producer.Producer
	*engine.Dispatcher
}

// ErrRegistered: a function is registered twice, or after Start.
var ErrRegistered = errors.New("worker: function already registered or worker started")

// Register registers handler h for fn; it returns an error instead of
// panicking (see Handle).
func Register[A any](w *Worker, fn jetflow.Function[A], h func(ctx context.Context, job *Job[A]) error, opts ...Options) error {
	if err := jetflow.ValidateName(fn.Name()); err != nil {
		return err
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Concurrency <= 0 {
		o.Concurrency = w.cfg.Concurrency
	}
	if o.Prefetch < o.Concurrency {
		o.Prefetch = o.Concurrency
	}
	if o.MaxParallel <= 0 {
		o.MaxParallel = 1000
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	o.Backoff = o.Backoff.WithDefaults()
	e := &fnEntry{name: fn.Name(), kind: fn.Kind(), opts: o, work: make(chan delivery), attr: telemetry.Fn(fn.Name())}
	e.addAttr = []metric.AddOption{e.attr}
	e.recAttr = []metric.RecordOption{e.attr}
	e.recOK = []metric.RecordOption{e.attr, outcomeSuccess}
	e.recErr = []metric.RecordOption{e.attr, outcomeError}
	e.run = func(ctx context.Context, c *jobCore) error {
		raw, err := c.args(ctx)
		if err != nil {
			return err
		}
		var args A
		if err := decodeArgs(raw, &args); err != nil {
			return jetflow.Permanent(fmt.Errorf("%w: %v", jetflow.ErrBadArgs, err))
		}
		if err := h(ctx, &Job[A]{Args: args, jobCore: c}); err != nil {
			return err
		}
		return c.offloadResult(ctx)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.fns[fn.Name()] != nil {
		return fmt.Errorf("%w: %s", ErrRegistered, fn.Name())
	}
	w.fns[fn.Name()] = e
	return nil
}

// Handle registers handler h for fn and panics on a registration error
// (an invalid name, a duplicate): for program start-up, like http.Handle.
func Handle[A any](w *Worker, fn jetflow.Function[A], h func(ctx context.Context, job *Job[A]) error, opts ...Options) {
	if err := Register(w, fn, h, opts...); err != nil {
		panic(err)
	}
}

// ConsumerName is the durable consumer of function fn.
func ConsumerName(prefix, fn string) string {
	h := fnv.New32a()
	h.Write([]byte(fn))
	return fmt.Sprintf("%s_%s_%08x", prefix, strings.ReplaceAll(fn, ".", "_"), h.Sum32())
}

// Start creates or updates each function's durable consumer, registers the
// functions in the registry and starts consuming. It returns at once; the
// worker runs until Stop or StopAndCancel, or until ctx ends, which stops
// it as Stop(context.Background()) does: no new run starts, running
// handlers finish (heartbeats go on meanwhile, so their runs do not look
// lost), then Stopped is closed. Errors: lifecycle.ErrStarted's "already
// started" on a second call, and those of creating the consumers.
func (w *Worker) Start(ctx context.Context) error {
	fns, err := w.takeFunctions()
	if err != nil {
		return err
	}
	unsub, err := w.subscribe()
	if err != nil {
		return err
	}
	stream, err := w.js.Stream(ctx, w.scfg.FunctionStream())
	if err != nil {
		unsub()
		return fmt.Errorf("worker: %w", err)
	}
	w.setClaimModes(stream, fns)
	// The server's clock first: a first delivery's age is measured on it
	// (mayHaveWaited); until a probe answers, every delivery is claimed
	// first.
	w.probeClock(ctx)
	pw := w.watchPauses(ctx)
	if err := w.startConsumers(ctx, stream, fns, pw.paused); err != nil {
		pw.stop()
		unsub()
		return err
	}
	w.startRunners(fns)
	if err := w.register(ctx, fns); err != nil {
		w.log.Warn("function registry", "error", err)
	}
	// Heartbeats and cancel notices go on until the handlers in flight have
	// finished, even when ctx ends first: their runs must not look lost.
	// The end of ctx stops the worker as Stop does.
	err = w.life.Start(context.WithoutCancel(ctx), func(ctx context.Context) {
		defer pw.stop()
		defer unsub()
		w.loop(ctx, fns, pw.updates)
	})
	if err != nil {
		pw.stop()
		unsub()
		return err
	}
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				_ = w.Stop(context.Background())
			case <-w.life.Stopped():
			}
		}()
	}
	return nil
}

// takeFunctions marks the worker started and returns its functions.
func (w *Worker) takeFunctions() ([]*fnEntry, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return nil, lifecycle.ErrStarted
	}
	w.started = true
	fns := make([]*fnEntry, 0, len(w.fns))
	for _, e := range w.fns {
		fns = append(fns, e)
	}
	return fns, nil
}

// subscribe starts the cancel notices, the outcome and claim replies and
// the connection watch; unsub ends them.
func (w *Worker) subscribe() (unsub func(), err error) {
	sub, err := w.nc.Subscribe(w.scfg.CancelSubject(), func(m *nats.Msg) { w.noteCancel(string(m.Data)) })
	if err != nil {
		return nil, fmt.Errorf("worker: cancel notices: %w", err)
	}
	osub, err := w.startOutcomes()
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("worker: outcome replies: %w", err)
	}
	csub, err := w.startClaims()
	if err != nil {
		_ = sub.Unsubscribe()
		_ = osub.Unsubscribe()
		return nil, fmt.Errorf("worker: claim replies: %w", err)
	}
	watchDone := make(chan struct{})
	w.watchConnection(w.nc, watchDone)
	return func() { _ = sub.Unsubscribe(); _ = osub.Unsubscribe(); _ = csub.Unsubscribe(); close(watchDone) }, nil
}

// setClaimModes settles each function's ClaimAfter. On a replicated stream
// a consumer leader change redelivers the messages in flight at once,
// while their runs may be running unclaimed elsewhere, or may have run with
// their outcome not yet written (the runs bucket electing a leader): every
// run is claimed first by default there. A function given a ClaimAfter is
// claimed late, and a second delivery of an unclaimed run is held back
// (reconcile); that is sound only where the server counts every such
// redelivery (deliversAfterQuorum).
func (w *Worker) setClaimModes(stream jetstream.Stream, fns []*fnEntry) {
	w.replicated = stream.CachedInfo().Config.Replicas > 1
	sv := w.nc.ConnectedServerVersion()
	for _, e := range fns {
		switch {
		case e.opts.ClaimAfter == 0 && w.replicated:
			e.opts.ClaimAfter = -1
		case e.opts.ClaimAfter == 0:
			e.opts.ClaimAfter = DefaultClaimAfter
		case e.claimLate() && w.replicated && !deliversAfterQuorum(sv):
			w.log.Warn("late claims on a replicated stream need nats-server 2.12 or later: a consumer leader change may hand out a run running here again as a first delivery",
				"function", e.name, "server_version", sv)
		}
	}
}

// pauseWatch is what the worker knows of paused functions (kv.SetPaused):
// those paused at its start, and a watch of pauses and resumes.
type pauseWatch struct {
	paused  map[string]bool
	updates <-chan jetstream.KeyValueEntry
	watch   jetstream.KeyWatcher
}

func (p pauseWatch) stop() {
	if p.watch != nil {
		_ = p.watch.Stop()
	}
}

// watchPauses reads the paused functions and watches their changes. A user
// that may not read the bucket is told at once (natsperm), and the worker
// runs without following pauses.
func (w *Worker) watchPauses(ctx context.Context) pauseWatch {
	var pw pauseWatch
	err := natsperm.Do(ctx, w.nc, func(ctx context.Context) error {
		var err error
		if pw.paused, err = kv.Paused(ctx, w.js, w.scfg); err != nil {
			return err
		}
		b, err := w.js.KeyValue(ctx, w.scfg.FunctionsBucket())
		if err != nil {
			return err
		}
		kw, err := b.Watch(context.WithoutCancel(ctx), kv.PausedKey(">"), jetstream.UpdatesOnly())
		if err != nil {
			return err
		}
		pw.watch, pw.updates = kw, kw.Updates()
		return nil
	}, "$JS.")
	if err != nil {
		w.log.Warn("paused functions: not read; pausing is not followed", "error", err)
	}
	return pw
}

// startConsumers creates each function's consumer and starts consuming
// (not a paused function's: its runs wait in the stream until it is
// resumed). On a failure it stops what it started.
func (w *Worker) startConsumers(ctx context.Context, stream jetstream.Stream, fns []*fnEntry, paused map[string]bool) error {
	fail := func(err error) error {
		w.stopConsumers(fns)
		w.halt()
		return err
	}
	for _, e := range fns {
		cons, err := w.createConsumer(ctx, stream, e)
		if err != nil {
			return fail(fmt.Errorf("worker: consumer for %s: %w", e.name, err))
		}
		e.cons = cons
		if paused[e.name] {
			e.paused = true
			continue
		}
		cc, err := w.consume(e)
		if err != nil {
			return fail(fmt.Errorf("worker: consume %s: %w", e.name, err))
		}
		e.cc = cc
	}
	return nil
}

// startRunners wraps each function's handler in the middleware and starts
// its runners, once every consumer is in place (dispatch waits for them),
// so that a failed Start leaves no goroutine behind.
func (w *Worker) startRunners(fns []*fnEntry) {
	for _, e := range fns {
		run := e.run
		e.handle = chain(func(ctx context.Context, r Run) error { return run(ctx, r.(*jobCore)) },
			append([]Middleware{telemetryMiddleware}, w.cfg.Middleware...)...)
	}
	for _, e := range fns {
		for range e.opts.Concurrency {
			go w.runner(e)
		}
		go w.watchPulls(e)
	}
}

// loop is the worker's upkeep until ctx ends: heartbeats, late claims,
// outcome retries, the clock probe, the registry, pauses.
func (w *Worker) loop(ctx context.Context, fns []*fnEntry, pauses <-chan jetstream.KeyValueEntry) {
	go w.stall.Run(ctx)
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	hb := time.NewTicker(w.cfg.AckWait / 3)
	defer hb.Stop()
	ct := time.NewTicker(claimTick(fns))
	defer ct.Stop()
	ot := time.NewTicker(time.Second)
	defer ot.Stop()
	for {
		w.health.loop.Mark()
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			w.heartbeat(ctx)
		case <-ct.C:
			w.claimLate(ctx)
		case <-w.replay.kick:
			w.claimLate(ctx) // just reconnected: claim what runs here now
		case <-ot.C:
			w.sweepOutcomes()
		case <-t.C:
			w.probeClock(ctx)
			w.renew(ctx, fns)
			w.pruneCanceled()
		case en, ok := <-pauses:
			if !ok {
				pauses = nil
				continue
			}
			w.pauseChanged(ctx, fns, en)
		}
	}
}

// pauseChanged follows a function paused or resumed for every worker.
func (w *Worker) pauseChanged(ctx context.Context, fns []*fnEntry, en jetstream.KeyValueEntry) {
	if en == nil {
		return
	}
	if fn, ok := kv.PausedFunction(en.Key()); ok {
		w.setPaused(fn, en.Operation() == jetstream.KeyValuePut)
		w.renew(ctx, fns)
	}
}

// renew writes the worker's entries in the functions registry again; one
// that fails is written at the next tick (its TTL outlasts a few).
func (w *Worker) renew(ctx context.Context, fns []*fnEntry) {
	if err := w.register(ctx, fns); err != nil {
		w.log.Debug("functions registry", "error", err)
	}
}

// halt makes the worker stop taking runs: dispatch gives messages back.
func (w *Worker) halt() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopping {
		w.stopping = true
		close(w.stopCh)
	}
}

func (w *Worker) stopConsumers(fns []*fnEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range fns {
		if e.cc != nil {
			e.cc.Stop()
		}
	}
}

// createConsumer creates (or updates) the durable consumer of e's runs on
// the function stream.
func (w *Worker) createConsumer(ctx context.Context, stream jetstream.Stream, e *fnEntry) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	// A user without the right to create the consumer fails at once with
	// the server's permissions violation, not at ctx's end.
	err := natsperm.Do(ctx, w.nc, func(ctx context.Context) error {
		var err error
		cons, err = stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       ConsumerName(w.scfg.Prefix, e.name),
			Description:   "jetflow function " + e.name,
			FilterSubject: w.scfg.FunctionFilter(e.name),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       w.cfg.AckWait,
			MaxDeliver:    -1,
			MaxAckPending: e.opts.MaxParallel,
			Replicas:      0,
		})
		return err
	}, "$JS.")
	return cons, err
}

// consume starts pulling e's runs.
func (w *Worker) consume(e *fnEntry) (jetstream.ConsumeContext, error) {
	return e.cons.Consume(func(m jetstream.Msg) { w.dispatch(e, m) },
		jetstream.PullMaxMessages(e.opts.Prefetch),
		// Pull requests renewed every 2 s, heartbeats every 500 ms: a
		// pull lost or miscounted stalls the function for a second, not
		// half a minute (see pullHeartbeat).
		jetstream.PullExpiry(pullExpiry),
		jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			w.log.Debug("consume", "function", e.name, "error", err)
			if consumerMayBeGone(err) {
				w.checkConsumer(e, errors.Is(err, jetstream.ErrConsumerDeleted))
			}
		}))
}

// setPaused pauses or resumes function fn on this worker, if it serves it:
// paused, it stops pulling (runs already running finish; deliveries still
// buffered go back to the stream); resumed, it pulls again.
func (w *Worker) setPaused(fn string, paused bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.fns[fn]
	if e == nil || e.cons == nil {
		return
	}
	if w.stopping || e.paused == paused {
		return
	}
	e.paused = paused
	if paused {
		if e.cc != nil {
			e.cc.Drain() // buffered deliveries reach dispatch, which gives them back
			e.cc = nil
		}
		w.log.Info("function paused", "function", fn)
		return
	}
	cc, err := w.consume(e)
	if err != nil {
		w.log.Warn("function resumed, but consuming failed; resumed at the next change", "function", fn, "error", err)
		e.paused = true
		return
	}
	e.cc = cc
	w.log.Info("function resumed", "function", fn)
}

// Paused reports whether this worker has paused function fn (kv.SetPaused,
// producer.PauseFunction): it takes none of its runs.
func (w *Worker) Paused(fn string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.fns[fn]
	return e != nil && e.paused
}

// Stop stops taking new runs, waits for running handlers to finish, and
// returns. Runs pulled but not started go back to the stream unharmed. If
// ctx ends first, running handlers are canceled as StopAndCancel cancels
// them (their runs go back to the stream when they return) and Stop
// returns ctx's error at once.
func (w *Worker) Stop(ctx context.Context) error {
	w.halt()
	w.mu.Lock()
	fns := make([]*fnEntry, 0, len(w.fns))
	for _, e := range w.fns {
		fns = append(fns, e)
	}
	w.mu.Unlock()
	// Drain hands buffered messages to dispatch, which gives them back.
	for _, e := range fns {
		if e.cc != nil {
			e.cc.Drain()
		}
	}
	for _, e := range fns {
		if e.cc == nil {
			continue
		}
		select {
		case <-e.cc.Closed():
		case <-ctx.Done():
		}
	}
	done := make(chan struct{})
	go func() { w.inflight.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		w.stopWork(ErrStopping)
	}
	if lerr := w.life.Stop(context.Background()); err == nil {
		err = lerr
	}
	return err
}

// StopAndCancel stops the worker as Stop does, but first cancels the
// context of every running handler, with cause ErrStopping
// (context.Cause). A retryable run whose handler then returns an error is
// not failed and does not count as an attempt's outcome: its message goes
// back to the stream, as Stop's runs that had not started do, and the run
// is retried by a worker later (at once if it was not claimed yet; if it
// was, once its claim is seen as lost, after Config.LostAfter). A handler
// that returns nil all the same succeeds. An at-most-once run interrupted
// this way is never run again: it ends failed, worker lost. StopAndCancel
// returns when the handlers have returned, or with ctx's error when ctx
// ends first.
func (w *Worker) StopAndCancel(ctx context.Context) error {
	w.halt()
	w.stopWork(ErrStopping)
	return w.Stop(ctx)
}

// Stopped is closed when the worker has stopped.
func (w *Worker) Stopped() <-chan struct{} { return w.life.Stopped() }

// ErrResultTooLarge: SetResult's value would not fit in the run record.
var ErrResultTooLarge = errors.New("worker: result too large")

// ErrStopping is the cause (context.Cause) of a handler's context canceled
// because its worker is stopping: by StopAndCancel, or by Stop when its
// ctx ended before the handler returned.
var ErrStopping = errors.New("worker: stopping")

var (
	errWorkerStopping = ErrStopping
	errTakenOver      = errors.New("worker: run changed by another writer")
)

func (w *Worker) noteCancel(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.canceled[id] = w.now()
	if a := w.running[id]; a != nil {
		a.cancel(jetflow.ErrCanceled)
	}
}

// cancelRecorded reports whether run id's record has ended, read from the
// leader. Producer.Cancel writes the canceled record before it sends its
// notice, so a noted notice whose run is not ended was sent without it (by
// hand, docs/wire-format.md "Cancel notices"): it is forgotten, so that it
// neither drops the run's message (a run published without a record would
// be lost, one with a pending record stuck until the notice expired) nor
// discards its outcome (leaving the record inProgress).
func (w *Worker) cancelRecorded(ctx context.Context, id string) (bool, error) {
	r, _, err := w.store.Decide(ctx, id)
	if err != nil && !errors.Is(err, jetflow.ErrNotFound) {
		return false, err
	}
	if err == nil && r.State.Terminal() {
		return true, nil
	}
	w.mu.Lock()
	delete(w.canceled, id)
	w.mu.Unlock()
	return false, nil
}

// cancelBacked is cancelRecorded for a handler already canceled by a
// notice: a record it cannot read counts as ended (the outcome is
// discarded, as before the check; the scheduler's repair sweep settles a
// run left inProgress).
func (w *Worker) cancelBacked(ctx context.Context, id string) bool {
	ended, err := w.cancelRecorded(ctx, id)
	return ended || err != nil
}

func (w *Worker) isCanceled(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.canceled[id]
	return ok
}

func (w *Worker) pruneCanceled() {
	w.mu.Lock()
	defer w.mu.Unlock()
	cut := w.now().Add(-10 * time.Minute)
	for id, t := range w.canceled {
		if t.Before(cut) {
			delete(w.canceled, id)
		}
	}
}

// heartbeat tells JetStream that every running run is still in progress,
// and flushes coalesced progress.
func (w *Worker) heartbeat(ctx context.Context) {
	type beat struct {
		a   *active
		msg jetstream.Msg
	}
	w.mu.Lock()
	runs := make([]beat, 0, len(w.running))
	for _, a := range w.running {
		runs = append(runs, beat{a, a.msg})
	}
	w.mu.Unlock()
	for _, b := range runs {
		a := b.a
		if err := b.msg.InProgress(); err != nil {
			w.log.Debug("in-progress ack", "run_id", a.job.env.ID, "error", err)
		}
		if err := a.job.beat(ctx); errors.Is(err, jetflow.ErrCanceled) {
			a.cancel(jetflow.ErrCanceled)
		} else if errors.Is(err, kv.ErrConflict) {
			// Taken over by another worker that thought this one lost:
			// stop; its outcome would be discarded anyway.
			a.cancel(errTakenOver)
		}
	}
}

// claimTick is how often running runs are checked for a late claim: half
// the shortest ClaimAfter, at least 10 ms.
func claimTick(fns []*fnEntry) time.Duration {
	d := time.Hour
	for _, e := range fns {
		if e.claimLate() {
			d = min(d, e.opts.ClaimAfter/2)
		}
	}
	return max(d, 10*time.Millisecond)
}

// claimLate writes the claim of every run that has run ClaimAfter without
// one. A run canceled or taken meanwhile has its context canceled.
func (w *Worker) claimLate(ctx context.Context) {
	now := w.now()
	// Just reconnected: a run in flight here may be redelivered elsewhere
	// (a server crash forgets deliveries), where it waits for this claim.
	claimNow := w.claimNow()
	w.mu.Lock()
	var due []*active
	for _, a := range w.running {
		if a.lateClaimDue(now, claimNow) {
			a.claimed = true
			due = append(due, a)
		}
	}
	w.mu.Unlock()
	for _, a := range due {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := a.job.claim(cctx)
		cancel()
		if errors.Is(err, jetflow.ErrCanceled) {
			a.cancel(jetflow.ErrCanceled)
		} else if errors.Is(err, kv.ErrConflict) || errors.Is(err, kv.ErrExists) {
			a.cancel(errTakenOver)
		} else if err != nil {
			w.mu.Lock()
			a.claimed = false // try again on the next tick
			w.mu.Unlock()
		}
	}
}

func (w *Worker) isStopping() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopping
}

// swapMsg makes m the delivery of a run already running here (a duplicate
// delivery after a consumer leader change): no second handler starts, and
// the outcome acknowledges the newest delivery. It reports false when the
// run is not running here.
func (w *Worker) swapMsg(id string, attempt int, m jetstream.Msg) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.running[id]
	if a == nil || a.job.env.Attempt != attempt {
		return false
	}
	a.msg = m
	return true
}

// finish removes j from the runs in progress here and returns its newest
// delivery (m if it was not running). An entry of another job for the same
// id (a later attempt taken over here) stays.
func (w *Worker) finish(j *jobCore, m jetstream.Msg) jetstream.Msg {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a := w.running[j.env.ID]; a != nil && a.job == j {
		m = a.msg
		delete(w.running, j.env.ID)
	}
	return m
}

// currentMsg is the newest delivery of a running run.
func (w *Worker) currentMsg(id string, m jetstream.Msg) jetstream.Msg {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a := w.running[id]; a != nil {
		return a.msg
	}
	return m
}

// probeClock measures this process's clock against the server's (retries
// are due in the server's time) and says so when it is over a second off.
func (w *Worker) probeClock(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := w.clock.Probe(pctx, w.nc, kv.APIPrefix(w.js), w.scfg.FunctionStream(), 3); err != nil {
		w.log.Debug("clock probe", "error", err)
		return
	}
	if off := w.clock.Offset(); !w.cfg.TrustClock && off.Abs() > time.Second {
		w.log.Warn("this worker's clock is off the NATS server's; retries are due in the server's time", "offset", off.Round(time.Millisecond))
	}
}

// newClock is the worker's estimate of the server's clock: over cfg.Now,
// pinned to it (no offset) when the config says to trust it.
func newClock(cfg Config) *srvclock.Clock {
	if cfg.TrustClock {
		return srvclock.NewPinned(cfg.Now)
	}
	return srvclock.New(cfg.Now)
}

// ClockOffset is this worker's clock minus the NATS server's, as last
// measured (0 before the first measurement). Retries are due in the
// server's time whatever it is.
func (w *Worker) ClockOffset() time.Duration { return w.clock.Offset() }

// lateClaimDue reports whether a's run, started unclaimed, is to be claimed
// now: it has run ClaimAfter, or every run here is to be claimed at once
// (just reconnected).
func (a *active) lateClaimDue(now time.Time, claimNow bool) bool {
	j := a.job
	if !j.fn.claimLate() || a.claimed {
		return false
	}
	return claimNow || now.Sub(j.started) >= j.fn.opts.ClaimAfter
}
