package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/jetflow-dev/jetflow"
)

// Named transitions: each builds the whole next record from the current
// one, pure, so that every writer of one transition writes the same record
// (Write checks the step's states). The caller writes the result with the
// step named beside it, at the current record's revision.

// OrphanError is the error of a held child canceled because its parent's
// attempt did not succeed.
const OrphanError = "parent attempt did not succeed"

// LostAttempt is the history entry of r's attempt whose worker is gone.
func LostAttempt(r *jetflow.Run, now time.Time) jetflow.Attempt {
	return jetflow.Attempt{Attempt: r.Attempts, Worker: r.Owner, StartedTime: r.StartedTime,
		CompletedTime: now.UTC(), Outcome: "lost", Error: jetflow.ErrWorkerLost.Error()}
}

// LoseRun is step Lost for an at-most-once run: inProgress run r's worker
// is gone and it is never run again: failed with jetflow.ErrWorkerLost, the
// lost attempt in its history.
func LoseRun(r *jetflow.Run, now time.Time) *jetflow.Run {
	return lose(r, now, jetflow.ErrWorkerLost.Error())
}

// LoseLastAttempt is step Lost for a retryable run whose lost attempt was
// its last: failed, the lost attempt in its history.
func LoseLastAttempt(r *jetflow.Run, now time.Time) *jetflow.Run {
	return lose(r, now, fmt.Sprintf("%v: attempt %d lost, no attempts left", jetflow.ErrWorkerLost, r.Attempts))
}

func lose(r *jetflow.Run, now time.Time, why string) *jetflow.Run {
	next := *r
	next.History = slices.Clone(r.History)
	next.AddAttempt(LostAttempt(r, now))
	next.State, next.CompletedTime, next.Error = jetflow.Failed, now.UTC(), why
	return &next
}

// OrphanRun is step Orphan: held child r is canceled because its parent's
// attempt did not succeed.
func OrphanRun(r *jetflow.Run, now time.Time) *jetflow.Run {
	next := *r
	next.State, next.Error, next.CompletedTime = jetflow.Canceled, OrphanError, now.UTC()
	return &next
}
