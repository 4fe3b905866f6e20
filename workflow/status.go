package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/producer"
)

// ErrEnded: an event sent to a workflow that has ended (the same error as
// producer.SendEvent's).
var ErrEnded = wfwire.ErrEnded

// ErrEventUnconfirmed: SendEvent's store went unanswered (a server
// restart) until ctx ended: the event may be stored, and sending it again
// may deliver it twice (producer.ErrEventUnconfirmed).
var ErrEventUnconfirmed = wfwire.ErrEventUnconfirmed

// SendEvent sends event name with payload (JSON-encoded) to workflow id:
// it is stored durably and resumes the workflow if it waits (at once, where
// producer.SendEvent, for producers that do not import this package,
// resumes it through a wake run). An event sent
// before its await is kept until an await consumes it; each event is
// consumed by one await. Errors: ErrInvalidEventName, jetflow.ErrNotFound
// (no such workflow), producer.ErrNotWorkflow (a run that is not a
// workflow), ErrEnded, ErrEventUnconfirmed (it may be stored: a store
// whose reply is lost is made again on its key until ctx ends, so one
// call stores the event once), jetflow.ErrBadArgs, producer.ErrArgsTooLarge (a
// payload above 32 MiB; one above a quarter of the server's max payload
// goes to the payloads bucket), jetflow.ErrBadRecord (the workflow's
// journal cannot be read: the workflow fails with it).
func SendEvent(ctx context.Context, p *producer.Producer, id, name string, payload any) error {
	return watchDenied(ctx, p, func(ctx context.Context) error { return sendEvent(ctx, p, id, name, payload) })
}

// watchDenied runs fn so that a request the server denies (a user without
// the workflows block of docs/permissions.md) ends it at once with the
// server's permissions violation, not at ctx's deadline.
func watchDenied(ctx context.Context, p *producer.Producer, fn func(ctx context.Context) error) error {
	eng := engine.Of(p)
	return natsperm.Do(ctx, eng.Conn(), fn, "$JS.", "$KV.", eng.Streams().WithDefaults().Prefix+".")
}

func sendEvent(ctx context.Context, p *producer.Producer, id, name string, payload any) error {
	ev, err := eventJSON(engine.Of(p), name, payload)
	if err != nil {
		return err
	}
	r, err := engine.Of(p).Get(ctx, id)
	if err != nil {
		return err
	}
	return storeEvent(ctx, p, r, name, ev)
}

// storeEvent stores event ev (its journal value) named name for workflow
// r, and resumes it if it waits.
func storeEvent(ctx context.Context, p *producer.Producer, r *jetflow.Run, name string, ev []byte) error {
	id := r.ID
	if !slices.Contains(r.Children, SegmentID(id, 1)) {
		// As producer.SendEvent: an event for a run that is no workflow
		// would stay in the journal for good.
		return fmt.Errorf("run %s (%s): %w", id, r.Name, producer.ErrNotWorkflow)
	}
	if r.State.Terminal() {
		return fmt.Errorf("workflow %s is %s: %w", id, r.State, ErrEnded)
	}
	jr, err := openJournal(ctx, p)
	if err != nil {
		return err
	}
	if ev, err = wfwire.OffloadEvent(ctx, engine.Of(p).JetStream(), engine.Of(p).Streams().PayloadsBucket(), id, ev); err != nil {
		return err
	}
	wake := func(ctx context.Context) error { return resume(ctx, p, jr, r.Name, id) }
	if err := wfwire.StoreEvent(ctx, jr.kv, id, name, ev); err != nil {
		wfwire.WakeUnconfirmed(ctx, err, wake)
		return err
	}
	return wake(ctx)
}

// Status is a workflow's record and journal.
type Status struct {
	// Run is the workflow's run record: state, input (Args), result or
	// error, children (its segments, calls, timers and child workflows).
	Run *jetflow.Run `json:"run"`
	// Steps are the journaled steps in program order, with what each
	// waits for.
	Steps []Entry `json:"steps"`
	// Segment is the last segment that ran, and Waiting whether it ended
	// waiting; Waits says for what.
	Segment int      `json:"segment"`
	Waiting bool     `json:"waiting"`
	Waits   []string `json:"waits,omitempty"`
	// Generation is the workflow's current run (from 1): ContinueAsNew
	// starts the next; Steps are the current run's.
	Generation int `json:"generation"`
	// ErrorCode is the code of the sentinel error a failed workflow's
	// failure matched (see RegisterError); Err returns it as an error.
	ErrorCode string `json:"errorCode,omitempty"`
}

// Err is the error of a workflow that failed (an *Error that errors.Is
// matches against the sentinel its failure matched), jetflow.ErrCanceled
// for one canceled, nil otherwise.
func (st *Status) Err() error {
	switch st.Run.State {
	case jetflow.Failed:
		return failure(st.Run, st.ErrorCode)
	case jetflow.Canceled:
		return fmt.Errorf("workflow %s: %w", st.Run.ID, jetflow.ErrCanceled)
	}
	return nil
}

// Get returns workflow id's record and its steps. Errors:
// jetflow.ErrNotFound, jetflow.ErrInvalidRunID, producer.ErrNotWorkflow (a
// run that is not a workflow).
func Get(ctx context.Context, p *producer.Producer, id string) (*Status, error) {
	var st *Status
	err := watchDenied(ctx, p, func(ctx context.Context) error {
		var err error
		st, err = get(ctx, p, id)
		return err
	})
	return st, err
}

func get(ctx context.Context, p *producer.Producer, id string) (*Status, error) {
	r, err := p.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	jr, err := openJournal(ctx, p)
	if err != nil {
		return nil, err
	}
	snap, err := jr.load(ctx, id)
	if err != nil {
		return nil, err
	}
	if !wfwire.IsWorkflow(r) && snap.cur == nil && len(snap.steps) == 0 {
		// As SendEvent and Restart: a plain run is not shown as a
		// workflow with no step.
		return nil, fmt.Errorf("run %s (%s): %w", id, r.Name, producer.ErrNotWorkflow)
	}
	st := &Status{Run: r}
	if r.State == jetflow.Failed {
		st.ErrorCode = decodeEndCode(snap.end, r)
	}
	st.Generation = snap.cur.gen()
	for _, e := range generation(snap.steps, st.Generation) {
		st.Steps = append(st.Steps, *e)
	}
	sort.Slice(st.Steps, func(a, b int) bool { return stepLess(st.Steps[a].Step, st.Steps[b].Step) })
	if c := snap.cur; c != nil {
		st.Segment, st.Waiting, st.Waits = c.Seg, c.Waiting, c.Waits
	} else if wfwire.IsWorkflow(r) && firstSegmentRan(r, len(st.Steps)) {
		st.Segment = 1 // the first segment writes the cursor only when it parks
	}
	return st, nil
}

// firstSegmentRan reports whether workflow r, with n steps and no cursor,
// ran its first segment: it has steps, runs, succeeded or failed.
func firstSegmentRan(r *jetflow.Run, n int) bool {
	switch {
	case n > 0:
		return true
	case r.State == jetflow.InProgress, r.State == jetflow.Success, r.State == jetflow.Failed:
		return true
	}
	return false
}

// Result waits until workflow id has ended and returns its result decoded
// into Out. A workflow that failed returns an *Error (its record's error
// text) that errors.Is matches against the sentinel its failure matched:
// ErrNondeterministic, a step's error such as ErrEventTimeout, or one
// given to RegisterError; one canceled returns jetflow.ErrCanceled.
func Result[In, Out any](ctx context.Context, p *producer.Producer, def *Workflow[In, Out], id string) (Out, error) {
	var out Out
	r, err := p.Wait(ctx, id)
	if err != nil {
		return out, err
	}
	switch r.State {
	case jetflow.Success:
		if len(r.Result) > 0 {
			if err := json.Unmarshal(r.Result, &out); err != nil {
				return out, fmt.Errorf("%w: workflow %s result: %v", jetflow.ErrBadArgs, id, err)
			}
		}
		return out, nil
	case jetflow.Canceled:
		return out, fmt.Errorf("workflow %s: %w", id, jetflow.ErrCanceled)
	}
	jr, err := openJournal(ctx, p)
	if err != nil {
		return out, err
	}
	code, err := readEndCode(ctx, jr, r)
	if err != nil {
		return out, errors.Join(failure(r, ""), err)
	}
	return out, failure(r, code)
}

// StepsFunc returns what dashboard.Config.Steps wants: for a run id, its
// workflow Status (record, steps, what it waits for), or nil when the run
// is not a workflow (no journal). The dashboard shows the steps as a
// timeline on the run's page.
func StepsFunc(p *producer.Producer) func(ctx context.Context, id string) (any, error) {
	return func(ctx context.Context, id string) (any, error) {
		st, err := Get(ctx, p, id)
		if err != nil {
			if errors.Is(err, jetflow.ErrNotFound) || errors.Is(err, producer.ErrNotWorkflow) {
				return nil, nil
			}
			return nil, err
		}
		if st.Segment == 0 && len(st.Steps) == 0 {
			return nil, nil // a run, not a workflow, or one not started yet
		}
		return st, nil
	}
}
