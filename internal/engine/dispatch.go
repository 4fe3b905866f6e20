package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Dispatcher makes pending runs startable and schedules on-complete
// callbacks: the plumbing a producer shares with the packages built on it
// (worker, scheduler, retrier, pool, dashboard, the CLI), which the
// producer does not export. A producer builds one over its connection, its
// stores and its way of riding out a cluster's elections; the others reach
// it with Of.
type Dispatcher struct {
	js      jetstream.JetStream
	cfg     streams.Config
	store   *kv.Store
	runs    *Runs
	now     func() time.Time
	ride    RideFunc
	enqueue EnqueueFunc
	create  func(ctx context.Context, r *jetflow.Run) (uint64, error)
	direct  func(ctx context.Context, r *jetflow.Run) error
	get     func(ctx context.Context, id string) (*jetflow.Run, error)
	log     *slog.Logger
	values  sync.Map // Value's
}

// RideFunc runs op until it succeeds, fails for good or ctx ends, trying it
// again after the errors a cluster election or a reconnect causes; retried
// tells op that an earlier attempt may have landed.
type RideFunc func(ctx context.Context, op func(ctx context.Context, retried bool) error) error

// EnqueueFunc schedules call c to start now as run id, with parent as its
// parent, as the producer's Enqueue does; a run id that exists already is
// not an error.
type EnqueueFunc func(ctx context.Context, c jetflow.Call, id, parent string) error

// DispatcherConfig is what a producer gives its Dispatcher.
type DispatcherConfig struct {
	JS      jetstream.JetStream
	Streams streams.Config // defaults applied
	Store   *kv.Store
	Now     func() time.Time
	Ride    RideFunc
	Enqueue EnqueueFunc
	// Create writes a new pending record, create-only (kv.ErrExists when
	// the id is taken), riding out elections.
	Create func(ctx context.Context, r *jetflow.Run) (uint64, error)
	// Direct publishes a new run due now without a record (its message is
	// its pending record), riding out elections.
	Direct func(ctx context.Context, r *jetflow.Run) error
	// Get reads a run as the producer's Get does, its large payloads left
	// as their references (docs/wire-format.md, "Large payloads").
	Get func(ctx context.Context, id string) (*jetflow.Run, error)
	// Log is where a background dispatch that gave up says why (nil:
	// slog.Default()).
	Log *slog.Logger
}

// NewDispatcher returns the Dispatcher of a producer.
func NewDispatcher(c DispatcherConfig) *Dispatcher {
	log := c.Log
	if log == nil {
		log = slog.Default()
	}
	return &Dispatcher{js: c.JS, cfg: c.Streams, store: c.Store, runs: New(c.Store), now: c.Now, ride: c.Ride, enqueue: c.Enqueue, create: c.Create, direct: c.Direct, get: c.Get, log: log}
}

var (
	producerOf func(p any) *Dispatcher
	holdOption any
)

// RegisterProducer is called once, by package producer (its init): of
// returns the Dispatcher of a *producer.Producer, and hold is the
// producer.Option that writes a run's record held for its parent (see
// HoldOption). A package under internal/ imports no role, hence any.
func RegisterProducer(of func(p any) *Dispatcher, hold any) { producerOf, holdOption = of, hold }

// Of returns the Dispatcher of p, a *producer.Producer.
func Of(p any) *Dispatcher { return producerOf(p) }

// HoldOption is the producer.Option that writes a run's record without
// dispatching it: it waits, held, for its parent (producer.WithParent) to
// succeed, which releases it (Release), or to fail, which cancels it (step
// Orphan). The worker schedules the children of a retryable attempt with
// it.
func HoldOption() any { return holdOption }

// Value returns the value kept under key for this producer, made by mk on
// first use: what a package built on the producer keeps per producer (its
// handles and caches) without a registry of its own.
func (d *Dispatcher) Value(key any, mk func() any) any {
	if v, ok := d.values.Load(key); ok {
		return v
	}
	v, _ := d.values.LoadOrStore(key, mk())
	return v
}

// Get reads run id as the producer's Get does (its record, or its waiting
// message), with the references of its large payloads as stored: for
// code that reads a run's state, not its args or result.
func (d *Dispatcher) Get(ctx context.Context, id string) (*jetflow.Run, error) { return d.get(ctx, id) }

// Store is the runs store the dispatcher reads.
func (d *Dispatcher) Store() *kv.Store { return d.store }

// Conn is the producer's connection.
func (d *Dispatcher) Conn() *nats.Conn { return d.js.Conn() }

// Runs is the engine over the runs store: every record write.
func (d *Dispatcher) Runs() *Runs { return d.runs }

// Streams is the naming configuration, defaults applied.
func (d *Dispatcher) Streams() streams.Config { return d.cfg }

// Now is the producer's clock (producer.Config.Now).
func (d *Dispatcher) Now() time.Time { return d.now() }

// JetStream is the JetStream context the dispatcher publishes through.
func (d *Dispatcher) JetStream() jetstream.JetStream { return d.js }

// Envelope returns the envelope that starts run r.
func Envelope(r *jetflow.Run) streams.Envelope {
	return streams.Envelope{
		Function: r.Name, ID: r.ID, Rev: r.Revision, Attempt: r.Attempts + 1,
		MaxAttempts: r.MaxAttempts, Parent: r.Parent, Scheduled: r.ScheduledTime,
		Created: r.CreationTime, Args: r.Args, Timeout: r.Timeout, Trace: r.Trace,
		Reload: hasMoreThanMessage(r),
	}
}

// Dispatch makes pending run r startable: it publishes the run's message
// when it is due, or stores its delayed entry for the scheduler. Both
// writes are idempotent (the same delayed entry; a message whose
// Nats-Msg-Id is the run's), so they are tried again through an election.
func (d *Dispatcher) Dispatch(ctx context.Context, r *jetflow.Run) error {
	return d.DispatchAt(ctx, r, d.now())
}

// DispatchAt is Dispatch with now as the present: a worker passes the
// server's time as it estimates it, so that a retry due in the server's
// time is not published early by a clock that runs ahead.
func (d *Dispatcher) DispatchAt(ctx context.Context, r *jetflow.Run, now time.Time) error {
	e := Envelope(r)
	if r.ScheduledTime.After(now) {
		return d.ride(ctx, func(ctx context.Context, _ bool) error {
			_, err := d.store.PutDelayed(ctx, kv.Delayed{Envelope: e, Due: r.ScheduledTime})
			return err
		})
	}
	err := d.ride(ctx, func(ctx context.Context, _ bool) error {
		_, err := d.js.PublishMsg(ctx, d.cfg.Message(e))
		return err
	})
	if err != nil {
		return fmt.Errorf("producer: publish run %s: %w", r.ID, err)
	}
	return nil
}

// redispatchFor bounds DispatchLater's tries.
const redispatchFor = 30 * time.Second

// DispatchLater tries Dispatch again in the background, for up to
// redispatchFor, after a caller's own try failed (its ctx ended in an
// election or a partition): the run starts when the stream answers again,
// not at the repair sweep's next pass. A second publish is harmless: its
// Nats-Msg-Id dedups it, and a delayed entry is one key. now is the
// present for the due check (Dispatch's, or the server's time).
func (d *Dispatcher) DispatchLater(r *jetflow.Run, now func() time.Time) {
	c := *r
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), redispatchFor)
		defer cancel()
		if err := d.DispatchAt(ctx, &c, now()); err != nil {
			d.log.Warn("background dispatch gave up; the scheduler's repair sweep dispatches the run",
				"run_id", c.ID, "function", c.Name, "due", c.ScheduledTime, "error", err)
		}
	}()
}

// DispatchExisting makes sure the run a create found already there (cur,
// read from the leader) is on its way, in the background, as DispatchLater:
// the call that created it may have failed before it dispatched (its
// create's answer lost), and a caller told ErrAlreadyExists takes the run
// for accepted. Only where a second publish is harmless (MayRedispatch).
func (d *Dispatcher) DispatchExisting(cur *jetflow.Run) {
	if MayRedispatch(cur, d.now(), d.cfg.WithDefaults().DuplicateWindow) {
		d.DispatchLater(cur, d.now)
	}
}

// MayRedispatch reports whether run cur may be published again by someone
// who cannot tell whether it was: pending, never attempted, not held, and
// created less than half of the function stream's duplicate window ago
// (window), so that a message published for it then, and any redispatch
// since, is still within the window and this one is dropped as a
// duplicate (its Nats-Msg-Id is the same).
func MayRedispatch(cur *jetflow.Run, now time.Time, window time.Duration) bool {
	switch {
	case cur.State != jetflow.Pending, cur.Attempts > 0, cur.HeldBy != "":
		return false
	}
	return now.Sub(cur.CreationTime) < window/2
}

// Create writes run r's record, pending, create-only: kv.ErrExists when
// its id is taken. A try whose answer was lost in an election is checked
// (the stored record is r's) before it is made again.
func (d *Dispatcher) Create(ctx context.Context, r *jetflow.Run) (uint64, error) {
	return d.create(ctx, r)
}

// PublishNew publishes run r, due now, without a record: its message is
// its pending record (Jetflow-New) and the worker's claim or outcome
// creates the stored one. Its first try is coalesced with the producer's
// concurrent enqueues; a later try first looks whether an earlier one
// landed. The caller makes sure the run is published once (a record it
// created first is the idempotency key).
func (d *Dispatcher) PublishNew(ctx context.Context, r *jetflow.Run) error { return d.direct(ctx, r) }

// DelayNew stores run r's delayed entry without a record: the scheduler
// publishes it when due as a new run (Jetflow-New, expecting no message on
// its subject, so that it is never queued twice), and the worker's outcome
// creates its record. One write less than a delayed run, for internal runs
// whose handler checks what it acts on before it acts: a Cancel does not
// find such a run (it has neither a record nor a message yet), though a
// record written under its id before it is due wins (the scheduler then
// drops the entry). A workflow's delayed first segment (which reads the
// workflow's record) and its journal's janitor use it.
func (d *Dispatcher) DelayNew(ctx context.Context, r *jetflow.Run) error {
	if !r.ScheduledTime.After(d.now()) {
		return errors.New("engine: DelayNew of a run due now")
	}
	e := Envelope(r)
	e.New, e.Rev = true, 0
	return d.ride(ctx, func(ctx context.Context, _ bool) error {
		_, err := d.store.PutDelayed(ctx, kv.Delayed{Envelope: e, Due: r.ScheduledTime})
		return err
	})
}

// DispatchAsync is Dispatch without waiting for the server's ack (and
// without retries): the producer's Batch pipelines its dispatches.
func (d *Dispatcher) DispatchAsync(r *jetflow.Run) (jetstream.PubAckFuture, error) {
	e := Envelope(r)
	if r.ScheduledTime.After(d.now()) {
		m, err := d.store.DelayedMsg(kv.Delayed{Envelope: e, Due: r.ScheduledTime})
		if err != nil {
			return nil, err
		}
		return d.js.PublishMsgAsync(m)
	}
	return d.js.PublishMsgAsync(d.cfg.Message(e))
}

// Release commits a run held by its parent (HoldOption): it clears the hold
// (step Release) and dispatches the run.
func (d *Dispatcher) Release(ctx context.Context, r *jetflow.Run) error {
	if r.HeldBy != "" {
		next := ReleaseRun(r)
		if _, err := d.runs.Write(ctx, Release, r.State, next, r.Revision); err != nil {
			return err
		}
		*r = *next // the caller's record is the one released, at its new revision
	}
	return d.Dispatch(ctx, r)
}

// Complete schedules the on-complete run of r, if r has one and has ended:
// a run of the callback's function, id CompletionID(r.ID), whose args are a
// jetflow.Completion (the finished record and the callback's own args). It
// is idempotent: the id is derived, so a second call finds the run.
func (d *Dispatcher) Complete(ctx context.Context, r *jetflow.Run) error {
	if r == nil || r.OnComplete == nil || !r.State.Terminal() {
		return nil
	}
	rec := *r
	rec.OnComplete = nil
	args, err := json.Marshal(jetflow.Completion{Run: &rec, Context: r.OnComplete.Args})
	if err != nil {
		return fmt.Errorf("%w: completion of %s: %v", jetflow.ErrBadArgs, r.ID, err)
	}
	return d.enqueue(ctx, jetflow.RawCall(r.OnComplete.Function, args), CompletionID(r.ID), r.ID)
}

// hasMoreThanMessage reports whether run r's record has fields its message
// does not carry (an on-complete callback, a pool, children, a history): a
// worker must read the record (Envelope.Reload).
func hasMoreThanMessage(r *jetflow.Run) bool {
	if r.OnComplete != nil || r.Pool != "" {
		return true
	}
	return len(r.Children) > 0 || len(r.History) > 0
}
