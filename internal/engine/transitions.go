package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
)

// Named transitions: each builds the whole next record from the current
// one, pure, so that every writer of one transition writes the same record
// (Write checks the step's states). The caller writes the result with the
// step named beside it, at the current record's revision. None changes the
// record it is given: each returns a copy (History and Children cloned).
//
//	constructor      step        what it writes
//	ClaimRun         Claim       an attempt starts here: inProgress, owned
//	BeatRun          Beat        the running attempt's heartbeat, progress, children
//	SucceedRun       Succeed     the attempt's success
//	RetryRun         Retry       the attempt failed, the next one due later
//	FailRun          Fail        the attempt failed, no retry
//	UnclaimRun       Retry       a claim given back, its handler never ran
//	TakeOverRun      (Claim)     the lost attempt in the history, before the next claim
//	LoseRun          Lost        an at-most-once run's worker is gone
//	LoseLastAttempt  Lost        a retryable run's last attempt is lost
//	CancelRun        Cancel      canceled by a user
//	OrphanRun        Orphan      a held child whose parent's attempt did not succeed
//	ReleaseRun       Release     a held child committed by its parent
//	DeadLetterRun    DeadLetter  a message that cannot be a run, recorded failed
//	StartRecord      Claim       a record run by segments or attempts of its own (a workflow)
//	AddChild         Beat        one more child of a running record
//	EndRecord        Succeed, Fail, Cancel: such a record's end

// Work is what a worker's attempt of a run writes with its record: who runs
// it, which attempt, since when, and what it reported.
type Work struct {
	Owner    string
	Attempt  int
	Started  time.Time
	Progress *jetflow.Progress
	Children []string
}

// OrphanError is the error of a held child canceled because its parent's
// attempt did not succeed.
const OrphanError = "parent attempt did not succeed"

// MaxHistoryError bounds the error an attempt's history entry keeps (the
// record's Error keeps more).
const MaxHistoryError = 2048

// clone returns a copy of r whose History and Children may be changed.
func clone(r *jetflow.Run) *jetflow.Run {
	next := *r
	next.History = slices.Clone(r.History)
	next.Children = slices.Clone(r.Children)
	return &next
}

// runningAs is r as attempt w runs it, at now.
func runningAs(r *jetflow.Run, w Work, now time.Time) *jetflow.Run {
	next := clone(r)
	next.State, next.Attempts, next.Owner, next.Heartbeat = jetflow.InProgress, w.Attempt, w.Owner, now.UTC()
	next.Progress, next.Children = w.Progress, slices.Clone(w.Children)
	if next.StartedTime.IsZero() {
		next.StartedTime = w.Started
	}
	return next
}

// ClaimRun is step Claim: attempt w starts on r (pending, none, or
// inProgress under a lost worker's claim), owned by w.Owner, started at
// w.Started, its heartbeat now.
func ClaimRun(r *jetflow.Run, w Work, now time.Time) *jetflow.Run {
	next := runningAs(r, w, now)
	next.StartedTime = w.Started
	return next
}

// BeatRun is step Beat: running attempt w's heartbeat at now, with its
// progress and children. From a record not claimed yet (a run started
// before its claim) it is the claim, written as step Claim.
func BeatRun(r *jetflow.Run, w Work, now time.Time) *jetflow.Run {
	return runningAs(r, w, now)
}

// attemptEnd is r's fields as attempt w leaves them, ended at now, with
// the attempt in the history when outcome is not empty.
func attemptEnd(r *jetflow.Run, w Work, outcome, why string, now time.Time) *jetflow.Run {
	next := clone(r)
	next.Attempts, next.Progress, next.Children = w.Attempt, w.Progress, slices.Clone(w.Children)
	if next.StartedTime.IsZero() {
		next.StartedTime = w.Started
	}
	if outcome != "" {
		next.AddAttempt(jetflow.Attempt{Attempt: w.Attempt, Worker: w.Owner, StartedTime: next.StartedTime,
			CompletedTime: now.UTC(), Outcome: outcome, Error: clip(why, MaxHistoryError)})
	}
	return next
}

// SucceedRun is step Succeed: attempt w of r returned result. A first
// attempt's success adds no history entry (its record says it all); a
// later one's does, so that the history shows every attempt.
func SucceedRun(r *jetflow.Run, w Work, result json.RawMessage, now time.Time) *jetflow.Run {
	outcome := ""
	if len(r.History) > 0 || w.Attempt > 1 {
		outcome = string(jetflow.Success)
	}
	next := attemptEnd(r, w, outcome, "", now)
	next.State, next.CompletedTime, next.Error, next.HeldBy, next.Result = jetflow.Success, now.UTC(), "", "", result
	return next
}

// FailRun is step Fail: attempt w of r failed with why and is not retried
// (permanent: the failure asked for no more retries).
func FailRun(r *jetflow.Run, w Work, why string, permanent bool, now time.Time) *jetflow.Run {
	next := attemptEnd(r, w, string(jetflow.Failed), why, now)
	next.State, next.CompletedTime, next.Error, next.Permanent = jetflow.Failed, now.UTC(), why, permanent
	return next
}

// RetryRun is step Retry: attempt w of r failed with why and the next
// attempt is due at due. The record is pending again: no start, no
// children (the next attempt writes its own).
func RetryRun(r *jetflow.Run, w Work, why string, due, now time.Time) *jetflow.Run {
	next := attemptEnd(r, w, string(jetflow.Failed), why, now)
	next.State, next.Error, next.ScheduledTime = jetflow.Pending, why, due.UTC()
	next.StartedTime, next.Children = time.Time{}, nil
	return next
}

// UnclaimRun is step Retry for a claim given back: r, the record of
// attempt's claim, is pending again as before the claim (the attempt does
// not count: its handler never ran).
func UnclaimRun(r *jetflow.Run, attempt int) *jetflow.Run {
	next := clone(r)
	next.State, next.Attempts, next.Owner = jetflow.Pending, attempt-1, ""
	next.Heartbeat, next.StartedTime = time.Time{}, time.Time{}
	return next
}

// TakeOverRun is r, an inProgress record whose worker is lost, with its
// lost attempt in the history: the record the next attempt's claim
// (ClaimRun) builds on. It writes nothing by itself.
func TakeOverRun(r *jetflow.Run, now time.Time) *jetflow.Run {
	next := clone(r)
	next.AddAttempt(LostAttempt(r, now))
	return next
}

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
	next := TakeOverRun(r, now)
	next.State, next.CompletedTime, next.Error = jetflow.Failed, now.UTC(), why
	return next
}

// CancelRun is step Cancel: r is canceled at now (jetflow.ErrCanceled).
func CancelRun(r *jetflow.Run, now time.Time) *jetflow.Run {
	next := clone(r)
	next.State, next.CompletedTime, next.Error = jetflow.Canceled, now.UTC(), jetflow.ErrCanceled.Error()
	return next
}

// OrphanRun is step Orphan: held child r is canceled because its parent's
// attempt did not succeed.
func OrphanRun(r *jetflow.Run, now time.Time) *jetflow.Run {
	next := clone(r)
	next.State, next.Error, next.CompletedTime = jetflow.Canceled, OrphanError, now.UTC()
	return next
}

// ReleaseRun is step Release: held child r is committed by its parent's
// success (no longer held).
func ReleaseRun(r *jetflow.Run) *jetflow.Run {
	next := clone(r)
	next.State, next.HeldBy = jetflow.Pending, ""
	return next
}

// HoldRun is a new pending record r held for its parent (step Schedule,
// with producer's hold option): a child of a retryable attempt, committed
// by the attempt's success (ReleaseRun) or canceled (OrphanRun).
func HoldRun(r *jetflow.Run) *jetflow.Run {
	next := clone(r)
	next.State, next.HeldBy = jetflow.Pending, r.Parent
	return next
}

// DeadLetterRun is step DeadLetter: r, a record built from a message that
// cannot be a run (its id, function, args and times), failed for good with
// why at now.
func DeadLetterRun(r *jetflow.Run, why string, now time.Time) *jetflow.Run {
	next := clone(r)
	next.State, next.Permanent, next.CompletedTime, next.Error = jetflow.Failed, true, now.UTC(), why
	return next
}

// WithPayloads is record r, read for a caller, with args and result in
// place of their references to the payloads bucket: a copy for the
// caller, never written.
func WithPayloads(r *jetflow.Run, args, result json.RawMessage) *jetflow.Run {
	next := clone(r)
	next.Args, next.Result = args, result
	return next
}

// StartRecord is step Claim of a record whose work runs as runs of its own
// (a workflow's segments): inProgress, started at now if it was not, at
// least its first attempt, the children in drop gone (runs that ended: the
// record does not grow with every segment), child listed once.
func StartRecord(r *jetflow.Run, child string, now time.Time, drop map[string]bool) *jetflow.Run {
	next := clone(r)
	next.Children = slices.DeleteFunc(next.Children, func(c string) bool { return drop[c] })
	next.State, next.Heartbeat, next.Attempts = jetflow.InProgress, now.UTC(), max(r.Attempts, 1)
	if next.StartedTime.IsZero() {
		next.StartedTime = now.UTC()
	}
	if child != "" && !slices.Contains(next.Children, child) {
		next.Children = append(next.Children, child)
	}
	return next
}

// AddChild is step Beat of such a record: child listed (once), the
// heartbeat now. It returns nil when there is nothing to write (listed
// already, or not running).
func AddChild(r *jetflow.Run, child string, now time.Time) *jetflow.Run {
	if slices.Contains(r.Children, child) || r.State != jetflow.InProgress {
		return nil
	}
	next := clone(r)
	next.Children = append(next.Children, child)
	next.Heartbeat = now.UTC()
	return next
}

// NextAttempt is step Beat of a record whose attempts are runs of their
// own (a retrier's): attempt child is listed and, when attempt is past the
// record's, the record counts it with the last attempt's error why. It
// returns nil when there is nothing to write.
func NextAttempt(r *jetflow.Run, child string, attempt int, why string) *jetflow.Run {
	listed, counted := slices.Contains(r.Children, child), r.Attempts >= attempt
	if listed && counted {
		return nil
	}
	next := clone(r)
	if !listed {
		next.Children = append(next.Children, child)
	}
	if !counted {
		next.Attempts, next.Error = attempt, why
	}
	return next
}

// EndRecord is steps Succeed, Fail and Cancel of a record whose work runs
// as runs of its own (a workflow, a retrier): ended in state st at now,
// with result (success) or why (failed, canceled), after attempts at least
// (0: as it stands), started at started if it never was (zero: left
// unstarted). A failure with a reason is permanent: such a record is not
// retried.
func EndRecord(r *jetflow.Run, st jetflow.State, result json.RawMessage, why string, attempts int, started, now time.Time) *jetflow.Run {
	next := clone(r)
	next.State, next.Result, next.Error, next.Permanent = st, result, why, why != "" && st == jetflow.Failed
	next.CompletedTime, next.Heartbeat = now.UTC(), now.UTC()
	next.Attempts = max(r.Attempts, attempts)
	if next.StartedTime.IsZero() {
		next.StartedTime = started.UTC()
	}
	return next
}

// clip cuts s to at most n bytes (valid UTF-8), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
