package pool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
)

// A grant late past ReconcileGrace (a pause, a slow server) meets the
// periodic check, driven here step by step on a clock of the test's: the
// check gives the slot of the attempt that has not started back, as after
// a crash, and the late grant must then not start the item, which would
// run without a slot (past MaxParallelism or KeyLimit). The entry goes back
// to the queue, and a later grant, with a slot of its own, starts it. For a
// new item (no record yet) and for a retry (a pending record).
func TestLateGrantDoesNotStartWithoutItsSlot(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	pl, err := New(ctx, p, Config{Name: "late", MaxParallelism: 1, ReconcileGrace: time.Second,
		Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	d := newDispatcher(pl)
	call := jetflow.Call{Name: "test.pool.late", Args: map[string]int{"n": 1}}

	// reserve takes the slot of e at the clock's now, as a pass does.
	reserve := func(e *entry) int64 {
		t.Helper()
		at := clock.Load()
		if _, err := pl.st.updateState(ctx, pl.name, func(st *poolState) bool {
			if len(st.Running) >= st.Max {
				t.Fatalf("no free slot for %s: %+v", e.id, st.Running)
			}
			st.Running[e.id] = slot{Attempt: e.q.Attempt, Granted: at}
			st.recordStarts(at, 1)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return at
	}
	held := func() map[string]slot {
		t.Helper()
		st, _, _, err := pl.st.getState(ctx, pl.name)
		if err != nil {
			t.Fatal(err)
		}
		return st.Running
	}
	entryOf := func(id string) *entry {
		t.Helper()
		q, seq, err := pl.st.getQueued(ctx, pl.name, id)
		if err != nil {
			t.Fatalf("queue entry of %s: %v", id, err)
		}
		return &entry{id: id, seq: seq, q: q}
	}
	// lateGrant reserves e's slot, lets the check run past the grace,
	// then runs the grant: it must start nothing, and give e back.
	lateGrant := func(e *entry) {
		t.Helper()
		at := reserve(e)
		clock.Add(int64(2 * time.Second))
		d.reconcile(ctx, false)
		if s, ok := held()[e.id]; ok {
			t.Fatalf("the check kept the slot of %s, whose attempt had not started: %+v", e.id, s)
		}
		d.grant(ctx, e, at)
		run := RunID(pl.name, e.id, e.q.Attempt)
		if r, err := p.Get(ctx, run); !errors.Is(err, jetflow.ErrNotFound) {
			t.Errorf("%s: run %s of a grant whose slot was given back: %+v %v", e.id, run, r, err)
		}
		if it, err := pl.Status(ctx, e.id); err != nil || it.State == jetflow.InProgress {
			s, ok := held()[e.id]
			t.Errorf("%s: %+v %v, in progress without a slot (slot held %v %+v)", e.id, it, err, ok, s)
		}
		select {
		case r := <-d.redo:
			if r != e {
				t.Errorf("%s: %s given back to the queue", e.id, r.id)
			}
		default:
			t.Errorf("%s: not given back to the queue", e.id)
		}
	}
	// grantNow starts e with a slot of its own.
	grantNow := func(e *entry) {
		t.Helper()
		clock.Add(int64(time.Second))
		at := reserve(e)
		d.grant(ctx, e, at)
		it, err := pl.Status(ctx, e.id)
		if err != nil || it.State != jetflow.InProgress || it.Attempts != e.q.Attempt {
			t.Fatalf("%s: %+v %v after a grant in time, want in progress at attempt %d", e.id, it, err, e.q.Attempt)
		}
		if _, err := p.Get(ctx, it.RunID); err != nil {
			t.Fatalf("%s: run %s: %v", e.id, it.RunID, err)
		}
		if s, ok := held()[e.id]; !ok || s.Attempt != e.q.Attempt || s.Granted != at {
			t.Fatalf("%s: slot %v %+v, want the grant's", e.id, ok, s)
		}
		if _, _, err := pl.st.getQueued(ctx, pl.name, e.id); !errors.Is(err, jetflow.ErrNotFound) {
			t.Errorf("%s: queue entry left after the start: %v", e.id, err)
		}
		// Its attempt ends: the slot is free for the next case.
		if _, err := pl.st.updateState(ctx, pl.name, func(st *poolState) bool {
			delete(st.Running, e.id)
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}

	// A new item: no record until its grant writes it.
	if _, err := pl.Enqueue(ctx, call, WithID("fresh")); err != nil {
		t.Fatal(err)
	}
	e := entryOf("fresh")
	lateGrant(e)
	grantNow(e)

	// A retry: the record is pending after attempt 1, the entry is for 2.
	if _, err := pl.Enqueue(ctx, call, WithID("again")); err != nil {
		t.Fatal(err)
	}
	grantNow(entryOf("again"))
	it, err := pl.Status(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	it.State, it.NotBefore = jetflow.Pending, time.Unix(0, clock.Load()).UTC()
	if err := pl.st.writeItem(ctx, it, it.Revision); err != nil {
		t.Fatal(err)
	}
	if err := pl.requeue(ctx, it); err != nil {
		t.Fatal(err)
	}
	e = entryOf("again")
	if e.q.Attempt != 2 {
		t.Fatalf("retry entry for attempt %d", e.q.Attempt)
	}
	lateGrant(e)
	grantNow(e)
}
