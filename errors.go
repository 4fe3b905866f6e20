package jetflow

import (
	"errors"
	"fmt"
	"time"
)

// Errors shared by every package. Each is matched with errors.Is; JetStream's
// own errors stay wrapped underneath where they are the cause.
var (
	// ErrInvalidName: a function name that would not make a valid subject.
	ErrInvalidName = errors.New("jetflow: invalid function name")
	// ErrInvalidRunID: a run id that is not a single subject token.
	ErrInvalidRunID = errors.New("jetflow: invalid run id")
	// ErrCanceled is the cause of a handler's context when its run is canceled.
	ErrCanceled = errors.New("jetflow: run canceled")
	// ErrTimeout is the cause of a handler's context when its run times out.
	ErrTimeout = errors.New("jetflow: run timed out")
	// ErrWorkerLost is recorded on an at-most-once run whose worker vanished.
	ErrWorkerLost = errors.New("jetflow: worker lost")
	// ErrNotFound: no run (or cron, or function) with that id.
	ErrNotFound = errors.New("jetflow: not found")
	// ErrBadArgs: arguments that cannot be encoded or decoded.
	ErrBadArgs = errors.New("jetflow: bad arguments")
	// ErrBadMessage: a message on a function subject that jetflow cannot use.
	ErrBadMessage = errors.New("jetflow: bad message")
	// ErrBadRecord: a stored run record that cannot be read (not a record
	// jetflow wrote: its JSON, a time or its state is unreadable).
	ErrBadRecord = errors.New("jetflow: unreadable run record")
	// ErrPanic: the handler panicked; the record holds the stack.
	ErrPanic = errors.New("jetflow: handler panicked")
	// ErrPayloadMissing: a reference to a large payload (docs/wire-format.md,
	// "Large payloads") whose object is not in the payloads bucket: it
	// expired, was deleted, or never existed. A run whose args are missing
	// fails (permanent) with it; Get and Result return it.
	ErrPayloadMissing = errors.New("jetflow: offloaded payload missing")
)

// permanentError stops retries.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that the run fails at once, without further retries
// (River's JobCancel).
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err (or one it wraps) was made by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// RetryAfterError asks for the next attempt after Delay instead of the
// backoff schedule (River's JobSnooze). It still counts as an attempt.
type RetryAfterError struct {
	Delay time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("retry after %s", e.Delay)
	}
	return fmt.Sprintf("retry after %s: %v", e.Delay, e.Err)
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns an error that retries the run after d.
func RetryAfter(d time.Duration, err error) error { return &RetryAfterError{Delay: d, Err: err} }
