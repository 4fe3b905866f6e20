package retrier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
)

// Status is where a retrier run stands.
type Status struct {
	// ID is the retrier id.
	ID string `json:"id"`
	// Function is the name of the function being retried.
	Function string `json:"fn"`
	// State is pending (no attempt has started yet), inProgress (an attempt
	// runs, or the next one waits for its backoff), success, failed or
	// canceled.
	State jetflow.State `json:"state"`
	// Attempts is the number of attempts started so far.
	Attempts int `json:"attempts"`
	// Result is the successful attempt's result (see jetflow's SetResult).
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the last attempt's error: the final one when failed, the
	// latest failure while retrying.
	Error string `json:"error,omitempty"`
	// NextAttempt is when the next attempt is due, while one waits.
	NextAttempt time.Time `json:"nextAttempt,omitzero"`
	// CompletedTime is when the retrier ended.
	CompletedTime time.Time `json:"completedTime,omitzero"`
}

// Decode decodes the result into v.
func (s Status) Decode(v any) error {
	if len(s.Result) == 0 {
		return fmt.Errorf("%w: retrier %s has no result", jetflow.ErrBadArgs, s.ID)
	}
	return json.Unmarshal(s.Result, v)
}

// FromCompletion is the Status carried by the jetflow.Completion an
// on-complete callback receives: the retrier's final state, attempts,
// result or error. Errors: ErrBadRecord when c is not a retrier's.
func FromCompletion(c jetflow.Completion) (Status, error) {
	if c.Run == nil {
		return Status{}, fmt.Errorf("%w: completion without a run", ErrBadRecord)
	}
	return recordStatus(c.Run)
}

func recordStatus(r *jetflow.Run) (Status, error) {
	if r.Name != RecordName {
		return Status{}, fmt.Errorf("%w: run %s is a %s", ErrBadRecord, r.ID, r.Name)
	}
	var s spec
	if err := json.Unmarshal(r.Args, &s); err != nil && !r.State.Terminal() {
		return Status{}, fmt.Errorf("%w: %s: %v", ErrBadRecord, r.ID, err)
	}
	// An ended record whose args were damaged (the step ended it failed,
	// naming why) still says how it ended; only its Function is unknown.
	return Status{
		ID: r.ID, Function: s.Function, State: r.State, Attempts: r.Attempts,
		Result: r.Result, Error: r.Error, CompletedTime: r.CompletedTime,
	}, nil
}

// Status returns where retrier id stands. Errors: jetflow.ErrNotFound,
// jetflow.ErrInvalidRunID, ErrBadRecord.
func (r *Retrier) Status(ctx context.Context, id string) (Status, error) {
	rec, err := r.get(ctx, id)
	if errors.Is(err, jetflow.ErrNotFound) {
		return r.startStatus(ctx, id)
	}
	if err != nil {
		return Status{}, err
	}
	st, err := recordStatus(rec)
	if err != nil || st.State.Terminal() {
		return st, err
	}
	// In progress: the last child is the current attempt.
	n := len(rec.Children)
	if n == 0 {
		return st, nil
	}
	att, err := r.get(ctx, rec.Children[n-1])
	switch {
	case errors.Is(err, jetflow.ErrNotFound):
		// Being enqueued right now.
		st.Attempts = n - 1
		if n == 1 {
			st.State = jetflow.Pending
		}
	case err != nil:
		return Status{}, err
	case att.State == jetflow.Pending:
		st.Attempts = n - 1
		if n == 1 {
			st.State = jetflow.Pending
		} else {
			st.NextAttempt = att.ScheduledTime
		}
	default:
		st.Attempts = n
	}
	return st, nil
}

// startStatus is the status of a retrier whose record is not written yet:
// its start run says whether it waits, or why it could not start.
func (r *Retrier) startStatus(ctx context.Context, id string) (Status, error) {
	start, err := r.get(ctx, StartID(id))
	if err != nil {
		if errors.Is(err, jetflow.ErrNotFound) {
			return Status{}, fmt.Errorf("retrier %s: %w", id, jetflow.ErrNotFound)
		}
		return Status{}, err
	}
	s, err := startSpec(start)
	if err != nil {
		return Status{}, err
	}
	st := Status{ID: id, Function: s.Function, State: jetflow.Pending}
	switch start.State {
	case jetflow.Failed, jetflow.Canceled:
		st.State, st.Error, st.CompletedTime = start.State, start.Error, start.CompletedTime
	case jetflow.Success:
		// The record was written and has since expired.
		return Status{}, fmt.Errorf("retrier %s: record expired: %w", id, jetflow.ErrNotFound)
	}
	return st, nil
}

// Wait blocks until retrier id has ended and returns its status. Errors:
// jetflow.ErrNotFound (no such retrier), jetflow.ErrInvalidRunID,
// ErrBadRecord (id is another function's run), ctx's; a retrier whose start
// run failed (it never had a record) returns that failure at once.
func (r *Retrier) Wait(ctx context.Context, id string) (Status, error) {
	if err := jetflow.ValidateRunID(id); err != nil {
		return Status{}, err
	}
	if st, done, err := r.waitable(ctx, id); done || err != nil {
		return st, err
	}
	rec, err := r.p.Wait(ctx, id)
	if err != nil {
		return Status{}, err
	}
	return recordStatus(rec)
}

// get is the producer's Get, with an absence decided by the leader
// (kv.Store.Decide).
func (r *Retrier) get(ctx context.Context, id string) (*jetflow.Run, error) {
	rec, err := r.p.Get(ctx, id)
	if errors.Is(err, jetflow.ErrNotFound) {
		rec, _, err = engine.Of(r.p).Store().Decide(ctx, id)
	}
	return rec, err
}

// waitable says whether Wait must watch retrier id's record, or can answer
// at once (done): the record has ended or is another function's run, or
// there is no such retrier, or its start run ended without writing one.
func (r *Retrier) waitable(ctx context.Context, id string) (Status, bool, error) {
	get := func(id string) (*jetflow.Run, error) { return r.get(ctx, id) }
	rec, err := get(id)
	if err == nil {
		if rec.Name != RecordName || rec.State.Terminal() {
			st, err := recordStatus(rec)
			return st, true, err
		}
		return Status{}, false, nil
	}
	if !errors.Is(err, jetflow.ErrNotFound) {
		return Status{}, true, err
	}
	start, err := get(StartID(id))
	if errors.Is(err, jetflow.ErrNotFound) {
		return Status{}, true, fmt.Errorf("retrier %s: %w", id, jetflow.ErrNotFound)
	}
	if err != nil {
		return Status{}, true, err
	}
	s, err := startSpec(start)
	if err != nil {
		return Status{}, true, err
	}
	if !start.State.Terminal() {
		return Status{}, false, nil // the record is coming
	}
	// The record may have been written since the first read (by the start
	// run before it ended, or by a Cancel).
	if rec, err := get(id); err == nil {
		st, err := recordStatus(rec)
		return st, rec.State.Terminal() || err != nil, err
	}
	if start.State == jetflow.Success {
		return Status{}, true, fmt.Errorf("retrier %s: record expired: %w", id, jetflow.ErrNotFound)
	}
	return Status{ID: id, Function: s.Function, State: start.State, Error: start.Error, CompletedTime: start.CompletedTime}, true, nil
}

// Cancel ends retrier id as canceled: a pending attempt never starts, a
// running one has its context canceled with cause jetflow.ErrCanceled (best
// effort: its result is discarded), no further attempt is made, and the
// on-complete callback runs once with canceled. Canceling a retrier that
// has already ended is a no-op. Errors: jetflow.ErrNotFound,
// jetflow.ErrInvalidRunID, ErrBadRecord.
func (r *Retrier) Cancel(ctx context.Context, id string) error {
	if err := jetflow.ValidateRunID(id); err != nil {
		return err
	}
	store := engine.Of(r.p).Store()
	rec, _, err := store.Decide(ctx, id)
	if errors.Is(err, jetflow.ErrNotFound) {
		// Not started: cancelRetrier writes the record as canceled, so the
		// start run finds it and runs nothing.
		start, _, serr := store.Decide(ctx, StartID(id))
		if serr != nil {
			if errors.Is(serr, jetflow.ErrNotFound) {
				return fmt.Errorf("retrier %s: %w", id, jetflow.ErrNotFound)
			}
			return serr
		}
		s, err := startSpec(start)
		if err != nil {
			return err
		}
		return cancelRetrier(ctx, r.p, s, start)
	}
	if err != nil {
		return err
	}
	if rec.Name != RecordName {
		return fmt.Errorf("%w: run %s is a %s", ErrBadRecord, id, rec.Name)
	}
	return r.p.Cancel(ctx, id)
}

// startSpec is the spec of start run r. Errors: ErrBadRecord when r is not
// a retrier's start run (another function's run under that id, or args
// that are not a spec).
func startSpec(r *jetflow.Run) (spec, error) {
	if r.Name != StartFunction {
		return spec{}, fmt.Errorf("%w: run %s is a %s, not a retrier's start", ErrBadRecord, r.ID, r.Name)
	}
	var s spec
	if err := json.Unmarshal(r.Args, &s); err != nil {
		return spec{}, fmt.Errorf("%w: start run %s: %v", ErrBadRecord, r.ID, err)
	}
	if s.Function == "" {
		return spec{}, fmt.Errorf("%w: start run %s names no function", ErrBadRecord, r.ID)
	}
	if StartID(s.Retrier) != r.ID {
		return spec{}, fmt.Errorf("%w: start run %s is retrier %q's", ErrBadRecord, r.ID, s.Retrier)
	}
	return s, nil
}
