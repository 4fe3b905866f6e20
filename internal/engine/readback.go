package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
)

// ReadFunc reads a run's record for a read-back, reporting whether the
// runs stream's leader answered (kv.Store.Decide).
type ReadFunc func(ctx context.Context, id string) (*jetflow.Run, bool, error)

// Mine says what a record write was, for its read-back: Same reports
// whether a stored record is this very write, Base (nil: none) whether it
// is an earlier write of the same writer that this one may go over.
type Mine struct {
	Same, Base func(cur *jetflow.Run) bool
}

// readBackTimeout bounds the read of a record after a write whose reply was
// lost (the write may have used up the caller's context).
const readBackTimeout = 5 * time.Second

// ReadBack settles a write of run id's record that expected revision rev
// (0: create-only) and was refused or went unanswered: it reads the record
// (read: from the leader, or a direct get when the leader cannot answer)
// and decides by kv.Settle. It returns the verdict, the record read (for
// Landed, Rebase and Superseded) and the read's error (for Unread and
// Gone).
func ReadBack(ctx context.Context, read ReadFunc, id string, rev uint64, m Mine) (kv.Verdict, *jetflow.Run, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
	defer cancel()
	cur, leader, err := read(rctx, id)
	rb := kv.ReadBack{Err: err, Leader: leader}
	if err == nil {
		rb.Rev, rb.Same = cur.Revision, m.Same != nil && m.Same(cur)
		rb.Base = m.Base != nil && m.Base(cur)
	}
	v := kv.Settle(rev, rb)
	switch {
	case v != kv.Unread || leader:
	case err == nil:
		err = fmt.Errorf("kv: read of run %s answered at revision %d, not past %d: a replica behind", id, cur.Revision, rev)
	case errors.Is(err, kv.ErrNotFound):
		err = fmt.Errorf("kv: run %s read as missing after its create was refused: a replica behind", id)
	}
	return v, cur, err
}

// Superseded is the error of a write that read back found superseded
// (kv.ErrSuperseded, a conflict), with the write's own error err.
func Superseded(err error) error { return fmt.Errorf("%w (%w)", kv.ErrSuperseded, err) }

// ClaimOf is Mine for a write of attempt r's claim or heartbeat: a stored
// record of the same attempt (OwnAttempt) is this write, or one of its
// attempt's that landed late; a heartbeat goes on from it.
func ClaimOf(r *jetflow.Run) Mine {
	owner, attempt, started := r.Owner, r.Attempts, r.StartedTime
	return Mine{Same: func(cur *jetflow.Run) bool { return OwnAttempt(cur, owner, attempt, started) }}
}

// OutcomeOf is Mine for a write of outcome r of the attempt owner started
// at started: the stored record is this write when it holds the same
// outcome (SameOutcome: the end time to the nanosecond is this attempt's),
// even when the write was refused at its first try (right after a heal, a
// deposed leader and the new one both take one request: the refusal came
// first, the new leader stored it); the attempt's own claim or heartbeat
// (landed unseen) is written over.
func OutcomeOf(r *jetflow.Run, owner string, started time.Time) Mine {
	attempt := r.Attempts
	return Mine{
		Same: func(cur *jetflow.Run) bool { return SameOutcome(cur, r) },
		Base: func(cur *jetflow.Run) bool { return OwnAttempt(cur, owner, attempt, started) },
	}
}

// OwnAttempt reports whether cur, the stored record of a run, is a write of
// the attempt that owner started at started (its claim or a heartbeat). A
// cancel writes Canceled, a takeover another owner or attempt, a retry
// another start: none of them matches.
func OwnAttempt(cur *jetflow.Run, owner string, attempt int, started time.Time) bool {
	if cur.State != jetflow.InProgress || started.IsZero() {
		return false
	}
	return cur.Owner == owner && cur.Attempts == attempt && cur.StartedTime.Equal(started)
}

// SameOutcome reports whether a and b record the same outcome: state,
// attempt, end, due time and error.
func SameOutcome(a, b *jetflow.Run) bool { return outcomeOf(a) == outcomeOf(b) }

// outcome is what an outcome write sets, comparable.
type outcome struct {
	state                jetflow.State
	attempts             int
	completed, scheduled instant
	err                  string
}

// instant is a time, comparable with == across locations.
type instant struct {
	sec  int64
	nsec int
}

func instantOf(t time.Time) instant { return instant{t.Unix(), t.Nanosecond()} }

func outcomeOf(r *jetflow.Run) outcome {
	return outcome{r.State, r.Attempts, instantOf(r.CompletedTime), instantOf(r.ScheduledTime), r.Error}
}
