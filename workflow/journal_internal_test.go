package workflow

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// journalEnv starts a server with jetflow's streams provisioned and returns
// it, a producer on it and the journal.
func journalEnv(t *testing.T) (*testserver.Env, *producer.Producer, *journal) {
	t.Helper()
	ts := testserver.Start(t)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	jr, err := openJournal(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return ts, p, jr
}

// A journal read from a replica behind its leader is read again, and a read
// that never catches up is an error to retry, never a snapshot with a step
// left out (the step would run again). The replica here is a mirror of the
// journal that holds one of a workflow's three keys, read through a KV
// handle of its own.
func TestJournalReadBehindItsLeaderIsNotUsed(t *testing.T) {
	t.Parallel()
	ts, _, jr := journalEnv(t)
	ctx := context.Background()
	for _, k := range []string{"wfa.s.1", "wfa.s.2", "wfa.wf"} {
		if _, err := jr.kv.Put(ctx, k, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	mirror := func(name string, keys ...string) *journal {
		var moves []jetstream.SubjectTransformConfig
		for _, k := range keys {
			moves = append(moves, jetstream.SubjectTransformConfig{
				Source: streams.KVSubject(jr.bucket, k), Destination: streams.KVSubject(name, k)})
		}
		ts.StaleMirror(t, streams.KVStream(jr.bucket), streams.KVStream(name), jetstream.StreamSource{SubjectTransforms: moves}, uint64(len(keys)))
		b, err := ts.JS.KeyValue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return &journal{kv: b, js: ts.JS, bucket: jr.bucket}
	}
	count := func(j *journal) (int, error) {
		n := 0
		err := j.scan(ctx, "wfa.>", func(jetstream.KeyValueEntry) error { n++; return nil })
		return n, err
	}
	if n, err := count(jr); err != nil || n != 3 {
		t.Fatalf("leader's journal: %d entries, %v; want 3", n, err)
	}
	start := time.Now()
	if n, err := count(mirror("behind", "wfa.s.1")); !errors.Is(err, errStaleJournal) {
		t.Fatalf("journal behind: %d entries, %v; want errStaleJournal", n, err)
	}
	t.Logf("gave up after %s", time.Since(start))
	if n, err := count(mirror("caughtup", "wfa.s.1", "wfa.s.2", "wfa.wf")); err != nil || n != 3 {
		t.Fatalf("journal caught up: %d entries, %v; want 3", n, err)
	}
}

// A scan while two keys are rewritten in turn always holds both: one is
// rewritten after the leader named the other's revision as its last, and
// a watch delivers it after that revision (or, seen once, not at all), so
// a read counts only when the leader's last revision did not move during
// it.
func TestJournalScanWhileAKeyIsRewrittenHoldsIt(t *testing.T) {
	t.Parallel()
	_, _, jr := journalEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, k := range []string{"wfc.s.1", "wfc.s.2", "wfc.wf"} {
		if _, err := jr.kv.Put(ctx, k, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = jr.kv.Put(ctx, "wfc.wf", []byte(`{}`))
			_, _ = jr.kv.Put(ctx, "wfc.s.2", []byte(`{}`))
			time.Sleep(5 * time.Millisecond) // room for reads that count
		}
	}()
	for i := range 50 {
		keys := map[string]bool{}
		err := jr.scan(ctx, "wfc.>", func(e jetstream.KeyValueEntry) error { keys[e.Key()] = true; return nil })
		if err != nil && !errors.Is(err, errStaleJournal) {
			t.Fatal(err)
		}
		if err == nil && len(keys) != 3 {
			t.Fatalf("scan %d read %v, want the 3 keys", i, keys)
		}
	}
	cancel()
	<-done
}

// unanswered is the journal's real bucket whose first write request is
// never answered, as one sent just before its server died: nats.go waits
// for the request's ctx to end.
type unanswered struct {
	jetstream.KeyValue
	dropped atomic.Bool
}

func (u *unanswered) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if u.dropped.CompareAndSwap(false, true) {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return u.KeyValue.Create(ctx, key, value, opts...)
}

// A journal write whose first request goes unanswered is written again
// within the caller's time: one try waits for its answer as one request
// does (kv.OneRequest), not for the caller's whole deadline (a segment stood still for two minutes on one
// such request after a server restart, its workflow with it).
func TestJournalWriteWhoseRequestIsNeverAnswered(t *testing.T) {
	t.Parallel()
	_, _, jr := journalEnv(t)
	u := &unanswered{KeyValue: jr.kv}
	j := &journal{kv: u, js: jr.js, bucket: jr.bucket}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := j.putEntry(ctx, "wfu", &Entry{Step: "1", Name: "s", Kind: KindStep, State: StepDone})
	if err != nil {
		t.Fatalf("journal write after an unanswered request: %v", err)
	}
	if !u.dropped.Load() {
		t.Fatal("the first request was not the dropped one")
	}
	got, err := jr.kv.Get(context.Background(), stepKey("wfu", "1"))
	if err != nil || got.Revision() != e.Revision {
		t.Fatalf("stored entry: %v, revision %d, want %d", err, got.Revision(), e.Revision)
	}
}

// An await reads the events stored after its floor only: those before are
// left out, a key deleted or purged after the floor too, and a floor at
// or past the last event reads none.
func TestEventsAfterTheirFloor(t *testing.T) {
	t.Parallel()
	_, _, jr := journalEnv(t)
	ctx := context.Background()
	put := func(k string) uint64 {
		rev, err := jr.kv.Put(ctx, k, []byte(`{"name":"tick","payload":"`+k+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	r1 := put("wfe.ev.tick.a")
	r2 := put("wfe.ev.tick.b")
	put("wfe.ev.other.c")
	r4 := put("wfe.ev.tick.d")
	put("wfe.ev.tick.e")
	if err := jr.kv.Delete(ctx, "wfe.ev.tick.e"); err != nil {
		t.Fatal(err)
	}
	r6 := put("wfe.ev.tick.f")
	if err := jr.kv.Purge(ctx, "wfe.ev.tick.f"); err != nil {
		t.Fatal(err)
	}
	keys := func(after uint64) []string {
		evs, err := jr.events(ctx, "wfe", "tick", after)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range evs {
			out = append(out, ev.key[len("wfe.ev.tick."):])
		}
		return out
	}
	for _, tc := range []struct {
		after uint64
		want  string
	}{
		{0, "a b d"},
		{r1, "b d"},
		{r2, "d"},
		{r4, ""},
		{r6 + 5, ""},
	} {
		if got := strings.Join(keys(tc.after), " "); got != tc.want {
			t.Errorf("events after %d: %q, want %q", tc.after, got, tc.want)
		}
	}
}
