package retrier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
)

var (
	startFn   = jetflow.Define[spec](StartFunction)
	stepFn    = jetflow.Define[jetflow.Completion](StepFunction)
	startedFn = jetflow.Define[jetflow.Completion](StartedFunction)
)

// internalOptions are the worker options of the internal functions: they
// are short KV operations, retried quickly, with a delay capped at 30 s.
// MaxAttempts is not the worker's limit but the guard's budget: the
// internal runs are retried without limit (see guard), and from attempt
// MaxAttempts on (about 10 minutes) a failed attempt ends the retrier
// failed instead of trying again.
var internalOptions = worker.Options{
	Concurrency: 32,
	MaxAttempts: 25,
	Backoff:     jetflow.Backoff{Initial: 200 * time.Millisecond, Base: 2, Max: 30 * time.Second},
}

// unlimited is the worker's MaxAttempts of the internal functions: the
// worker never fails them for want of attempts; the guard decides. The
// functions registry, the CLI and the dashboard show it as unlimited.
const unlimited = kv.UnlimitedAttempts

// Register registers the retrier's internal functions (StartFunction,
// StepFunction, StartedFunction) on w. Call it before w.Start, on at least
// one worker; the functions schedule through w's producer, so they work for
// every Retrier on the same streams, whatever its options (the policy
// travels with each run). Errors: worker.ErrRegistered when w already
// serves them or has started.
func (r *Retrier) Register(w *worker.Worker) error {
	opts := r.internal
	d := &driver{p: w.Producer(), fault: r.fault, budget: max(opts.MaxAttempts, 1)}
	opts.MaxAttempts = unlimited
	if err := worker.Register(w, startFn, d.start, opts); err != nil {
		return err
	}
	if err := worker.Register(w, stepFn, d.step, opts); err != nil {
		return err
	}
	return worker.Register(w, startedFn, d.started, opts)
}

// driver runs the internal functions on one worker.
type driver struct {
	p     *producer.Producer
	fault faultFunc
	// budget is the attempt of an internal run from which a failure ends
	// the retrier (internalOptions.MaxAttempts).
	budget int
}

// injected is the test's failure of this attempt of internal run id, if
// any.
func (d *driver) injected(ctx context.Context, fn, id string, attempt int, end bool) error {
	if d.fault == nil {
		return nil
	}
	return d.fault(ctx, fn, id, attempt, end)
}

func (d *driver) now() time.Time { return time.Now().UTC() }

// start writes the retrier's record and enqueues attempt 1. Redelivered, it
// finds what it already wrote and goes on from there.
func (d *driver) start(ctx context.Context, j *worker.Job[spec]) error {
	s := j.Args
	if s.Retrier == "" || s.Function == "" {
		return jetflow.Permanent(fmt.Errorf("%w: start run %s without a retrier id or function", jetflow.ErrBadArgs, j.ID()))
	}
	at := internalAttempt{fn: StartFunction, id: j.ID(), attempt: j.Attempt(), retrier: s.Retrier, spec: &s,
		next: AttemptID(s.Retrier, 1)}
	return d.guard(ctx, at, func() error { return d.startWork(ctx, j, s) })
}

// startWork is the work of a start run.
func (d *driver) startWork(ctx context.Context, j *worker.Job[spec], s spec) error {
	raw, err := json.Marshal(s)
	if err != nil {
		return jetflow.Permanent(err)
	}
	first := AttemptID(s.Retrier, 1)
	now := d.now()
	rec := &jetflow.Run{
		ID: s.Retrier, Name: RecordName, Kind: jetflow.Retryable, Args: raw, State: jetflow.InProgress,
		ScheduledTime: j.ScheduledTime().UTC(), CreationTime: j.CreationTime().UTC(), StartedTime: now,
		Parent: j.ID(), Children: []string{first}, OnComplete: s.OnComplete,
	}
	_, err = engine.Of(d.p).Runs().Write(ctx, engine.Open, engine.None, rec, 0)
	switch {
	case errors.Is(err, kv.ErrExists):
		cur, _, gerr := engine.Of(d.p).Store().Decide(ctx, s.Retrier)
		if gerr != nil {
			return gerr
		}
		if cur.Name != RecordName {
			return jetflow.Permanent(fmt.Errorf("%w: run %s is a %s", ErrBadRecord, s.Retrier, cur.Name))
		}
		if cur.State.Terminal() {
			// Canceled before it started: nothing to run.
			return engine.Of(d.p).Complete(ctx, cur)
		}
	case err != nil:
		return err
	}
	if err := d.schedule(ctx, s, 1, time.Time{}); err != nil {
		if unschedulable(err) {
			// Retrying would not help (a start run written by another
			// client): end the record, so that it does not stay in
			// progress and the callback runs.
			return d.finish(ctx, stepContext{Retrier: s.Retrier}, jetflow.Failed, nil,
				fmt.Sprintf("retrier: attempt 1 cannot be scheduled: %v", err))
		}
		return err
	}
	return nil
}

// unschedulable reports whether scheduling an attempt failed for a reason
// that no retry of the step changes: a function name, args or an id that
// are not valid, args too large.
func unschedulable(err error) bool {
	switch {
	case jetflow.IsPermanent(err), errors.Is(err, jetflow.ErrInvalidName), errors.Is(err, jetflow.ErrBadArgs),
		errors.Is(err, jetflow.ErrInvalidRunID), errors.Is(err, producer.ErrArgsTooLarge):
		return true
	}
	return false
}

// schedule enqueues attempt n at t (idempotent), then checks that the
// retrier has not ended meanwhile: a Cancel that raced the enqueue either
// saw the attempt among the record's children or is seen here.
func (d *driver) schedule(ctx context.Context, s spec, n int, t time.Time) error {
	id := AttemptID(s.Retrier, n)
	opts := []producer.Option{
		producer.WithID(id), producer.WithParent(s.Retrier), producer.WithMaxAttempts(1),
		producer.WithOnComplete(jetflow.Call{Name: StepFunction, Kind: jetflow.Retryable,
			Args: stepContext{Retrier: s.Retrier, Attempt: n}}),
	}
	if s.Policy.Timeout > 0 {
		opts = append(opts, producer.WithTimeout(s.Policy.Timeout))
	}
	if _, err := d.p.RunAt(ctx, t, s.target(), opts...); err != nil && !errors.Is(err, producer.ErrAlreadyExists) {
		return err
	}
	// Lookup, not Show: a replica behind that lacks the record would fail
	// the step, and each try again waits longer (the worker's backoff).
	cur, err := engine.Of(d.p).Store().Lookup(ctx, s.Retrier)
	if err != nil {
		return err
	}
	if cur.State.Terminal() {
		if err := d.p.Cancel(ctx, id); err != nil && !errors.Is(err, jetflow.ErrNotFound) {
			return err
		}
	}
	return nil
}

// step runs when attempt n ends: it finishes the retrier or schedules
// attempt n+1.
func (d *driver) step(ctx context.Context, j *worker.Job[jetflow.Completion]) error {
	var sc stepContext
	if err := json.Unmarshal(j.Args.Context, &sc); err != nil || sc.Retrier == "" || sc.Attempt < 1 {
		return jetflow.Permanent(fmt.Errorf("%w: step %s: context %s", jetflow.ErrBadArgs, j.ID(), j.Args.Context))
	}
	att := j.Args.Run
	if att == nil || !att.State.Terminal() {
		return jetflow.Permanent(fmt.Errorf("%w: step %s without a finished attempt", jetflow.ErrBadArgs, j.ID()))
	}
	at := internalAttempt{fn: StepFunction, id: j.ID(), attempt: j.Attempt(), retrier: sc.Retrier,
		attempts: sc.Attempt, next: AttemptID(sc.Retrier, sc.Attempt+1)}
	return d.guard(ctx, at, func() error { return d.stepWork(ctx, sc, att) })
}

// stepWork is the work of the step after attempt sc.Attempt, which ended
// as att.
func (d *driver) stepWork(ctx context.Context, sc stepContext, att *jetflow.Run) error {
	store := engine.Of(d.p).Store()
	cur, err := store.Lookup(ctx, sc.Retrier)
	if err != nil {
		if errors.Is(err, jetflow.ErrNotFound) {
			// The record is gone (retention passed): nothing to drive.
			return jetflow.Permanent(err)
		}
		return err
	}
	if cur.Name != RecordName {
		return jetflow.Permanent(fmt.Errorf("%w: run %s is a %s", ErrBadRecord, sc.Retrier, cur.Name))
	}
	if cur.State.Terminal() {
		return engine.Of(d.p).Complete(ctx, cur)
	}
	var s spec
	if err := json.Unmarshal(cur.Args, &s); err != nil || s.Function == "" {
		// The retrier's own record, its args overwritten by another
		// client: end it as failed naming why (its callback runs), rather
		// than leave it in progress.
		if err == nil {
			err = errors.New("no function")
		}
		return d.finish(ctx, sc, jetflow.Failed, nil, fmt.Sprintf("%v: retrier %s: args: %v", ErrBadRecord, sc.Retrier, err))
	}
	switch {
	case att.State == jetflow.Success:
		if err := d.resultFits(cur, att); err != nil {
			return d.finish(ctx, sc, jetflow.Failed, nil, err.Error())
		}
		return d.finish(ctx, sc, jetflow.Success, att.Result, "")
	case att.State == jetflow.Canceled:
		return d.finish(ctx, sc, jetflow.Canceled, nil, att.Error)
	case sc.Attempt > s.Policy.MaxFailures:
		return d.finish(ctx, sc, jetflow.Failed, nil, att.Error)
	}
	next := sc.Attempt + 1
	nextID := AttemptID(sc.Retrier, next)
	due := d.now().Add(s.Policy.options().Delay(sc.Attempt))
	if err := d.schedule(ctx, s, next, due); err != nil {
		if unschedulable(err) {
			return d.finish(ctx, sc, jetflow.Failed, nil,
				fmt.Sprintf("retrier: attempt %d cannot be scheduled: %v (attempt %d: %s)", next, err, sc.Attempt, att.Error))
		}
		return err
	}
	_, err = engine.New(store).Change(ctx, engine.Beat, sc.Retrier, func(r *jetflow.Run) *jetflow.Run {
		return engine.NextAttempt(r, nextID, sc.Attempt, att.Error)
	})
	if errors.Is(err, kv.ErrTerminal) {
		// Canceled between schedule's check and now: the attempt is not
		// among the children Cancel saw, so cancel it here.
		if err := d.p.Cancel(ctx, nextID); err != nil && !errors.Is(err, jetflow.ErrNotFound) {
			return err
		}
		return nil
	}
	return err
}

// finishStep is the step that ends a retrier's record in each state.
var finishStep = map[jetflow.State]engine.Step{
	jetflow.Success: engine.Succeed, jetflow.Failed: engine.Fail, jetflow.Canceled: engine.Cancel,
}

// finish ends the retrier's record and schedules the user's callback. A
// record that ended meanwhile (canceled) stands; the callback is scheduled
// either way (idempotent: one run id).
func (d *driver) finish(ctx context.Context, sc stepContext, st jetflow.State, result json.RawMessage, msg string) error {
	r, err := engine.Of(d.p).Runs().Change(ctx, finishStep[st], sc.Retrier, func(r *jetflow.Run) *jetflow.Run {
		now := d.now()
		return engine.EndRecord(r, st, result, msg, sc.Attempt, now, now)
	})
	if err != nil && !errors.Is(err, kv.ErrTerminal) {
		return err
	}
	return engine.Of(d.p).Complete(ctx, r)
}

// resultFits reports whether the retrier's record cur, with attempt att's
// result, and the user's callback built on it (the record and the
// callback's context) fit the server's max payload. A result that fits
// the attempt's record may not: the retrier's record also holds the
// callback's context, and the callback's completion holds it twice. Such a
// retrier ends failed, naming the attempt that holds the result, rather
// than as a success whose record or callback could never be written.
func (d *driver) resultFits(cur, att *jetflow.Run) error {
	max := engine.Of(d.p).Conn().MaxPayload()
	if max <= 0 || len(att.Result) == 0 {
		return nil
	}
	raw, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	n := len(raw) + len(att.Result) + 512 // the completion's fields, the record's times
	if cur.OnComplete != nil {
		n += len(cur.OnComplete.Args)
	}
	if int64(n)+4096 > max { // the producer's margin (producer.ErrArgsTooLarge)
		return fmt.Errorf("%w: the result of %d bytes does not fit the retrier's record and callback (server max payload %d); it is on attempt run %s",
			worker.ErrResultTooLarge, len(att.Result), max, att.ID)
	}
	return nil
}
