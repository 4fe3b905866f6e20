package retrier

import (
	"context"

	"github.com/jetflow-dev/jetflow/worker"
)

// SetInternalOptions sets the worker options Register gives r's internal
// functions (call it before Register).
func SetInternalOptions(r *Retrier, o worker.Options) { r.internal = o }

// Fault is where a test's fault is asked for a failure: attempt Attempt of
// internal run ID of function Fn (StartFunction or StepFunction), at its
// start (End false) or, once its work failed, before it writes the
// retrier's end (End true).
type Fault struct {
	Fn, ID  string
	Attempt int
	End     bool
}

// SetFault makes f fail r's internal functions: its error, if any, is that
// attempt's (an outage fails both the work and the end). Call it before
// Register.
func SetFault(r *Retrier, f func(ctx context.Context, at Fault) error) {
	r.fault = func(ctx context.Context, fn, id string, attempt int, end bool) error {
		return f(ctx, Fault{Fn: fn, ID: id, Attempt: attempt, End: end})
	}
}
