package kv_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
)

// The read-back rule, case by case: a write expecting revision 5 (an
// update) or 0 (a create), read back from the leader or a direct get.
func TestSettle(t *testing.T) {
	timeout := errors.New("nats: timeout")
	cases := []struct {
		name string
		rev  uint64
		rb   kv.ReadBack
		want kv.Verdict
	}{
		{"the leader did not answer", 5, kv.ReadBack{Err: timeout}, kv.Unread},
		{"the leader did not answer a create's read", 0, kv.ReadBack{Err: timeout, Leader: true}, kv.Unread},
		{"unchanged at the expected revision", 5, kv.ReadBack{Leader: true, Rev: 5}, kv.NotLanded},
		{"unchanged, and our earlier write (a heartbeat) is that revision", 5, kv.ReadBack{Leader: true, Rev: 5, Same: true, Base: true}, kv.NotLanded},
		{"a create's key missing", 0, kv.ReadBack{Leader: true, Err: fmt.Errorf("run x: %w", kv.ErrNotFound)}, kv.NotLanded},
		{"this very write stored", 5, kv.ReadBack{Leader: true, Rev: 6, Same: true}, kv.Landed},
		{"this very create stored", 0, kv.ReadBack{Leader: true, Rev: 9, Same: true}, kv.Landed},
		{"an earlier write of ours stored", 5, kv.ReadBack{Leader: true, Rev: 7, Base: true}, kv.Rebase},
		{"another writer's", 5, kv.ReadBack{Leader: true, Rev: 7}, kv.Superseded},
		{"another writer's create", 0, kv.ReadBack{Leader: true, Rev: 3}, kv.Superseded},
		{"not ours to read", 5, kv.ReadBack{Leader: true, Err: jetflow.ErrBadRecord}, kv.Superseded},
		{"the record expected is gone", 5, kv.ReadBack{Leader: true, Err: kv.ErrNotFound}, kv.Gone},
		{"a replica behind: not past the expected revision", 5, kv.ReadBack{Rev: 5}, kv.Unread},
		{"a replica behind: an older revision", 5, kv.ReadBack{Rev: 4, Same: true}, kv.Unread},
		{"a replica behind: a create's key missing", 0, kv.ReadBack{Err: kv.ErrNotFound}, kv.Unread},
		{"a replica past the revision: this write", 5, kv.ReadBack{Rev: 6, Same: true}, kv.Landed},
		{"a replica past the revision: another's", 5, kv.ReadBack{Rev: 6}, kv.Superseded},
		{"a replica: the record expected is gone", 5, kv.ReadBack{Err: kv.ErrNotFound}, kv.Gone},
	}
	for _, c := range cases {
		if got := kv.Settle(c.rev, c.rb); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if !errors.Is(kv.ErrSuperseded, kv.ErrConflict) {
		t.Error("ErrSuperseded is not a conflict")
	}
}
