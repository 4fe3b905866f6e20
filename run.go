package jetflow

import (
	"encoding/json"
	"time"
)

// State of a run.
type State string

const (
	Pending    State = "pending"
	InProgress State = "inProgress"
	Success    State = "success"
	Failed     State = "failed"
	Canceled   State = "canceled"
)

// Terminal reports whether no later writer may change a run in this state.
func (s State) Terminal() bool { return s == Success || s == Failed || s == Canceled }

// Valid reports whether s is one of the five states.
func (s State) Valid() bool {
	switch s {
	case Pending, InProgress, Success, Failed, Canceled:
		return true
	}
	return false
}

// Progress is what a handler reports while it works.
type Progress struct {
	Percent   float64   `json:"percent,omitempty"`
	Processed int64     `json:"processed,omitempty"`
	Total     int64     `json:"total,omitempty"`
	Message   string    `json:"message,omitempty"`
	Updated   time.Time `json:"updated,omitzero"`
}

// Run is the status record of one run: one per run id, in the runs bucket.
type Run struct {
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	Kind          Kind            `json:"kind,omitempty"`
	Args          json.RawMessage `json:"args,omitempty"`
	State         State           `json:"state"`
	ScheduledTime time.Time       `json:"scheduledTime"`
	CreationTime  time.Time       `json:"creationTime"`
	StartedTime   time.Time       `json:"startedTime,omitzero"`
	// Owner is the worker that claimed the running attempt, and Heartbeat
	// the last time it said it is alive (written every AckWait/3 while the
	// handler runs).
	Owner         string    `json:"owner,omitempty"`
	Heartbeat     time.Time `json:"heartbeat,omitzero"`
	CompletedTime time.Time `json:"completedTime,omitzero"`
	// Attempts is the number of attempts started so far (0 while the first waits).
	Attempts    int `json:"attempts"`
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// Timeout overrides the function's timeout for this run.
	Timeout time.Duration `json:"timeout,omitempty"`
	Error   string        `json:"error,omitempty"`
	// Permanent: the failure asked for no more retries (jetflow.Permanent,
	// a timeout, a panic, bad input).
	Permanent bool `json:"permanent,omitempty"`
	// Parent is the run that scheduled this one, if any.
	Parent string `json:"parent,omitempty"`
	// HeldBy names a retryable parent whose success commits this run.
	HeldBy   string          `json:"heldBy,omitempty"`
	Children []string        `json:"children,omitempty"`
	Progress *Progress       `json:"progress,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	// OnComplete is run once when this run ends (see Completion).
	OnComplete *Callback `json:"onComplete,omitempty"`
	// Pool names the work pool the run belongs to, if any.
	Pool string `json:"pool,omitempty"`
	// Priority within the pool (see the pool package).
	Priority int `json:"priority,omitempty"`
	// Trace carries W3C trace context for runs dispatched later.
	Trace map[string]string `json:"trace,omitempty"`
	// History lists the attempts that ended, oldest first, once a run has
	// had more than one (a run that succeeds at its first attempt keeps
	// none: its record says it all). At most MaxHistory, the latest.
	History []Attempt `json:"history,omitempty"`
	// Revision is the record's KV revision (not stored in the record).
	Revision uint64 `json:"-"`
}

// Attempt is one ended attempt of a run (Run.History).
type Attempt struct {
	Attempt       int       `json:"attempt"`
	Worker        string    `json:"worker,omitempty"`
	StartedTime   time.Time `json:"startedTime,omitzero"`
	CompletedTime time.Time `json:"completedTime,omitzero"`
	// Outcome: success, failed (retried or not), lost (its worker stopped
	// heartbeating), canceled.
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// MaxHistory bounds Run.History.
const MaxHistory = 20

// AddAttempt appends a to r.History, keeping the latest MaxHistory.
func (r *Run) AddAttempt(a Attempt) {
	r.History = append(r.History, a)
	if n := len(r.History); n > MaxHistory {
		r.History = append(r.History[:0:0], r.History[n-MaxHistory:]...)
	}
}

// Callback names a function to run when a run ends, with context args of
// the caller's own.
type Callback struct {
	Function string          `json:"fn"`
	Args     json.RawMessage `json:"args,omitempty"`
}

// Completion is the argument of an on-complete function: the finished run's
// record (its State says success, failed or canceled; Result and Error hold
// the outcome) and the context args given with the callback.
type Completion struct {
	Run     *Run            `json:"run"`
	Context json.RawMessage `json:"context,omitempty"`
}

// CompletionID is the id of the on-complete run of run id: deterministic, so
// the callback runs exactly once however many writers try. Derived ids end
// in "-done" (callbacks) or "-<attempt>-<n>" (children of retryable runs):
// do not give your own runs ids of those shapes.
func CompletionID(id string) string {
	if len(id)+5 <= 200 {
		return id + "-done"
	}
	return shortID(id) + "-done"
}

// CompletionOf is Completion with its context typed: define an on-complete
// function as Define[CompletionOf[C]] and pass its call with
// OnCompleteCall, and the handler receives the finished run and its
// context as a C, not raw JSON.
type CompletionOf[C any] struct {
	Run     *Run `json:"run"`
	Context C    `json:"context"`
}

// OnCompleteCall is the call that runs fn when a run ends, with context c
// (for producer.WithOnComplete and the like): the compiler checks that fn
// takes a CompletionOf of c's type.
func OnCompleteCall[C any](fn Function[CompletionOf[C]], c C) Call {
	return Call{Name: fn.name, Kind: fn.kind, Args: c}
}
