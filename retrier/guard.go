package retrier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
)

// A retrier is never left in progress for good by its own machinery. The
// internal runs (start, step) are retried by the worker without limit,
// with a delay capped at 30 s, so that an outage of any length is ridden
// out: the retrier goes on once NATS takes writes again. Their work runs
// under guard, which decides what a failed attempt means:
//
//   - a failure that is not permanent, before the budget (attempt
//     internalOptions.MaxAttempts, about 10 minutes): try again;
//   - a permanent failure or a panic (a retry would fail the same way), or
//     any failure from the budget on: end the retrier failed, naming the
//     internal run and its error, and run the retrier's callback. If that
//     write fails too (NATS still refuses writes), the attempt is tried
//     again, work first.
//
// A start run canceled directly (the producer's or the CLI's cancel of
// <id>-start), or ended failed by the worker whatever the reason, runs
// StartedFunction (its on-complete callback), which ends the retrier
// canceled or failed the same way.

// internalAttempt is one attempt of an internal run, as guard sees it.
type internalAttempt struct {
	fn, id  string // the internal function and run
	attempt int    // from 1
	retrier string
	// spec is the retrier's, when the record may not be written yet (the
	// start run): ending it then writes the record.
	spec *spec
	// attempts is the number of the retrier's attempts that have ended.
	attempts int
	// next is the retrier's attempt that this run may have scheduled: it
	// is canceled when the retrier ends here.
	next string
}

// verdict of a failed attempt of an internal run.
type verdict uint8

const (
	tryAgain   verdict = iota // return the error: the worker retries the run
	endRetrier                // end the retrier failed, naming the run and the error
)

// judge decides what the failure err of attempt attempt of an internal run
// whose budget is budget means. It has no side effects.
func judge(err error, attempt, budget int) verdict {
	if jetflow.IsPermanent(err) || errors.Is(err, jetflow.ErrPanic) || attempt >= budget {
		return endRetrier
	}
	return tryAgain
}

// maxReason bounds the reason a retrier ended here keeps (a panic's stack
// may be long; the record must fit the server's max payload).
const maxReason = 4096

// guard runs work, attempt at of an internal run, and applies judge's
// verdict when it fails.
func (d *driver) guard(ctx context.Context, at internalAttempt, work func() error) error {
	err := d.try(ctx, at, work)
	if err == nil || judge(err, at.attempt, d.budget) == tryAgain {
		return err
	}
	reason := fmt.Sprintf("retrier: internal run %s (%s) failed on attempt %d, not retried: %v", at.id, at.fn, at.attempt, err)
	if !jetflow.IsPermanent(err) && !errors.Is(err, jetflow.ErrPanic) {
		reason = fmt.Sprintf("retrier: internal run %s (%s) failed %d attempts: %v", at.id, at.fn, at.attempt, err)
	}
	if len(reason) > maxReason {
		reason = strings.ToValidUTF8(reason[:maxReason], "") + "…"
	}
	if ferr := d.injected(ctx, at.fn, at.id, at.attempt, true); ferr != nil {
		// Not permanent: the worker tries the attempt again.
		return fmt.Errorf("%v; ending the retrier failed too: %w", err, ferr)
	}
	ended, eerr := d.end(ctx, at.retrier, at.spec, jetflow.Failed, reason, at.attempts, at.next)
	switch {
	case eerr != nil && unfixable(eerr):
		// No retry would end it either: this run fails, naming both.
		return jetflow.Permanent(fmt.Errorf("%v; ending the retrier failed too: %w", err, eerr))
	case eerr != nil:
		return fmt.Errorf("%v; ending the retrier failed too: %w", err, eerr)
	case !ended:
		// Nothing to end (no retrier record, or another function's run
		// under its id): this run fails, and that is all.
		return jetflow.Permanent(err)
	}
	return jetflow.Permanent(fmt.Errorf("%w (retrier %s ended failed)", err, at.retrier))
}

// unfixable reports an error no retry of an internal run gets past: a
// record that is not a retrier's, or a write the server can never take.
// Other failures (an outage, a permission an operator may grant) are
// retried.
func unfixable(err error) bool {
	switch {
	case errors.Is(err, ErrBadRecord), errors.Is(err, jetflow.ErrBadRecord),
		errors.Is(err, jetflow.ErrBadArgs), errors.Is(err, producer.ErrArgsTooLarge):
		return true
	}
	return false
}

// try runs work after the test's fault, if any, turning a panic into a
// permanent error with its stack (as the worker would).
func (d *driver) try(ctx context.Context, at internalAttempt, work func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = jetflow.Permanent(fmt.Errorf("%w: %v\n%s", jetflow.ErrPanic, p, debug.Stack()))
		}
	}()
	if err := d.injected(ctx, at.fn, at.id, at.attempt, false); err != nil {
		return err
	}
	return work()
}

// end ends retrier id in state st (failed or canceled) with msg, and
// schedules its callback. The record is written if the start run never
// wrote it (s is then the retrier's spec; nil when the record must
// exist). A record that has ended stands (the callback is scheduled all
// the same: one run id). The retrier's current attempt and those among
// cancel, which may still run, are canceled. ended is false when there is
// nothing to end: no record and no s, or another function's run under id.
func (d *driver) end(ctx context.Context, id string, s *spec, st jetflow.State, msg string, attempts int, cancel ...string) (ended bool, err error) {
	step := finishStep[st]
	var r *jetflow.Run
	for range 2 {
		r, err = engine.Of(d.p).Runs().Change(ctx, step, id, func(r *jetflow.Run) *jetflow.Run {
			if r.Name != RecordName {
				return nil
			}
			now := time.Now()
			return engine.EndRecord(r, st, nil, msg, attempts, now, now)
		})
		if !errors.Is(err, jetflow.ErrNotFound) || s == nil {
			break
		}
		// Not written yet: write it ended, create-only.
		r = endedRecord(*s, st, msg, time.Now().UTC())
		_, err = engine.Of(d.p).Runs().Write(ctx, step, engine.None, r, 0)
		if !errors.Is(err, kv.ErrExists) {
			break
		}
		// The start run wrote it meanwhile: end that one.
	}
	switch {
	case errors.Is(err, jetflow.ErrNotFound):
		return false, nil
	case err != nil && !errors.Is(err, kv.ErrTerminal):
		return false, err
	case r == nil || r.Name != RecordName:
		return false, nil
	}
	if n := len(r.Children); n > 0 {
		cancel = append(cancel, r.Children[n-1])
	}
	for _, a := range cancel {
		if err := d.p.Cancel(ctx, a); err != nil && !errors.Is(err, jetflow.ErrNotFound) {
			return false, err
		}
	}
	return true, engine.Of(d.p).Complete(ctx, r)
}

// endedRecord is the record of retrier s that ended in state st before its
// start run wrote it.
func endedRecord(s spec, st jetflow.State, msg string, now time.Time) *jetflow.Run {
	raw, _ := json.Marshal(s) // a spec always encodes: it was decoded
	return &jetflow.Run{
		ID: s.Retrier, Name: RecordName, Kind: jetflow.Retryable, Args: raw, State: st,
		ScheduledTime: now, CreationTime: now, CompletedTime: now, Parent: StartID(s.Retrier), Error: msg, OnComplete: s.OnComplete,
	}
}

// started runs when a start run ends (StartedFunction, its on-complete
// callback). A start run that succeeded wrote the retrier's record: nothing
// to do. One canceled (directly: the retrier's own Cancel writes the
// record first) ends the retrier canceled, as Cancel does; one that failed
// (for a reason guard did not see: a lost worker, a message the worker
// could not use) ends it failed, naming the start run's error. Either way
// the retrier's callback runs.
func (d *driver) started(ctx context.Context, j *worker.Job[jetflow.Completion]) error {
	start := j.Args.Run
	if start == nil || !start.State.Terminal() {
		return jetflow.Permanent(fmt.Errorf("%w: %s without a finished start run", jetflow.ErrBadArgs, j.ID()))
	}
	if start.State == jetflow.Success {
		return nil
	}
	s, err := startSpec(start)
	if err != nil {
		return jetflow.Permanent(err)
	}
	if start.State == jetflow.Canceled {
		err = cancelRetrier(ctx, d.p, s, start)
	} else {
		_, err = d.end(ctx, s.Retrier, &s, jetflow.Failed,
			fmt.Sprintf("retrier: start run %s failed: %s", start.ID, start.Error), 0, AttemptID(s.Retrier, 1))
	}
	if err != nil && (unfixable(err) || j.Attempt() >= d.budget) {
		// As guard's budget: retried without limit by the worker, this
		// run gives up here.
		return jetflow.Permanent(err)
	}
	return err
}

// cancelRetrier ends retrier s canceled, whose start run is start: a record
// not written yet is written canceled (so that the start run, if it runs,
// finds it and runs nothing) and the start run canceled; a record in
// progress is canceled with the producer's Cancel, which cancels its
// attempts too. The callback runs once either way. Errors: ErrBadRecord
// when the id holds another function's run.
func cancelRetrier(ctx context.Context, p *producer.Producer, s spec, start *jetflow.Run) error {
	store := engine.Of(p).Store()
	rec, _, err := store.Decide(ctx, s.Retrier)
	if errors.Is(err, jetflow.ErrNotFound) {
		rec = endedRecord(s, jetflow.Canceled, jetflow.ErrCanceled.Error(), time.Now().UTC())
		rec.ScheduledTime, rec.CreationTime, rec.Parent = start.ScheduledTime, start.CreationTime, start.ID
		_, err = engine.New(store).Write(ctx, engine.Cancel, engine.None, rec, 0)
		if err == nil {
			if err := p.Cancel(ctx, start.ID); err != nil {
				return err
			}
			return engine.Of(p).Complete(ctx, rec)
		}
		if !errors.Is(err, kv.ErrExists) {
			return err
		}
		// The start run wrote the record meanwhile: cancel that.
		rec, _, err = store.Decide(ctx, s.Retrier)
	}
	if err != nil {
		return err
	}
	if rec.Name != RecordName {
		return fmt.Errorf("%w: run %s is a %s", ErrBadRecord, s.Retrier, rec.Name)
	}
	if rec.State.Terminal() {
		return engine.Of(p).Complete(ctx, rec)
	}
	return p.Cancel(ctx, s.Retrier)
}
