package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Another NATS client writes garbage into the pool's bucket: the pool
// repairs it or reports it with a typed error, and goes on.

func (e *env) poolsKV(t *testing.T) jetstream.KeyValue {
	t.Helper()
	b, err := e.JS.KeyValue(context.Background(), pool.BucketName(streams.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *env) put(t *testing.T, key, val string) {
	t.Helper()
	if _, err := e.poolsKV(t).Put(context.Background(), key, []byte(val)); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// runOne enqueues one item and waits until it succeeded.
func (e *env) runOne(t *testing.T, pl *pool.Pool, id string) {
	t.Helper()
	enqueue(t, pl, id, WorkArgs{})
	if it := e.waitFinished(t, pl, []string{id})[id]; it.State != jetflow.Success {
		t.Fatalf("item %s: %s %s", id, it.State, it.Error)
	}
}

// Slots that name no item the pool can have: an id that is not an item id,
// an item that never existed granted far in the future, an item whose
// record is not JSON. Each is given back, and the pool, full of them, runs
// items again.
func TestGarbageSlots(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	cfg := testConfig("gslots")
	cfg.MaxParallelism = 4
	pl := e.newPool(t, cfg)
	e.put(t, "gslots.i.rotten", "{not json")
	e.put(t, "gslots.i.norun", fmt.Sprintf(`{"id":"norun","pool":"gslots","fn":%q,"state":"inProgress","attempts":1,"maxAttempts":1}`, Work.Name()))
	e.put(t, "gslots.state", fmt.Sprintf(`{"max":4,"running":{"a=b":{"a":1,"t":%d},"ghost":{"a":1,"t":%d},"rotten":{"a":1,"t":%d},"norun":{"a":1,"t":%d}}}`,
		time.Now().UnixNano(), int64(math.MaxInt64), time.Now().UnixNano(), time.Now().UnixNano()))
	startPool(t, pl)
	e.runOne(t, pl, "after")
	testserver.Eventually(t, 20*time.Second, "the garbage slots are given back", func() bool {
		inf, err := pl.Info(context.Background())
		return err == nil && len(inf.Running) == 0
	})
	for _, id := range []string{"rotten", "norun"} {
		if _, err := pl.Status(context.Background(), id); !errors.Is(err, jetflow.ErrBadRecord) {
			t.Errorf("status of bad record %s: %v, want ErrBadRecord", id, err)
		}
	}
}

// A state record that is not JSON, or has wrong types: New and Info report
// ErrBadRecord... and the dispatcher rebuilds it, from its configuration and
// the items running.
func TestGarbageState(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	cfg := testConfig("gstate")
	cfg.MaxParallelism = 2
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	e.runOne(t, pl, "before")
	for i, bad := range []string{"\x00\xff garbage", `{"max":"ten"}`, `[1,2,3]`, `{"running":{"x":5}}`} {
		e.put(t, "gstate.state", bad)
		e.runOne(t, pl, fmt.Sprintf("after-%d", i))
		inf, err := pl.Info(context.Background())
		if err != nil || inf.MaxParallelism != 2 {
			t.Fatalf("info after %q: %+v %v", bad, inf, err)
		}
	}
	// A new Pool value on a state that is garbage still opens.
	e.put(t, "gstate.state", "{")
	if _, err := pool.New(context.Background(), e.P, cfg); err != nil {
		t.Fatalf("New on a garbage state: %v", err)
	}
}

// Values out of range in the state: a max parallelism above the limit is
// held to MaxParallelismLimit... and start times in the far future do not
// stop the rate limit for good.
func TestGarbageStateValues(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	cfg := testConfig("gvals")
	cfg.RateLimit = pool.RateLimit{N: 2, Per: 200 * time.Millisecond}
	pl := e.newPool(t, cfg)
	far := time.Now().Add(1000 * time.Hour).UnixNano()
	e.put(t, "gvals.state", fmt.Sprintf(`{"max":-7,"rate":{"n":2,"per":200000000},"starts":[%d,%d]}`, far, far))
	if err := pl.SetMaxParallelism(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	startPool(t, pl)
	e.runOne(t, pl, "after")
	e.put(t, "gvals.state", `{"max":1000000000}`)
	if inf, err := pl.Info(context.Background()); err != nil || inf.MaxParallelism != pool.MaxParallelismLimit {
		t.Fatalf("info with max 1e9: %+v %v", inf, err)
	}
}

// Queue entries that are garbage: not JSON, an item whose id or pool is not
// the entry's, an id that is not an item id. None starts anything, nor
// writes a record anywhere; the pool goes on; Status reports them.
func TestGarbageQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	cfg := testConfig("gqueue")
	cfg.MaxParallelism = 1
	pl := e.newPool(t, cfg)
	other := e.newPool(t, testConfig("gother"))
	now := time.Now().UnixNano()
	item := func(id, pl string) string {
		return fmt.Sprintf(`{"a":1,"r":%d,"item":{"id":%q,"pool":%q,"fn":%q,"state":"pending","attempts":0,"maxAttempts":1,"enqueued":"2026-01-01T00:00:00Z","args":{"key":"x"}}}`,
			now, id, pl, Work.Name())
	}
	e.put(t, "gqueue.q.junk", "\xff\xfe")
	e.put(t, "gqueue.q.stolen", item("victim", "gother"))
	e.put(t, "gqueue.q.renamed", item("someone", "gqueue"))
	e.put(t, "gqueue.q.a=b", item("a=b", "gqueue"))
	startPool(t, pl)
	e.runOne(t, pl, "after")
	for _, id := range []string{"victim", "someone"} {
		for _, p := range []*pool.Pool{pl, other} {
			if it, err := p.Status(context.Background(), id); err == nil {
				t.Errorf("pool %s: an item %s was made from another's queue entry: %+v", p.Name(), id, it)
			}
		}
	}
	for _, id := range []string{"junk", "stolen", "renamed"} {
		if _, err := pl.Status(context.Background(), id); !errors.Is(err, jetflow.ErrBadRecord) {
			t.Errorf("status of bad queue entry %s: %v, want ErrBadRecord", id, err)
		}
	}
	testserver.Eventually(t, 20*time.Second, "no slot held", func() bool {
		inf, err := pl.Info(context.Background())
		return err == nil && len(inf.Running) == 0
	})
}

// A lease another client wrote, held by no dispatcher, without a TTL and
// expiring in a thousand years: the dispatcher takes over all the same.
func TestGarbageLease(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	pl := e.newPool(t, testConfig("glease"))
	e.put(t, "glease.lease", `{"holder":"squatter","expires":"3026-01-01T00:00:00Z"}`)
	startPool(t, pl)
	e.runOne(t, pl, "after")
}

// Limits and windows at the top of their range do not wrap around into
// times in the past: a debounce window of MaxInt64 waits (it started at
// once), a rate per MaxInt64 holds the second start back without the
// dispatcher rewriting the state at every look.
func TestHugeWindows(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	ctx := context.Background()
	cfg := testConfig("huge")
	cfg.RateLimit = pool.RateLimit{N: 1, Per: math.MaxInt64}
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	e.runOne(t, pl, "first")
	enqueue(t, pl, "held", WorkArgs{})
	deb := e.newPool(t, testConfig("huged"))
	startPool(t, deb)
	enqueue(t, deb, "debounced", WorkArgs{}, pool.WithKey("k"), pool.WithDebounce(math.MaxInt64, 0))
	e.runOne(t, deb, "other")
	entry, err := e.poolsKV(t).Get(ctx, "huge.state")
	if err != nil {
		t.Fatal(err)
	}
	passes := pl.Stats().Passes
	testserver.Eventually(t, 10*time.Second, "ten passes", func() bool { return pl.Stats().Passes >= passes+10 })
	if now, err := e.poolsKV(t).Get(ctx, "huge.state"); err != nil || now.Revision() != entry.Revision() {
		t.Errorf("the state was rewritten while nothing started: revision %d, then %v %v", entry.Revision(), now.Revision(), err)
	}
	for id, p := range map[string]*pool.Pool{"held": pl, "debounced": deb} {
		if it, err := p.Status(ctx, id); err != nil || it.State != jetflow.Pending {
			t.Errorf("item %s: %+v %v, want pending", id, it, err)
		}
	}
}

// A state record that another client filled with thousands of slots of
// items that do not exist: they are given back together, in a few writes
// of the state rather than one each.
func TestGarbageManySlots(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	cfg := testConfig("gmany")
	cfg.MaxParallelism = 2
	pl := e.newPool(t, cfg)
	var b strings.Builder
	now := time.Now().UnixNano()
	for i := range 5000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"ghost-%d":{"a":1,"t":%d}`, i, now)
	}
	e.put(t, "gmany.state", `{"max":2,"running":{`+b.String()+`}}`)
	first, err := e.poolsKV(t).Get(context.Background(), "gmany.state")
	if err != nil {
		t.Fatal(err)
	}
	startPool(t, pl)
	e.runOne(t, pl, "after")
	testserver.Eventually(t, 30*time.Second, "the garbage slots are given back", func() bool {
		inf, err := pl.Info(context.Background())
		return err == nil && len(inf.Running) == 0
	})
	last, err := e.poolsKV(t).Get(context.Background(), "gmany.state")
	if err != nil {
		t.Fatal(err)
	}
	if w := last.Revision() - first.Revision(); w > 500 {
		t.Errorf("%d writes to the bucket to give back 5000 slots", w)
	}
}

// The state record deleted or purged by another client: the running
// dispatcher makes it again, and New opens the pool (it looped for good:
// the create expected no message, and the delete marker is one).
func TestGarbageStateDeleted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	cfg := testConfig("gdel")
	cfg.MaxParallelism = 3
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	e.runOne(t, pl, "before")
	ctx := context.Background()
	if err := e.poolsKV(t).Delete(ctx, "gdel.state"); err != nil {
		t.Fatal(err)
	}
	e.runOne(t, pl, "after-delete")
	if err := e.poolsKV(t).Purge(ctx, "gdel.state"); err != nil {
		t.Fatal(err)
	}
	e.runOne(t, pl, "after-purge")
	if inf, err := pl.Info(ctx); err != nil || inf.MaxParallelism != 3 {
		t.Fatalf("info: %+v %v", inf, err)
	}
	if err := e.poolsKV(t).Delete(ctx, "gdel.state"); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	other := cfg
	other.MaxParallelism = 4
	if _, err := pool.New(nctx, e.P, other); err != nil {
		t.Fatalf("New on a deleted state: %v", err)
	}
}

// The record of a running item removed by another client: its slot is held
// until its run ends (it was given back at once, and a second item ran
// beside it past the limit of 1), then given back.
func TestGarbageRunningItemDeleted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	cfg := testConfig("grun")
	cfg.MaxParallelism = 1
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	ctx := context.Background()
	enqueue(t, pl, "blocked", WorkArgs{Block: true})
	testserver.Eventually(t, 10*time.Second, "the first item running", func() bool { return e.tr.startedKey("blocked") })
	if err := e.poolsKV(t).Delete(ctx, "grun.i.blocked"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	enqueue(t, pl, "second", WorkArgs{})
	// Three times the grace for the periodic check to give the slot back.
	testserver.Eventually(t, 10*time.Second, "the second item starting, or three times the grace", func() bool {
		return e.tr.startedKey("second") || time.Since(deleted) > 3*cfg.ReconcileGrace
	})
	if e.tr.startedKey("second") {
		t.Fatal("the second item started while the first ran: the limit is 1")
	}
	e.tr.unblock("blocked")
	if it := e.waitFinished(t, pl, []string{"second"})["second"]; it.State != jetflow.Success {
		t.Fatalf("second: %s %s", it.State, it.Error)
	}
	if m := e.tr.max.Load(); m != 1 {
		t.Errorf("%d ran at once, limit 1", m)
	}
}

// Queue entries of items whose record is garbage: dropped (they were tried
// again every second for good), the record reported by Status.
func TestGarbageQueuedOverBadRecord(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	pl := e.newPool(t, testConfig("gqbad"))
	now := time.Now().UnixNano()
	e.put(t, "gqbad.i.retry", "junk")
	e.put(t, "gqbad.q.retry", fmt.Sprintf(`{"a":2,"r":%d}`, now))
	e.put(t, "gqbad.i.fresh", "junk")
	e.put(t, "gqbad.q.fresh", fmt.Sprintf(`{"a":1,"r":%d,"item":{"id":"fresh","pool":"gqbad","fn":%q,"state":"pending","attempts":0,"maxAttempts":1,"enqueued":"2026-01-01T00:00:00Z"}}`, now, Work.Name()))
	startPool(t, pl)
	e.runOne(t, pl, "after")
	testserver.Eventually(t, 20*time.Second, "the queue entries dropped", func() bool {
		for _, id := range []string{"retry", "fresh"} {
			if _, err := e.poolsKV(t).Get(context.Background(), "gqbad.q."+id); !errors.Is(err, jetstream.ErrKeyNotFound) {
				return false
			}
		}
		return true
	})
	for _, id := range []string{"retry", "fresh"} {
		if _, err := pl.Status(context.Background(), id); !errors.Is(err, jetflow.ErrBadRecord) {
			t.Errorf("status %s: %v, want ErrBadRecord", id, err)
		}
	}
	testserver.Eventually(t, 10*time.Second, "no slot held", func() bool {
		inf, err := pl.Info(context.Background())
		return err == nil && len(inf.Running) == 0
	})
}

// Queue entries the pool cannot read (not JSON, an item of another id, a
// key that is no item id) are resolved by the first CancelAll: each is
// recorded as a failed run (the engine's dead letter, its value as the
// args, the reason as the error) and removed from the queue, reported
// once with jetflow.ErrBadRecord; a second CancelAll reports nothing (it
// reported them at every call). The readable item is canceled as ever.
func TestCancelAllResolvesUnreadableQueueEntriesOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	pl := e.newPool(t, testConfig("gcall"))
	now := time.Now().UnixNano()
	renamed := fmt.Sprintf(`{"a":1,"r":%d,"item":{"id":"someone","pool":"gcall","fn":%q,"state":"pending","attempts":0,"maxAttempts":1,"enqueued":"2026-01-01T00:00:00Z"}}`,
		now, Work.Name())
	bad := map[string]string{"junk": "\xff\xfe{", "renamed": renamed, "a=b": fmt.Sprintf(`{"a":1,"r":%d}`, now)}
	for id, v := range bad {
		e.put(t, "gcall.q."+id, v)
	}
	enqueue(t, pl, "real", WorkArgs{})
	n, err := pl.CancelAll(ctx)
	if n != 1 || !errors.Is(err, jetflow.ErrBadRecord) {
		t.Fatalf("first CancelAll: %d canceled, %v; want 1 and jetflow.ErrBadRecord", n, err)
	}
	for id := range bad {
		if !strings.Contains(err.Error(), "entry "+id) {
			t.Errorf("first CancelAll's error does not name entry %s: %v", id, err)
		}
	}
	if it, err := pl.Status(ctx, "real"); err != nil || it.State != jetflow.Canceled {
		t.Fatalf("real item: %+v %v, want canceled", it, err)
	}
	if n, err := pl.CancelAll(ctx); n != 0 || err != nil {
		t.Fatalf("second CancelAll: %d canceled, %v; want 0 and no error", n, err)
	}
	for id := range bad {
		if _, err := e.poolsKV(t).Get(ctx, "gcall.q."+id); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("queue entry %s still there: %v", id, err)
		}
	}
	// Nothing lost: each entry is a failed run whose error says why.
	page, err := e.P.List(ctx, producer.Filter{State: jetflow.Failed, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]*jetflow.Run{}
	for _, r := range page.Runs {
		if !strings.HasPrefix(r.ID, "dlq-") || r.Pool != "gcall" {
			continue
		}
		for id := range bad {
			if strings.Contains(r.Error, "entry "+id+":") {
				if found[id] != nil {
					t.Errorf("entry %s recorded twice: %s and %s", id, found[id].ID, r.ID)
				}
				found[id] = r
			}
		}
	}
	for id, v := range bad {
		r := found[id]
		switch {
		case r == nil:
			t.Errorf("entry %s: no failed run records it", id)
		case !strings.Contains(r.Error, jetflow.ErrBadRecord.Error()) || !r.Permanent:
			t.Errorf("entry %s: run %s: %q permanent %v", id, r.ID, r.Error, r.Permanent)
		case json.Valid([]byte(v)) && string(r.Args) != v:
			t.Errorf("entry %s: args %s, want the entry %s", id, r.Args, v)
		case !json.Valid([]byte(v)):
			var sum struct{ Base64 []byte }
			if err := json.Unmarshal(r.Args, &sum); err != nil || string(sum.Base64) != v {
				t.Errorf("entry %s: args %s, want the bytes %q kept", id, r.Args, v)
			}
		}
	}
}
