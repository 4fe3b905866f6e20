package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

// DoneFunction is the pool's internal on-complete function: every attempt
// run of a pool item calls it when it ends, and it settles the item (records
// the outcome or queues the retry), gives the slot back and runs the item's
// own callback. Register serves it on a worker.
const DoneFunction = "jetflow.pool.done"

var doneFn = jetflow.Define[jetflow.Completion](DoneFunction)

// doneContext is the context of an attempt's on-complete call.
type doneContext struct {
	Pool    string `json:"pool"`
	Item    string `json:"item"`
	Attempt int    `json:"attempt"`
}

// core is what settling an item needs: shared by Pool and by the done
// function that Register serves (which has no pool Config).
type core struct {
	p    *producer.Producer
	scfg streams.Config
	st   *store
	log  *slog.Logger
	now  func() time.Time
}

func (c *core) wake(pool string) {
	if err := c.st.nc.Publish(wakeSubject(c.scfg, pool), nil); err != nil {
		// A hint only: the dispatcher's poll finds what the wake told.
		c.log.Debug("wake the pool's dispatcher; its poll will", "pool", pool, "error", err)
	}
}

// Register serves the pool's done function (DoneFunction) on w. Every
// process that runs pool items should call it before w.Start; without it a
// slot is given back only by the dispatcher's periodic check, after
// Config.ReconcileGrace. It returns worker.ErrRegistered if called twice.
func Register(w *worker.Worker) error {
	p := w.Producer()
	l := &lazyCore{p: p}
	return worker.Register(w, doneFn, func(ctx context.Context, j *worker.Job[jetflow.Completion]) error {
		c, err := l.get(ctx)
		if err != nil {
			return err
		}
		var dc doneContext
		if err := json.Unmarshal(j.Args.Context, &dc); err != nil || dc.Pool == "" || dc.Item == "" {
			return jetflow.Permanent(fmt.Errorf("%w: pool completion context %s", jetflow.ErrBadArgs, j.Args.Context))
		}
		if j.Args.Run == nil {
			return jetflow.Permanent(fmt.Errorf("%w: pool completion without a run", jetflow.ErrBadArgs))
		}
		return c.settle(ctx, dc.Pool, dc.Item, dc.Attempt, j.Args.Run)
	}, worker.Options{
		Concurrency: 32,
		MaxAttempts: 30,
		Backoff:     jetflow.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second},
	})
}

// lazyCore opens the pools bucket on first use (Register has no ctx).
type lazyCore struct {
	p  *producer.Producer
	mu sync.Mutex
	c  *core
}

func (l *lazyCore) get(ctx context.Context) (*core, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		return l.c, nil
	}
	scfg := engine.Of(l.p).Streams()
	st, err := openStore(ctx, engine.Of(l.p).JetStream(), scfg)
	if err != nil {
		return nil, err
	}
	l.c = &core{p: l.p, scfg: scfg, st: st, log: slog.New(slog.DiscardHandler), now: time.Now}
	return l.c, nil
}

// permanent reports whether a run's recorded error is one that jetflow
// makes permanent (a timeout, a panic, undecodable args, a bad message):
// such a failure is not retried. The run record does not say whether a
// handler's own error was wrapped with jetflow.Permanent; those are retried
// until MaxAttempts.
func permanent(msg string) bool {
	for _, e := range []error{jetflow.ErrTimeout, jetflow.ErrPanic, jetflow.ErrBadArgs, jetflow.ErrBadMessage} {
		if strings.HasPrefix(msg, e.Error()) {
			return true
		}
	}
	return strings.HasPrefix(msg, "permanent: ")
}

// settle records the end of attempt n of item id, whose run ended as run:
// the item's outcome, or its retry (pending again, with a queue entry ready
// after the backoff). Then it gives the slot back
// and, once the item is finished, runs its callback. It is idempotent:
// whoever calls it (the done function, the reconciler, twice) the item is
// settled once.
func (c *core) settle(ctx context.Context, pool, id string, n int, run *jetflow.Run) error {
	if !run.State.Terminal() {
		return fmt.Errorf("pool: settle %s: run %s is %s", id, run.ID, run.State)
	}
	var it *Item
	for {
		var err error
		it, err = c.st.getItem(ctx, pool, id)
		if errors.Is(err, jetflow.ErrNotFound) {
			return nil // expired
		}
		if err != nil {
			return err
		}
		if it.State != jetflow.InProgress || it.Attempts != n {
			break // settled before, canceled, or another attempt's business
		}
		next := *it
		next.Error = run.Error
		switch run.State {
		case jetflow.Success:
			next.State, next.Result, next.Error = jetflow.Success, run.Result, ""
		case jetflow.Canceled:
			next.State = jetflow.Canceled
			if next.Error == "" {
				next.Error = jetflow.ErrCanceled.Error()
			}
		default:
			next.State = jetflow.Failed
			if n < it.MaxAttempts && !permanent(run.Error) {
				next.State = jetflow.Pending
				next.NotBefore = c.now().Add(it.Backoff.Delay(n)).UTC()
			}
		}
		if next.State.Terminal() {
			next.Completed = run.CompletedTime
			if next.Completed.IsZero() {
				next.Completed = c.now().UTC()
			}
		}
		err = c.st.writeItem(ctx, &next, it.Revision)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return err
		}
		it = &next
		break
	}
	if it.State == jetflow.Pending && it.Attempts == n {
		// The retry's queue entry, written after the record so that the
		// dispatcher never finds it before the item is pending again. Its
		// arrival is what gives attempt n's slot back, so the slot is held
		// until it is written; the reconciler writes it if this process
		// dies in between.
		return c.requeue(ctx, it)
	}
	return c.ensureCallback(ctx, it)
}

// requeue writes the queue entry of a pending item's next attempt.
func (c *core) requeue(ctx context.Context, it *Item) error {
	ready := it.NotBefore
	if ready.IsZero() {
		ready = c.now()
	}
	_, err := c.st.putQueued(ctx, it.Pool, it.ID, queued{Priority: it.Priority, Ready: ready.UnixNano(), Attempt: it.Attempts + 1, Key: it.Key})
	return err
}

// ensureCallback runs a finished item's on-complete callback: exactly once,
// since its run id is CallbackID(pool, id).
func (c *core) ensureCallback(ctx context.Context, it *Item) error {
	if it.OnComplete == nil || !it.State.Terminal() {
		return nil
	}
	args, err := json.Marshal(jetflow.Completion{Run: it.asRun(), Context: it.OnComplete.Args})
	if err != nil {
		return fmt.Errorf("%w: completion of %s: %v", jetflow.ErrBadArgs, it.ID, err)
	}
	_, err = c.p.Enqueue(ctx, jetflow.RawCall(it.OnComplete.Function, args), producer.WithID(CallbackID(it.Pool, it.ID)))
	if errors.Is(err, producer.ErrAlreadyExists) {
		return nil
	}
	return err
}

// asRun describes the item as a run record, for its callback.
func (it *Item) asRun() *jetflow.Run {
	return &jetflow.Run{
		ID: it.ID, Name: it.Function, Kind: it.Kind, Args: it.Args, State: it.State,
		ScheduledTime: it.Enqueued, CreationTime: it.Enqueued, StartedTime: it.Started,
		CompletedTime: it.Completed, Attempts: it.Attempts, MaxAttempts: it.MaxAttempts,
		Timeout: it.Timeout, Error: it.Error, Result: it.Result, Pool: it.Pool, Priority: int(it.Priority),
	}
}

// startRun creates the run of the item's current attempt (idempotent: the
// run id is RunID(pool, id, attempt)) and publishes its message. The run has
// one attempt; its on-complete is the done function.
//
// The message carries no record revision, so the worker reads the stored
// record before it runs the attempt: the record holds the on-complete call
// and the pool fields, which the worker's fast path for messages with a
// revision does not carry into the outcome it writes.
func (c *core) startRun(ctx context.Context, it *Item) error {
	cargs, err := json.Marshal(doneContext{Pool: it.Pool, Item: it.ID, Attempt: it.Attempts})
	if err != nil {
		return err
	}
	now := c.now().UTC()
	r := &jetflow.Run{
		ID: it.RunID, Name: it.Function, Kind: it.Kind, Args: it.Args, State: jetflow.Pending,
		ScheduledTime: now, CreationTime: now, MaxAttempts: 1, Timeout: it.Timeout,
		OnComplete: &jetflow.Callback{Function: DoneFunction, Args: cargs},
		Pool:       it.Pool, Priority: int(it.Priority), Trace: it.Trace,
	}
	if _, err := engine.Of(c.p).Runs().Write(ctx, engine.Schedule, engine.None, r, 0); err != nil {
		if !errors.Is(err, kv.ErrExists) {
			return err
		}
		if r, _, err = engine.Of(c.p).Store().Decide(ctx, it.RunID); err != nil {
			return err
		}
		if r.State != jetflow.Pending {
			return nil
		}
	}
	env := engine.Envelope(r)
	env.Rev = 0
	if _, err := engine.Of(c.p).JetStream().PublishMsg(ctx, c.scfg.Message(env)); err != nil {
		return fmt.Errorf("pool: publish run %s: %w", r.ID, err)
	}
	return nil
}
