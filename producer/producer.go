package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/jsbatch"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/internal/payload"
	"github.com/jetflow-dev/jetflow/internal/srvclock"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Limits checked before anything is written.
const (
	// MaxBatch is the most runs one Batch call schedules.
	MaxBatch = 1000
	// MaxBatchArgs is the most argument bytes one call carries.
	MaxBatchArgs = 8 << 20
)

var (
	// ErrAlreadyExists: a run with the requested id exists; the call returns
	// its id and did not schedule another.
	ErrAlreadyExists = errors.New("producer: run already exists")
	// ErrTooManyRuns: more than MaxBatch runs in one call.
	ErrTooManyRuns = errors.New("producer: too many runs in one call")
	// ErrArgsTooLarge: args above MaxBatchArgs in one call, or one run's
	// args above what jetflow offloads to the payloads bucket
	// (payload.MaxSize, 32 MiB), or offloaded args of a run due later than
	// the bucket keeps them.
	ErrArgsTooLarge = errors.New("producer: arguments too large")
	// ErrBatchFailed: the batch was refused by the server; none of it was written.
	ErrBatchFailed = errors.New("producer: batch not written")
)

// Config configures a Producer. The zero value is usable.
type Config struct {
	// Streams names subjects and buckets; see streams.Config for defaults.
	Streams streams.Config
	// Provision is what New does about the streams and buckets. Default
	// ProvisionAuto: create or update only what is missing or differs.
	Provision Provisioning
	// Logger receives debug logs. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default: the NATS server's time, this process's
	// clock corrected by its measured offset (a delayed run is due in the
	// server's time, whatever this host's clock says).
	Now func() time.Time
}

// Producer schedules runs and reads their status. It is safe for concurrent
// use. It does not own the NATS connection it is given.
type Producer struct {
	store *kv.Store          // reads
	runs  *engine.Runs       // record writes
	d     *engine.Dispatcher // dispatch, release, on-complete: shared with the roles
	cfg   streams.Config
	js    jetstream.JetStream
	nc    *nats.Conn
	log   *slog.Logger
	now   func() time.Time
	win   *window // the connection's pipelined publishes (window.go)
}

// Provisioning is what New does about jetflow's streams and buckets.
type Provisioning int

const (
	// ProvisionAuto looks every stream and bucket up (streams.Check) and
	// provisions (streams.Provision) only when one is missing or shaped
	// otherwise than Config.Streams asks. On a provisioned server it
	// writes nothing, so the producer's NATS user needs no stream-admin
	// rights; on a new server it creates them, which needs those rights.
	// The zero-setup default (jetflow dev, examples, tests).
	ProvisionAuto Provisioning = iota
	// ProvisionOff only looks them up: one missing or shaped otherwise is
	// an error matching streams.ErrNotProvisioned, and New writes nothing.
	// For users without stream-admin rights, on a server provisioned by an
	// operator (`jetflow provision`, or streams.Provision).
	ProvisionOff
)

// clockProbeEvery is how often a producer in use measures its clock
// against the server's.
const clockProbeEvery = 30 * time.Second

// New looks up jetflow's streams and buckets, provisions them if
// cfg.Provision allows and they need it (see Provisioning), and returns a
// Producer on them.
//
// A NATS user that lacks a permission New uses gets the server's
// permissions violation at once (errors.Is(err,
// nats.ErrPermissionViolation)), not a timeout. See docs/permissions.md
// for what each role needs.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Producer, error) {
	scfg := cfg.Streams.WithDefaults()
	var st *kv.Store
	err := natsperm.Do(ctx, js.Conn(), func(ctx context.Context) error {
		err := streams.Check(ctx, js, cfg.Streams)
		if errors.Is(err, streams.ErrNotProvisioned) && cfg.Provision == ProvisionAuto {
			if perr := streams.Provision(ctx, js, cfg.Streams); perr != nil {
				if apiErr := (*jetstream.APIError)(nil); errors.As(perr, &apiErr) && apiErr.Code >= 500 {
					// The server failed (a store it could not create): no
					// other user would do better.
					return fmt.Errorf("provisioning (%v): %w", err, perr)
				}
				return fmt.Errorf("provisioning (%v): %w; provision with a user allowed to create streams: jetflow provision, or streams.Provision", err, perr)
			}
			err = nil
		}
		if err != nil {
			return err
		}
		st, err = kv.Open(ctx, js, scfg)
		return err
	}, "$JS.", "$KV.")
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = srvclock.Follow(ctx, nil, js.Conn(), kv.APIPrefix(js), scfg.FunctionStream(), clockProbeEvery)
	}
	win, err := windowOf(js.Conn())
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	p := &Producer{store: st, cfg: scfg, js: js, nc: js.Conn(), log: cfg.Logger, now: cfg.Now, win: win}
	p.d = engine.NewDispatcher(engine.DispatcherConfig{
		JS: js, Streams: scfg, Store: st, Now: cfg.Now, Ride: p.ride, Enqueue: p.enqueueCallback,
		Create: p.createRecord, Direct: p.publishDirect, Get: p.get, Log: cfg.Logger,
	})
	p.runs = p.d.Runs()
	return p, nil
}

// The roles built on a producer (worker, scheduler, retrier, pool, the
// dashboard and the CLI) reach its plumbing through the engine, not through
// exported methods: engine.Of(p) is p's Dispatcher, and engine.HoldOption
// holds a child run for its parent.
func init() {
	engine.RegisterProducer(func(p any) *engine.Dispatcher { return p.(*Producer).d },
		Option(func(o *options) { o.hold = true }))
}

// enqueueCallback schedules an on-complete run (engine.Dispatcher.Complete):
// one that exists already is not an error.
func (p *Producer) enqueueCallback(ctx context.Context, c jetflow.Call, id, parent string) error {
	_, err := p.Enqueue(ctx, c, WithID(id), WithParent(parent))
	if errors.Is(err, ErrAlreadyExists) {
		return nil
	}
	return err
}

// Enqueue schedules a run to start now. It returns the run id once the run
// is durable. Errors: jetflow.ErrInvalidName, jetflow.ErrBadArgs,
// jetflow.ErrInvalidRunID, ErrArgsTooLarge, ErrAlreadyExists (with the id).
func (p *Producer) Enqueue(ctx context.Context, c jetflow.Call, opts ...Option) (string, error) {
	return p.RunAt(ctx, time.Time{}, c, opts...)
}

// RunAfter schedules a run to start after delay.
func (p *Producer) RunAfter(ctx context.Context, delay time.Duration, c jetflow.Call, opts ...Option) (string, error) {
	if delay <= 0 {
		return p.RunAt(ctx, time.Time{}, c, opts...)
	}
	return p.RunAt(ctx, p.now().Add(delay), c, opts...)
}

// RunAt schedules a run to start at t (a zero or past t means now).
func (p *Producer) RunAt(ctx context.Context, t time.Time, c jetflow.Call, opts ...Option) (id string, err error) {
	ctx, span := telemetry.StartPublish(ctx, c.Name)
	if span.On() {
		defer func() { span.End(id, p.subject(c.Name, id), err) }()
	}
	return p.runAt(ctx, t, c, opts)
}

// subject is the subject a run of fn with id is published on ("" without
// an id).
func (p *Producer) subject(fn, id string) string {
	if id == "" {
		return ""
	}
	return p.cfg.FunctionSubject(fn, id)
}

// runAt is RunAt within the producer span ctx carries.
func (p *Producer) runAt(ctx context.Context, t time.Time, c jetflow.Call, opts []Option) (string, error) {
	r, o, err := p.prepare(ctx, t, c, opts)
	if err != nil {
		return "", err
	}
	if err := p.checkSize(len(r.Args)); err != nil {
		return "", err
	}
	if err := p.offloadArgs(ctx, r); err != nil {
		return "", err
	}
	if p.direct(r, o) {
		// The run's message is its record until a worker writes one.
		if err := p.publishDirect(ctx, r); err != nil {
			return "", fmt.Errorf("producer: publish run %s: %w", r.ID, err)
		}
		return r.ID, nil
	}
	if _, err := p.createRecord(ctx, r); err != nil {
		if errors.Is(err, kv.ErrExists) {
			p.dispatchExisting(r.ID)
			return r.ID, fmt.Errorf("run %s: %w", r.ID, ErrAlreadyExists)
		}
		return "", err
	}
	if o.hold {
		return r.ID, nil
	}
	if err := p.d.Dispatch(ctx, r); err != nil {
		// The record is durable: it is dispatched again in the background,
		// and the scheduler's repair sweep stands behind that.
		p.log.WarnContext(ctx, "dispatch failed; trying again in the background", "run_id", r.ID, "error", err)
		p.d.DispatchLater(r, p.now)
	}
	return r.ID, nil
}

func (p *Producer) prepare(ctx context.Context, t time.Time, c jetflow.Call, opts []Option) (*jetflow.Run, options, error) {
	o := collect(opts)
	args, err := c.Encode()
	if err != nil {
		return nil, o, err
	}
	id := o.id
	if id == "" {
		id = nuid.Next()
	} else if err := jetflow.ValidateRunID(id); err != nil {
		return nil, o, err
	}
	if o.hold && o.parent == "" {
		return nil, o, fmt.Errorf("%w: a held run needs WithParent", jetflow.ErrInvalidRunID)
	}
	if !streams.TimeFits(t) {
		return nil, o, fmt.Errorf("%w: time %s: a run record holds years 0 through 9999", jetflow.ErrBadArgs, t.UTC().Format(time.RFC3339))
	}
	now := p.now().UTC()
	sched := t.UTC()
	if t.IsZero() || sched.Before(now) {
		sched = now
	}
	kind := c.Kind
	if kind == "" {
		kind = jetflow.Retryable
	}
	r := &jetflow.Run{
		ID: id, Name: c.Name, Kind: kind, Args: args, State: jetflow.Pending,
		ScheduledTime: sched, CreationTime: now, MaxAttempts: o.maxAttempts,
		Parent: o.parent, Trace: telemetry.Inject(ctx),
	}
	if o.hold {
		r = engine.HoldRun(r)
	}
	r.Timeout = o.timeout
	if o.onComplete != nil {
		cargs, err := o.onComplete.Encode()
		if err != nil {
			return nil, o, fmt.Errorf("on-complete: %w", err)
		}
		r.OnComplete = &jetflow.Callback{Function: o.onComplete.Name, Args: cargs}
	}
	return r, o, nil
}

// direct reports whether run r is published without a record first: a run
// due now with a generated id (an idempotency key needs the record's
// create-only write), no hold, parent, pool or on-complete callback. Its
// message is its pending record (Get, List, Watch and Cancel read it there),
// and the worker's claim or outcome creates the record: one write less per
// run.
func (p *Producer) direct(r *jetflow.Run, o options) bool {
	if o.id != "" || o.hold || r.ScheduledTime.After(p.now()) {
		return false
	}
	return standalone(r) && strings.Count(r.Name, ".") < kv.QueuedMaxTokens
}

// standalone reports whether r is tied to no other run or pool: no parent,
// pool or on-complete callback.
func standalone(r *jetflow.Run) bool {
	return r.Parent == "" && r.Pool == "" && r.OnComplete == nil
}

// directEnvelope is the envelope of a run published without a record.
func directEnvelope(r *jetflow.Run) streams.Envelope {
	e := engine.Envelope(r)
	e.New = true
	return e
}

// checkSize checks one run's args of n bytes: at most payload.MaxSize when
// they go to the payloads bucket (above payload.Threshold), within the
// server's max payload less 4096 bytes when they stay in the record.
func (p *Producer) checkSize(n int) error {
	max := p.nc.MaxPayload()
	switch {
	case n > payload.MaxSize:
		return fmt.Errorf("%w: %d bytes of args, more than jetflow offloads (%d)", ErrArgsTooLarge, n, payload.MaxSize)
	case payload.Threshold(max) > 0 && n > payload.Threshold(max):
		return nil // offloaded
	case max > 0 && int64(n)+4096 > max:
		return fmt.Errorf("%w: %d bytes of args, server max payload %d", ErrArgsTooLarge, n, max)
	}
	return nil
}

// offloadArgs stores r's args in the payloads bucket when they are above
// payload.Threshold, r then holding the reference (docs/wire-format.md,
// "Large payloads"). A run due later than the payloads are kept
// (streams.Config.PayloadTTL less Retention, for its record's retention)
// is refused with ErrArgsTooLarge before anything is written.
func (p *Producer) offloadArgs(ctx context.Context, r *jetflow.Run) error {
	if !payload.Above(r.Args, p.nc.MaxPayload()) {
		return nil
	}
	if keep := p.cfg.PayloadTTL - p.cfg.Retention; r.ScheduledTime.After(p.now().Add(keep)) {
		return fmt.Errorf("%w: %d bytes of args go to the payloads bucket, which keeps them %s; the run is due later than %s from now",
			ErrArgsTooLarge, len(r.Args), p.cfg.PayloadTTL, keep)
	}
	b, err := payload.Offload(ctx, p.js, p.cfg.PayloadsBucket(), r.ID, "args", r.Args)
	if err != nil {
		return fmt.Errorf("producer: run %s: %w", r.ID, err)
	}
	r.Args = b
	return nil
}

// Get returns the record of run id. A run published without a record (one
// due now with a generated id, or one from another producer) that no worker
// has taken yet is answered from its waiting message, as pending (Revision
// 0). Args and Result hold the payloads themselves, those kept in the
// payloads bucket too (docs/wire-format.md, "Large payloads"). Errors:
// jetflow.ErrNotFound, jetflow.ErrInvalidRunID, jetflow.ErrPayloadMissing
// (with the record, its reference in place of the payload).
func (p *Producer) Get(ctx context.Context, id string) (*jetflow.Run, error) {
	r, err := p.get(ctx, id)
	if err != nil {
		return r, err
	}
	return p.resolve(ctx, r)
}

// resolve is r with the payloads its args' and result's references name
// in their place (payload.Resolve); when one cannot be read, r as it is,
// and the error.
func (p *Producer) resolve(ctx context.Context, r *jetflow.Run) (*jetflow.Run, error) {
	bucket := p.cfg.PayloadsBucket()
	args, err := payload.Resolve(ctx, p.js, bucket, r.Args)
	if err != nil {
		return r, fmt.Errorf("run %s: args: %w", r.ID, err)
	}
	result, err := payload.Resolve(ctx, p.js, bucket, r.Result)
	if err != nil {
		return r, fmt.Errorf("run %s: result: %w", r.ID, err)
	}
	return engine.WithPayloads(r, args, result), nil
}

// get is Get with the payloads' references as stored.
func (p *Producer) get(ctx context.Context, id string) (*jetflow.Run, error) {
	r, err := p.store.Show(ctx, id)
	if !errors.Is(err, jetflow.ErrNotFound) {
		return r, err
	}
	q, ok, qerr := p.store.QueuedRun(ctx, id)
	// The worker may have written the record and taken the message
	// meanwhile: KV again (the record is written before the message goes).
	if r, err2 := p.store.Show(ctx, id); !errors.Is(err2, jetflow.ErrNotFound) {
		return r, err2
	}
	if qerr != nil {
		return nil, qerr
	}
	if !ok {
		return nil, err
	}
	return q, nil
}

// Item is one run of a Batch call.
type Item struct {
	Call jetflow.Call
	// At is when the run starts; zero means now.
	At      time.Time
	Options []Option
}

// Batch schedules up to MaxBatch runs at once, all or none: their records
// are written in one atomic JetStream batch (when every run is one that
// Enqueue publishes without a record, the batch is of their messages). It
// returns the ids in order.
// Limits are checked before anything is written: ErrTooManyRuns,
// ErrArgsTooLarge. An item whose WithID exists already fails the whole call
// with ErrAlreadyExists (the error names the id) and nothing is written.
func (p *Producer) Batch(ctx context.Context, items []Item) (ids []string, err error) {
	if len(items) == 0 {
		return nil, nil
	}
	// One producer span per item (when tracing), each the parent of its run.
	ctxs := make([]context.Context, len(items))
	for i := range ctxs {
		ctxs[i] = ctx
	}
	if telemetry.Tracing() && len(items) <= MaxBatch {
		spans := make([]telemetry.Publish, len(items))
		for i, it := range items {
			ctxs[i], spans[i] = telemetry.StartPublish(ctx, it.Call.Name)
		}
		defer func() {
			for i, sp := range spans {
				id := ""
				if err == nil {
					id = ids[i]
				}
				sp.End(id, p.subject(items[i].Call.Name, id), err)
			}
		}()
	}
	b, err := p.prepareBatch(ctxs, items)
	if err != nil {
		return nil, err
	}
	ids = make([]string, len(b.runs))
	for i, r := range b.runs {
		ids[i] = r.ID
	}
	if b.allDirect {
		// One atomic batch of messages, each the run's pending record.
		msgs := make([]*nats.Msg, len(b.runs))
		for i, r := range b.runs {
			msgs[i] = p.cfg.Message(directEnvelope(r))
		}
		if _, err := jsbatch.Publish(ctx, p.nc, msgs); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBatchFailed, err)
		}
		return ids, nil
	}
	if err := p.writeBatch(ctx, b); err != nil {
		return nil, err
	}
	return ids, nil
}

// batch is a Batch call's runs, checked.
type batch struct {
	runs      []*jetflow.Run
	holds     []bool
	allDirect bool // every run is one Enqueue publishes without a record
}

// dispatchExisting makes sure a run found to exist is dispatched: the call
// that created it may have failed after its record landed and before its
// dispatch (engine.DispatchExisting). In the background, as DispatchLater,
// reading again every half second while the stream does not answer (a
// create refused as there is most often answered in an election); after
// existingFor, the repair sweep stands behind it.
func (p *Producer) dispatchExisting(id string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), existingFor)
		defer cancel()
		for !p.dispatchedExisting(ctx, id) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
}

// existingFor bounds dispatchExisting's reads.
const existingFor = 30 * time.Second

// dispatchedExisting reads run id and dispatches it if it is not queued;
// false when the reads went unanswered, or did not find the record: the
// create that was refused says it exists, so a read that misses it is
// behind (a deposed leader, resumed from a pause, answering before it
// learns of the new term), and is made again.
func (p *Producer) dispatchedExisting(ctx context.Context, id string) bool {
	cur, _, err := p.store.Decide(ctx, id)
	if err != nil {
		return false
	}
	// Its message there already (the common case: the earlier call went
	// through): nothing to do.
	q, err := p.store.Queued(ctx, cur.Name, cur.ID)
	if err != nil {
		return false
	}
	if !q {
		p.d.DispatchExisting(cur)
	}
	return true
}

// prepareBatch builds and checks a Batch call's runs before anything is
// written: ErrTooManyRuns, ErrArgsTooLarge, an id twice (ErrAlreadyExists),
// and each item's own errors, named by its index.
func (p *Producer) prepareBatch(ctxs []context.Context, items []Item) (batch, error) {
	if len(items) > MaxBatch {
		return batch{}, fmt.Errorf("%w: %d > %d", ErrTooManyRuns, len(items), MaxBatch)
	}
	b := batch{runs: make([]*jetflow.Run, len(items)), holds: make([]bool, len(items)), allDirect: true}
	total := 0
	seen := make(map[string]bool, len(items))
	for i, it := range items {
		r, o, err := p.prepare(ctxs[i], it.At, it.Call, it.Options)
		if err != nil {
			return b, fmt.Errorf("item %d: %w", i, err)
		}
		if seen[r.ID] {
			return b, fmt.Errorf("item %d: run %s twice in one batch: %w", i, r.ID, ErrAlreadyExists)
		}
		seen[r.ID] = true
		if err := p.checkSize(len(r.Args)); err != nil {
			return b, fmt.Errorf("item %d: %w", i, err)
		}
		total += len(r.Args)
		b.runs[i], b.holds[i] = r, o.hold
		b.allDirect = b.allDirect && p.direct(r, o)
	}
	if total > MaxBatchArgs {
		return b, fmt.Errorf("%w: %d bytes in one call, limit %d", ErrArgsTooLarge, total, MaxBatchArgs)
	}
	for i, r := range b.runs {
		if err := p.offloadArgs(ctxs[i], r); err != nil {
			return b, fmt.Errorf("item %d: %w", i, err)
		}
	}
	return b, nil
}

// writeBatch writes b's records in one atomic batch, then dispatches the
// runs not held, pipelined. A dispatch that fails is left to the repair
// sweep: the records are durable.
func (p *Producer) writeBatch(ctx context.Context, b batch) error {
	msgs := make([]*nats.Msg, len(b.runs))
	for i, r := range b.runs {
		m, err := p.runs.WriteMsg(engine.Schedule, engine.None, r, 0)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	last, err := jsbatch.Publish(ctx, p.nc, msgs)
	if err != nil {
		return p.batchRefused(ctx, b.runs, err)
	}
	first := last - uint64(len(b.runs)-1)
	futures := make([]jetstream.PubAckFuture, 0, len(b.runs))
	var errs []error
	for i, r := range b.runs {
		r.Revision = first + uint64(i)
		if b.holds[i] {
			continue
		}
		f, err := p.d.DispatchAsync(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs = append(errs, err)
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
		}
	}
	if len(errs) > 0 {
		p.log.WarnContext(ctx, "batch dispatch incomplete; repair sweep will publish", "errors", len(errs), "first", errs[0])
	}
	return nil
}

// batchRefused is the error of a batch of records the stream refused. An
// atomic batch stores all or nothing, so a record found on the runs leader
// is another run's: ErrAlreadyExists. A refusal that the leader does not
// confirm (a deposed leader judging against its own uncommitted write) is
// ErrBatchFailed: nothing was stored, and the caller may try again.
func (p *Producer) batchRefused(ctx context.Context, runs []*jetflow.Run, err error) error {
	if kv.IsWrongSequence(err) {
		for _, r := range runs {
			if _, _, gerr := p.store.Decide(ctx, r.ID); gerr == nil {
				return fmt.Errorf("run %s: %w", r.ID, ErrAlreadyExists)
			}
		}
	}
	return fmt.Errorf("%w: %w", ErrBatchFailed, err)
}
