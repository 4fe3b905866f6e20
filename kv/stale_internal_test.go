package kv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// A second of delayed entries read from a replica behind the stream's
// leader is read again, and a read that never catches up is an error (the
// scheduler reads the second again at its next tick), never a second with
// an entry left out (its run would wait for the repair sweep). The replica
// here is a mirror of the delayed bucket that holds one of a second's three
// entries; its sequences are the bucket's.
func TestDelayedReadBehindItsLeaderIsNotUsed(t *testing.T) {
	t.Parallel()
	ts, st := openedStore(t)
	ctx := context.Background()
	due := time.Now().Add(time.Hour).Truncate(time.Second)
	var keys []string
	for _, id := range []string{"d-1", "d-2", "d-3"} {
		if _, err := st.PutDelayed(ctx, Delayed{Envelope: streams.Envelope{ID: id, Function: "fn.a"}, Due: due}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, DelayedKey(due, id))
	}
	bucket := st.cfg.DelayedBucket()
	read := func(s *Store) (int, error) {
		n := 0
		err := s.ReadDelayed(ctx, []int64{due.Unix()}, func(string, uint64, []byte) { n++ })
		return n, err
	}
	through := func(name string, keys ...string) *Store {
		var moves []jetstream.SubjectTransformConfig
		for _, k := range keys {
			subj := streams.KVSubject(bucket, k)
			moves = append(moves, jetstream.SubjectTransformConfig{Source: subj, Destination: subj})
		}
		ts.StaleMirror(t, streams.KVStream(bucket), name, jetstream.StreamSource{SubjectTransforms: moves}, uint64(len(keys)))
		mirror, err := ts.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		s := *st
		s.dstream = mirror
		return &s
	}
	if n, err := read(st); err != nil || n != 3 {
		t.Fatalf("the leader's bucket: %d entries, %v; want 3", n, err)
	}
	if n, err := read(through("BEHIND", keys[0])); !errors.Is(err, ErrStaleRead) || n != 0 {
		t.Fatalf("a replica behind: %d entries visited, %v; want none and ErrStaleRead", n, err)
	}
	if n, err := read(through("CAUGHTUP", keys...)); err != nil || n != 3 {
		t.Fatalf("a replica caught up: %d entries, %v; want 3", n, err)
	}
}

// Where the runs stream's leader cannot answer (here: nobody answers the
// API prefix the store asks it on, as while a stream elects its leader),
// Decide returns that error and does not take a direct get's word in its
// stead; Show still answers.
func TestDecideWaitsWhereTheLeaderCannotAnswer(t *testing.T) {
	t.Parallel()
	ts, st := openedStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := st.Create(ctx, &jetflow.Run{ID: "here-1", Name: "fn.a", State: jetflow.Pending, ScheduledTime: now, CreationTime: now}); err != nil {
		t.Fatal(err)
	}
	nobody, err := jetstream.NewWithAPIPrefix(ts.NC, "$NOBODY.API")
	if err != nil {
		t.Fatal(err)
	}
	cut := *st
	cut.js = nobody
	if r, leader, err := cut.Decide(ctx, "here-1"); err == nil || leader || r != nil {
		t.Fatalf("Decide without a leader = %+v, leader %v, %v; want an error and no record", r, leader, err)
	}
	if r, err := cut.Show(ctx, "here-1"); err != nil || r.State != jetflow.Pending {
		t.Fatalf("Show = %+v, %v; want the pending record", r, err)
	}
}

// A second of delayed entries read while the stream's leader cannot say
// what it holds (here: nobody answers the API prefix the store asks the
// leader on, as during an election or a partition) may come from a
// replica behind it: its entries are visited, and the second is reported
// stale, to be read again until the leader vouches for it. A term that
// took such a read for the whole second left runs due in a partition to
// the repair sweep, two minutes late.
func TestDelayedReadTheLeaderCannotVouchForIsReadAgain(t *testing.T) {
	t.Parallel()
	ts, st := openedStore(t)
	ctx := context.Background()
	due := time.Now().Add(time.Hour).Truncate(time.Second)
	for _, id := range []string{"v-1", "v-2"} {
		if _, err := st.PutDelayed(ctx, Delayed{Envelope: streams.Envelope{ID: id, Function: "fn.a"}, Due: due}); err != nil {
			t.Fatal(err)
		}
	}
	nobody, err := jetstream.NewWithAPIPrefix(ts.NC, "$NOBODY.API")
	if err != nil {
		t.Fatal(err)
	}
	cut := *st
	cut.js = nobody
	for _, secs := range [][]int64{{due.Unix()}, {due.Unix(), due.Unix() + 1}} {
		n := 0
		err := cut.ReadDelayed(ctx, secs, func(string, uint64, []byte) { n++ })
		var stale *StaleSeconds
		if !errors.As(err, &stale) || len(stale.Secs) != len(secs) || n != 2 {
			t.Fatalf("read of %v without the leader: %d entries visited, %v; want 2 and every second stale", secs, n, err)
		}
	}
	n := 0
	if err := st.ReadDelayed(ctx, []int64{due.Unix(), due.Unix() + 1}, func(string, uint64, []byte) { n++ }); err != nil || n != 2 {
		t.Fatalf("read with the leader: %d entries, %v; want 2, nil", n, err)
	}
	// An empty bucket: the leader answers that it holds nothing, which
	// vouches for the read as well.
	ds, err := ts.JS.Stream(ctx, streams.KVStream(st.cfg.DelayedBucket()))
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	n = 0
	if err := st.ReadDelayed(ctx, []int64{due.Unix(), due.Unix() + 1}, func(string, uint64, []byte) { n++ }); err != nil || n != 0 {
		t.Fatalf("read of an empty bucket with the leader: %d entries, %v; want 0, nil", n, err)
	}
}

// openedStore starts a server with jetflow's streams provisioned and opens
// a Store on it.
func openedStore(t *testing.T) (*testserver.Env, *Store) {
	t.Helper()
	ts := testserver.Start(t)
	ctx := context.Background()
	if err := streams.Provision(ctx, ts.JS, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	st, err := Open(ctx, ts.JS, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return ts, st
}
