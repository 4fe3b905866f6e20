package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
)

// ReadBack on run records: what counts as a claim's or an outcome's own
// write, read from the leader or from a replica.
func TestReadBack(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	started := now.Add(-time.Second)
	pending := &jetflow.Run{ID: "r1", State: jetflow.Pending, Attempts: 1, Revision: 5}
	claim := ClaimRun(pending, Work{Owner: "w1", Attempt: 2, Started: started}, now)
	stored := func(r *jetflow.Run, rev uint64) *jetflow.Run { c := *r; c.Revision = rev; return &c }
	success := SucceedRun(claim, Work{Owner: "w1", Attempt: 2, Started: started}, nil, now)
	other := ClaimRun(pending, Work{Owner: "w2", Attempt: 2, Started: started}, now)
	canceled := CancelRun(pending, now)
	timeout := errors.New("nats: timeout")
	cases := []struct {
		name   string
		rev    uint64
		mine   Mine
		cur    *jetflow.Run
		leader bool
		err    error
		want   kv.Verdict
	}{
		{"a claim that landed", 5, ClaimOf(claim), stored(claim, 6), true, nil, kv.Landed},
		{"a claim refused by an unbacked leader", 5, ClaimOf(claim), stored(pending, 5), true, nil, kv.NotLanded},
		{"a claim beaten by another worker's", 5, ClaimOf(claim), stored(other, 6), true, nil, kv.Superseded},
		{"a claim beaten by a cancel", 5, ClaimOf(claim), stored(canceled, 6), true, nil, kv.Superseded},
		{"a claim whose record a replica behind shows", 5, ClaimOf(claim), stored(pending, 5), false, nil, kv.Unread},
		{"a claim whose record is unread", 5, ClaimOf(claim), nil, false, timeout, kv.Unread},
		{"an outcome that landed, written again", 6, OutcomeOf(success, "w1", started), stored(success, 7), true, nil, kv.Landed},
		{"an outcome's first write refused, stored all the same (two leaders took it)", 6, OutcomeOf(success, "w1", started), stored(success, 7), true, nil, kv.Landed},
		{"an outcome over its attempt's heartbeat, landed unseen", 6, OutcomeOf(success, "w1", started), stored(claim, 8), true, nil, kv.Rebase},
		{"an outcome over another attempt's claim", 6, OutcomeOf(success, "w1", started), stored(other, 8), true, nil, kv.Superseded},
		{"an outcome whose record expired", 6, OutcomeOf(success, "w1", started), nil, true, jetflow.ErrNotFound, kv.Gone},
	}
	for _, c := range cases {
		read := func(context.Context, string) (*jetflow.Run, bool, error) { return c.cur, c.leader, c.err }
		v, cur, err := ReadBack(context.Background(), read, "r1", c.rev, c.mine)
		if v != c.want {
			t.Errorf("%s: %v, want %v", c.name, v, c.want)
		}
		if v == kv.Unread && err == nil {
			t.Errorf("%s: unread without a reason", c.name)
		}
		if (v == kv.Landed || v == kv.Rebase || v == kv.Superseded) && cur != c.cur {
			t.Errorf("%s: the record read is not returned", c.name)
		}
	}
	if err := Superseded(kv.ErrConflict); !errors.Is(err, kv.ErrSuperseded) || !errors.Is(err, kv.ErrConflict) {
		t.Errorf("Superseded(conflict) = %v", err)
	}
}
