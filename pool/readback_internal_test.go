package pool

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
)

// A pool state write (a grant) whose reply was lost or that was refused is
// settled on the leader's read by kv.Settle: the state stored is this very
// write (landed: its grants count, not given again), as the write
// expected it (written again), or another writer's (a conflict). And
// putState, retried over its own landed write, reports it stored, not a
// conflict.
func TestPoolStateWriteReadBack(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := New(ctx, p, Config{Name: "readback", MaxParallelism: 2})
	if err != nil {
		t.Fatal(err)
	}
	st, rev, ok, err := pl.st.getState(ctx, pl.name)
	if err != nil || !ok {
		t.Fatalf("state: %v %v", ok, err)
	}
	subj := streams.KVSubject(pl.st.bucket, stateKey(pl.name))
	st.Running["item-1"] = slot{Attempt: 1, Granted: 1}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := pl.st.readBack(ctx, subj, rev, data); v != kv.NotLanded {
		t.Fatalf("before the write: %v, want not landed", v)
	}
	nrev, err := pl.st.putState(ctx, pl.name, st, rev)
	if err != nil {
		t.Fatal(err)
	}
	if v, got := pl.st.readBack(ctx, subj, rev, data); v != kv.Landed || got != nrev {
		t.Fatalf("after the write: %v at %d, want landed at %d", v, got, nrev)
	}
	// The same write again over the revision it expected (its first
	// reply lost): refused, read back, and counted as stored.
	if again, err := pl.st.putState(ctx, pl.name, st, rev); err != nil || again != nrev {
		t.Fatalf("the write again: revision %d, %v; want %d, stored", again, err, nrev)
	}
	// Another writer's state: a conflict.
	other := *st
	other.Max = 5
	if _, err := pl.st.putState(ctx, pl.name, &other, rev); !errors.Is(err, errConflict) {
		t.Fatalf("over another writer's state: %v, want errConflict", err)
	}
	if v, _ := pl.st.readBack(ctx, subj, rev, []byte(`{"other":true}`)); v != kv.Superseded {
		t.Fatalf("another writer's: %v, want superseded", v)
	}
}
