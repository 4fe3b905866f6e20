package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/pool"
)

// keyOfGroup is the keyed tests' Config.Key: the args' group.
var keyOfGroup = pool.KeyOf(func(a WorkArgs) string { return a.Group })

// waitItems waits until every item of ids has its outcome and returns them
// (no callbacks needed).
func waitItems(t *testing.T, pl *pool.Pool, ids []string, within time.Duration) map[string]*pool.Item {
	t.Helper()
	ctx := context.Background()
	out := make(map[string]*pool.Item, len(ids))
	deadline := time.Now().Add(within)
	for {
		for _, id := range ids {
			if out[id] != nil {
				continue
			}
			if it, err := pl.Status(ctx, id); err == nil && it.Finished() {
				out[id] = it
			}
		}
		if len(out) == len(ids) {
			return out
		}
		if time.Now().After(deadline) {
			inf, err := pl.Info(ctx)
			t.Fatalf("%d of %d items finished after %s; pool %+v %v; dispatcher %+v", len(out), len(ids), within, inf, err, pl.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func batch(t *testing.T, pl *pool.Pool, entries []pool.Entry) []string {
	t.Helper()
	var ids []string
	for i := 0; i < len(entries); i += pool.MaxBatch {
		got, err := pl.EnqueueBatch(context.Background(), entries[i:min(len(entries), i+pool.MaxBatch)])
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	return ids
}

// Per-key limit 2 with three workers and two dispatchers (each on its own
// connection, one active): the handlers of one key never run more than 2
// at once (measured in the handlers), each key reaches 2, keys run side by
// side (the pool's 9 slots are used beyond one key's 2), and every item
// succeeds. The pool state reports the running count per key.
func TestKeyLimitAcrossWorkersAndDispatchers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const limit, keys, per = 2, 4, 12
	e.workers(t, 3)
	cfg := testConfig("keylimit")
	cfg.MaxParallelism = 9
	cfg.Key = keyOfGroup
	cfg.KeyLimit = limit
	var pools []*pool.Pool
	for range 2 {
		pl := e.newPool(t, cfg)
		startPool(t, pl)
		pools = append(pools, pl)
	}
	var entries []pool.Entry
	for i := range per {
		for k := range keys {
			g := fmt.Sprintf("g%d", k)
			key := fmt.Sprintf("%s-%d", g, i)
			entries = append(entries, pool.Entry{Call: Work.With(WorkArgs{Key: key, Group: g, N: i, Hold: limit}),
				Options: []pool.Option{pool.WithID(key), onComplete(key)}})
		}
	}
	ids := batch(t, pools[1], entries)
	sawKeys := false
	testserver.Eventually(t, 20*time.Second, "running counts per key in the pool state", func() bool {
		inf, err := pools[0].Info(context.Background())
		if err != nil {
			return false
		}
		for k, n := range inf.RunningByKey {
			if n > limit {
				t.Fatalf("pool state: key %s holds %d slots > %d", k, n, limit)
			}
		}
		sawKeys = len(inf.RunningByKey) >= 2
		return sawKeys
	})
	items := e.waitFinished(t, pools[0], ids)
	for id, it := range items {
		if it.State != jetflow.Success || it.Key == "" {
			t.Errorf("item %s: %s key %q (%s)", id, it.State, it.Key, it.Error)
		}
	}
	e.waitIdle(t, pools[0])
	for k := range keys {
		g := e.tr.group(fmt.Sprintf("g%d", k))
		if got := g.max.Load(); got != limit {
			t.Errorf("key g%d: max concurrent handlers %d, want %d", k, got, limit)
		}
	}
	if got := e.tr.max.Load(); got <= limit {
		t.Errorf("pool-wide max concurrent handlers %d: keys did not run side by side", got)
	}
	if got := e.tr.max.Load(); got > 9 {
		t.Errorf("pool-wide max concurrent handlers %d > 9", got)
	}
}

// CancelInProgress, limit 1: a newer item of the key cancels the running
// one (its handler's context ends with jetflow.ErrCanceled, its record says
// by whom); of a burst of newer items only the newest runs, the others are
// recorded as superseded and never start; another key is not touched.
func TestKeyStrategyCancelInProgress(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 2)
	ctx := context.Background()
	cfg := testConfig("cip")
	cfg.Key = keyOfGroup
	cfg.KeyLimit = 1
	cfg.KeyStrategy = pool.CancelInProgress
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	other := enqueue(t, pl, "other", WorkArgs{Group: "L", Block: true})
	enqueue(t, pl, "c1", WorkArgs{Group: "K", Block: true})
	testserver.Eventually(t, 10*time.Second, "c1 and other running", func() bool {
		return e.tr.startedKey("c1") && e.tr.startedKey("other")
	})
	if inf, err := pl.Info(ctx); err != nil || inf.RunningByKey["K"] != 1 || inf.RunningByKey["L"] != 1 || inf.KeyStrategy != pool.CancelInProgress {
		t.Fatalf("info %+v %v", inf, err)
	}
	enqueue(t, pl, "c2", WorkArgs{Group: "K", Block: true})
	testserver.Eventually(t, 10*time.Second, "c2 running", func() bool { return e.tr.startedKey("c2") })
	// The burst reaches a new dispatcher all at once (items that reach a
	// dispatcher apart are each superseded by the newest waiting then).
	if err := pl.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var burst []pool.Entry
	for _, k := range []string{"c3", "c4", "c5"} {
		burst = append(burst, pool.Entry{Call: Work.With(WorkArgs{Key: k, Group: "K"}), Options: []pool.Option{pool.WithID(k), onComplete(k)}})
	}
	batch(t, pl, burst)
	cfg.ID = "second"
	pl = e.newPool(t, cfg)
	startPool(t, pl)
	items := e.waitFinished(t, pl, []string{"c1", "c2", "c3", "c4", "c5"})
	for id, by := range map[string]string{"c1": "c2", "c2": "c5", "c3": "c5", "c4": "c5"} {
		it := items[id]
		if it.State != jetflow.Canceled || it.SupersededBy != by ||
			it.Error != jetflow.ErrCanceled.Error()+": superseded by newer item "+by+` of key "K" (cancel-in-progress)` {
			t.Errorf("item %s: %s superseded by %q (%s); want canceled by %s", id, it.State, it.SupersededBy, it.Error, by)
		}
	}
	if it := items["c5"]; it.State != jetflow.Success {
		t.Errorf("c5: %s (%s)", it.State, it.Error)
	}
	for _, k := range []string{"c3", "c4"} {
		if e.tr.startedKey(k) {
			t.Errorf("%s started, want superseded before it started", k)
		}
	}
	e.tr.mu.Lock()
	causes := []error{e.tr.causes["c1"], e.tr.causes["c2"]}
	e.tr.mu.Unlock()
	for i, c := range causes {
		if !errors.Is(c, jetflow.ErrCanceled) {
			t.Errorf("c%d: context cause %v, want jetflow.ErrCanceled", i+1, c)
		}
	}
	// The run of the running item canceled goes through the cancel path.
	if r, err := e.P.Get(ctx, items["c1"].RunID); err != nil || r.State != jetflow.Canceled {
		t.Errorf("run of c1: %+v %v", r, err)
	}
	for id, cs := range e.tr.completions() {
		if len(cs) != 1 {
			t.Errorf("item %s: %d callbacks", id, len(cs))
		}
	}
	if it, err := pl.Status(ctx, other); err != nil || it.State != jetflow.InProgress {
		t.Fatalf("other key: %+v %v, want still running", it, err)
	}
	e.tr.unblock("other")
	e.waitFinished(t, pl, []string{other})
	if s := pl.Stats(); s.Superseded != 3 {
		t.Errorf("second dispatcher counted %d superseded, want 3", s.Superseded)
	}
}

// DropNewest, limit 1: while the key runs an item, its new items are
// recorded as canceled ("dropped") and never start, with their on-complete
// callback; another key runs; once the key is free, a new item runs.
func TestKeyStrategyDropNewest(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 2)
	cfg := testConfig("drop")
	cfg.Key = keyOfGroup
	cfg.KeyLimit = 1
	cfg.KeyStrategy = pool.DropNewest
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	enqueue(t, pl, "d1", WorkArgs{Group: "K", Block: true})
	testserver.Eventually(t, 10*time.Second, "d1 running", func() bool { return e.tr.startedKey("d1") })
	ids := []string{enqueue(t, pl, "d2", WorkArgs{Group: "K"}), enqueue(t, pl, "d3", WorkArgs{Group: "K"}),
		enqueue(t, pl, "o1", WorkArgs{Group: "L"})}
	items := e.waitFinished(t, pl, ids)
	for _, id := range []string{"d2", "d3"} {
		it := items[id]
		if it.State != jetflow.Canceled || !strings.Contains(it.Error, "dropped") || it.Attempts != 0 {
			t.Errorf("item %s: %s after %d attempts (%s), want dropped", id, it.State, it.Attempts, it.Error)
		}
		if cs := e.tr.completions()[id]; len(cs) != 1 || cs[0].Run.State != jetflow.Canceled {
			t.Errorf("callbacks of %s: %+v", id, cs)
		}
	}
	if items["o1"].State != jetflow.Success {
		t.Errorf("o1: %s", items["o1"].State)
	}
	e.tr.unblock("d1")
	e.waitFinished(t, pl, []string{"d1"})
	d4 := enqueue(t, pl, "d4", WorkArgs{Group: "K"})
	if it := e.waitFinished(t, pl, []string{d4})[d4]; it.State != jetflow.Success {
		t.Errorf("d4: %s (%s)", it.State, it.Error)
	}
	for _, k := range []string{"d2", "d3"} {
		if e.tr.startedKey(k) {
			t.Errorf("%s started", k)
		}
	}
	if s := pl.Stats(); s.Dropped != 2 {
		t.Errorf("dispatcher counted %d dropped, want 2", s.Dropped)
	}
}

// Fairness: one slot, key A with 400 items queued and running one at a
// time; B's 10 items, enqueued afterwards, all start while A still has
// most of its queue: keys take turns, so at most one A start (plus the one
// already granted) comes between two B starts.
func TestKeyFairness(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	cfg := testConfig("fair")
	cfg.MaxParallelism = 1
	cfg.Key = keyOfGroup
	pl := e.newPool(t, cfg)
	var as []pool.Entry
	for i := range 400 {
		k := fmt.Sprintf("a-%d", i)
		as = append(as, pool.Entry{Call: Work.With(WorkArgs{Key: k, Group: "A", N: i}), Options: []pool.Option{pool.WithID(k)}})
	}
	batch(t, pl, as)
	startPool(t, pl)
	testserver.Eventually(t, 20*time.Second, "A started", func() bool { return len(e.tr.started()) >= 5 })
	var bs []pool.Entry
	for i := range 10 {
		k := fmt.Sprintf("b-%d", i)
		bs = append(bs, pool.Entry{Call: Work.With(WorkArgs{Key: k, Group: "B", N: i}), Options: []pool.Option{pool.WithID(k)}})
	}
	before := len(e.tr.started())
	bids := batch(t, pl, bs)
	waitItems(t, pl, bids, 30*time.Second)
	st := e.tr.started()
	lastB, aBetween, bSeen := -1, 0, 0
	for i, s := range st[before:] {
		if s.group == "B" {
			lastB = before + i
			bSeen++
		}
	}
	for _, s := range st[before:lastB] {
		if s.group == "A" {
			aBetween++
		}
	}
	if bSeen != 10 {
		t.Fatalf("%d B starts, want 10", bSeen)
	}
	// Turns: B, A, B, A, ... after the A items granted before B arrived
	// (one slot: at most one, and one more in the pass B arrived in).
	if aBetween > 10+2 {
		t.Fatalf("%d A items started between B's enqueue and B's last start, want at most 12", aBetween)
	}
	if aLeft := 400 - (lastB + 1 - bSeen); aLeft < 300 {
		t.Fatalf("only %d A items were still waiting when B finished starting", aLeft)
	}
	var bOrder []int
	for _, s := range st {
		if s.group == "B" {
			bOrder = append(bOrder, s.n)
		}
	}
	if !slices.IsSorted(bOrder) {
		t.Errorf("B started in order %v, want enqueue order", bOrder)
	}
	t.Logf("A starts between B's enqueue and its last start: %d", aBetween)
	if _, err := pl.CancelAll(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Weights: with weight 3 for key H and 1 for key L, both with 40 items
// waiting and one slot, H gets three starts for each of L's while both wait.
func TestKeyWeights(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	cfg := testConfig("weights")
	cfg.MaxParallelism = 1
	cfg.Key = keyOfGroup
	cfg.KeyWeight = func(k string) int {
		if k == "H" {
			return 3
		}
		return 1
	}
	pl := e.newPool(t, cfg)
	var es []pool.Entry
	for i := range 40 {
		for _, g := range []string{"H", "L"} {
			k := fmt.Sprintf("%s-%d", g, i)
			es = append(es, pool.Entry{Call: Work.With(WorkArgs{Key: k, Group: g, N: i}), Options: []pool.Option{pool.WithID(k)}})
		}
	}
	ids := batch(t, pl, es)
	startPool(t, pl)
	waitItems(t, pl, ids, 60*time.Second)
	st := e.tr.started()
	h := 0
	for _, s := range st[:40] {
		if s.group == "H" {
			h++
		}
	}
	// The first 40 starts: 30 of H and 10 of L (one turn apart at most).
	if h < 29 || h > 31 {
		t.Fatalf("H has %d of the first 40 starts, want 30 (weights 3:1)", h)
	}
}

// Debounce: 1000 items of one key within the window make exactly one run,
// with the last item's args; the 999 others are recorded as canceled,
// "debounced into" the last one. A second key debounces on its own.
//
// The exact count needs every item of a key to reach the dispatcher within
// the window of the one before it: the window (10 s) is far longer than
// the burst takes to enqueue and be watched, even on a loaded machine (the
// time it took is reported on failure).
func TestKeyDebounce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 2)
	const window = 10 * time.Second
	cfg := testConfig("deb")
	cfg.Key = keyOfGroup
	cfg.Debounce = pool.Debounce{Window: window, MaxWait: time.Minute}
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	var es []pool.Entry
	for i := range 1000 {
		k := fmt.Sprintf("k-%d", i)
		es = append(es, pool.Entry{Call: Work.With(WorkArgs{Key: k, Group: "K", N: i}), Options: []pool.Option{pool.WithID(k)}})
	}
	for i := range 3 {
		k := fmt.Sprintf("l-%d", i)
		es = append(es, pool.Entry{Call: Work.With(WorkArgs{Key: k, Group: "L", N: i}), Options: []pool.Option{pool.WithID(k)}})
	}
	began := time.Now()
	ids := batch(t, pl, es)
	enqueuing := time.Since(began) // for the failure messages, not asserted
	items := waitItems(t, pl, ids, 60*time.Second)
	e.waitIdle(t, pl)
	for _, last := range []string{"k-999", "l-2"} {
		if it := items[last]; it.State != jetflow.Success || it.Attempts != 1 {
			t.Fatalf("%s: %s after %d attempts (%s)", last, it.State, it.Attempts, it.Error)
		}
	}
	for id, it := range items {
		if id == "k-999" || id == "l-2" {
			continue
		}
		want := "k-999"
		if strings.HasPrefix(id, "l-") {
			want = "l-2"
		}
		if it.State != jetflow.Canceled || it.SupersededBy != want || it.Error != jetflow.ErrCanceled.Error()+": debounced into "+want {
			t.Fatalf("item %s: %s superseded by %q (%s), want debounced into %s (burst enqueued in %s, window %s)",
				id, it.State, it.SupersededBy, it.Error, want, enqueuing, window)
		}
	}
	st := e.tr.started()
	if len(st) != 2 {
		t.Fatalf("%d runs started, want 2 (one per key; burst enqueued in %s, window %s): %+v", len(st), enqueuing, window, st)
	}
	for _, s := range st {
		if last := s.group == "K" && s.n == 999 || s.group == "L" && s.n == 2; !last {
			t.Errorf("run of %s with args n=%d, want the last item's", s.group, s.n)
		}
	}
	if got := pl.Stats().Debounced; got != 999+2 {
		t.Errorf("dispatcher counted %d debounced, want 1001", got)
	}
}

// Debounce's max wait: items of one key keep arriving more often than the
// window, longer than the max wait; runs still start while they arrive
// (without a max wait none would before the burst ends), every item is
// either run or recorded as debounced into a run, and the burst still
// collapses: about one run per max wait, most items debounced.
func TestKeyDebounceMaxWait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	ctx := context.Background()
	const burst, window, maxWait = 5 * time.Second, time.Second, 1500 * time.Millisecond
	cfg := testConfig("debmax")
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	var ids []string
	startedDuringBurst := false
	// gaps counts the pauses between two enqueues long enough (half the
	// window, generously) that a loaded machine may have let the window
	// pass: each may split a burst, one run more.
	gaps := 0
	began := time.Now()
	deadline := began.Add(burst)
	// The burst goes on past its 5 s until a run has started, for up to a
	// minute: a loaded machine may take longer than the 3.5 s left after
	// the first max wait to grant a run and start its handler. Without a
	// max wait none starts however long the burst lasts.
	giveUp := began.Add(time.Minute)
	last := began
	for i := 0; time.Now().Before(deadline) || !startedDuringBurst && time.Now().Before(giveUp); i++ {
		// Looked at before the enqueue: an item enqueued after a run
		// started is not that run's, and another run follows.
		if len(e.tr.started()) > 0 {
			startedDuringBurst = true
		}
		k := fmt.Sprintf("m-%d", i)
		if _, err := pl.Enqueue(ctx, Work.With(WorkArgs{Key: k, Group: "M", N: i}), pool.WithID(k), pool.WithKey("M"),
			pool.WithDebounce(window, maxWait)); err != nil {
			t.Fatal(err)
		}
		if now := time.Now(); i > 0 && now.Sub(last) > window/2 {
			gaps++
		}
		last = time.Now()
		ids = append(ids, k)
		time.Sleep(20 * time.Millisecond) // the arrival pace of the burst, not a wait for a condition
	}
	took := last.Sub(began)
	items := waitItems(t, pl, ids, 30*time.Second)
	if !startedDuringBurst {
		t.Fatal("no run started while items kept arriving: max wait not applied")
	}
	runs := map[string]bool{}
	for _, s := range e.tr.started() {
		runs[s.key] = true
	}
	// Each debounced item names the item that superseded it; following
	// the names leads to a run.
	for id, it := range items {
		cur := it
		for hops := 0; cur != nil && !runs[cur.ID] && hops <= len(items); hops++ {
			if cur.State != jetflow.Canceled || !strings.HasSuffix(cur.Error, "debounced into "+cur.SupersededBy) {
				t.Fatalf("item %s: %s superseded by %q (%s)", cur.ID, cur.State, cur.SupersededBy, cur.Error)
			}
			cur = items[cur.SupersededBy]
		}
		if cur == nil || !runs[cur.ID] || cur.State != jetflow.Success {
			t.Errorf("item %s: neither run nor debounced into a run (%+v)", id, cur)
		}
	}
	if len(runs) < 2 {
		t.Errorf("%d runs for %d items over 5 s with max wait 1.5 s, want at least 2", len(runs), len(ids))
	}
	// Each run's burst lasts max wait unless a pause let the window pass:
	// at most one run per max wait of the burst, one for its tail, and one
	// more of slack, plus one per pause seen.
	if limit := int(took/maxWait) + 2 + gaps; len(runs) > limit {
		t.Errorf("%d runs for %d items enqueued over %s with window %s and max wait %s (%d pauses), want at most %d: not debounced",
			len(runs), len(ids), took, window, maxWait, gaps, limit)
	}
	if st := e.tr.started(); len(st) != len(runs) {
		t.Errorf("%d starts for %d items run: an item ran twice", len(st), len(runs))
	}
	// Every item that did not run is recorded canceled, debounced into
	// another item; that is most of them.
	debounced := 0
	for id, it := range items {
		if runs[id] {
			continue
		}
		if it.State == jetflow.Canceled && it.SupersededBy != "" && it.SupersededBy != id &&
			it.Error == jetflow.ErrCanceled.Error()+": debounced into "+it.SupersededBy {
			debounced++
		}
	}
	if debounced != len(ids)-len(runs) || debounced*2 <= len(ids) {
		t.Errorf("%d of %d items recorded as debounced (%d ran), want all those not run, and most", debounced, len(ids), len(runs))
	}
	e.waitIdle(t, pl)
	if got := pl.Stats().Debounced; got != int64(debounced) {
		t.Errorf("dispatcher counted %d debounced, want %d", got, debounced)
	}
}

// Throttle: 2 starts per second per key. Key T's 8 items never have 3
// grants within one second; key U's items are not held by T's throttle
// (they start before T's last); nothing is dropped.
func TestKeyThrottle(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 2)
	const N, per = 2, time.Second
	cfg := testConfig("throttle")
	cfg.Key = keyOfGroup
	cfg.KeyRate = pool.RateLimit{N: N, Per: per}
	pl := e.newPool(t, cfg)
	var es []pool.Entry
	for i := range 8 {
		k := fmt.Sprintf("t-%d", i)
		es = append(es, pool.Entry{Call: Work.With(WorkArgs{Key: k, Group: "T", N: i}), Options: []pool.Option{pool.WithID(k)}})
	}
	for i := range 2 {
		k := fmt.Sprintf("u-%d", i)
		es = append(es, pool.Entry{Call: Work.With(WorkArgs{Key: k, Group: "U", N: i}), Options: []pool.Option{pool.WithID(k)}})
	}
	ids := batch(t, pl, es)
	startPool(t, pl)
	items := waitItems(t, pl, ids, 60*time.Second)
	var grants []time.Time
	var lastT, lastU time.Time
	for _, it := range items {
		if it.State != jetflow.Success {
			t.Errorf("item %s: %s", it.ID, it.State)
		}
		if it.Key == "T" {
			grants = append(grants, it.Started)
			if it.Started.After(lastT) {
				lastT = it.Started
			}
		} else if it.Started.After(lastU) {
			lastU = it.Started
		}
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].Before(grants[j]) })
	for i := 0; i+N < len(grants); i++ {
		if d := grants[i+N].Sub(grants[i]); d <= per {
			t.Fatalf("grants %d and %d of key T are %s apart: %d starts within %s", i, i+N, d, N+1, per)
		}
	}
	if !lastU.Before(lastT) {
		t.Errorf("key U's last start %s is not before key T's last %s: held by T's throttle", lastU, lastT)
	}
	if inf, err := pl.Info(context.Background()); err != nil || inf.KeyRate != cfg.KeyRate {
		t.Errorf("info %+v %v", inf, err)
	}
}

// Bad keys and key settings are refused with typed errors; nothing is
// enqueued.
func TestKeyInvalid(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	for _, cfg := range []pool.Config{
		{Name: "k", KeyLimit: -1},
		{Name: "k", KeyLimit: 1, KeyStrategy: "latest"},
		{Name: "k", KeyStrategy: pool.DropNewest},
		{Name: "k", KeyRate: pool.RateLimit{N: 1}},
		{Name: "k", Debounce: pool.Debounce{Window: time.Second, MaxWait: time.Millisecond}},
	} {
		if _, err := pool.New(ctx, e.P, cfg); !errors.Is(err, pool.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	boom := errors.New("no customer")
	pl, err := pool.New(ctx, e.P, pool.Config{Name: "k", Key: func(json.RawMessage) (string, error) { return "", boom }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pl.Enqueue(ctx, Work.With(WorkArgs{})); !errors.Is(err, pool.ErrInvalidKey) || !errors.Is(err, boom) {
		t.Errorf("key function error: %v", err)
	}
	if _, err := pl.Enqueue(ctx, Work.With(WorkArgs{}), pool.WithKey(strings.Repeat("x", pool.MaxKeyLen+1))); !errors.Is(err, pool.ErrInvalidKey) {
		t.Errorf("long key: %v", err)
	}
	// Keys that are not UTF-8 would be stored as U+FFFD, one key for two
	// tenants: refused.
	for _, k := range []string{"\xff", "\xfe", "tenant-\xc3"} {
		if _, err := pl.Enqueue(ctx, Work.With(WorkArgs{}), pool.WithKey(k)); !errors.Is(err, pool.ErrInvalidKey) {
			t.Errorf("key %+q: %v", k, err)
		}
	}
	if _, err := pl.Enqueue(ctx, Work.With(WorkArgs{}), pool.WithKey("ok"), pool.WithDebounce(-time.Second, 0)); !errors.Is(err, pool.ErrInvalidConfig) {
		t.Errorf("bad debounce: %v", err)
	}
	if err := pl.SetKeyLimit(ctx, 1, "newest"); !errors.Is(err, pool.ErrInvalidConfig) {
		t.Errorf("SetKeyLimit with a bad strategy: %v", err)
	}
	// WithKey overrides the failing function.
	id, err := pl.Enqueue(ctx, Work.With(WorkArgs{}), pool.WithKey("c-42"))
	if err != nil {
		t.Fatal(err)
	}
	if it, err := pl.Status(ctx, id); err != nil || it.Key != "c-42" {
		t.Fatalf("status %+v %v", it, err)
	}
	if err := pl.SetKeyLimit(ctx, 3, pool.DropNewest); err != nil {
		t.Fatal(err)
	}
	if inf, err := pl.Info(ctx); err != nil || inf.KeyLimit != 3 || inf.KeyStrategy != pool.DropNewest {
		t.Fatalf("info %+v %v", inf, err)
	}
}

// A debounced burst survives a dispatcher handover: the first dispatcher
// holds the burst and stops before the window ends; the next one collapses
// it again into exactly one run of the last item.
//
// The first dispatcher must see the burst and stop within the window: the
// window (12 s) is longer than the wait for it to hold the burst (10 s at
// most) and far longer than the burst takes to enqueue, even on a loaded
// machine (the time it took is reported on failure).
func TestKeyDebounceAcrossDispatchers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	ctx := context.Background()
	const window = 12 * time.Second
	cfg := testConfig("debfail")
	cfg.Key = keyOfGroup
	cfg.Debounce = pool.Debounce{Window: window}
	a := e.newPool(t, cfg)
	startPool(t, a)
	var es []pool.Entry
	for i := range 200 {
		k := fmt.Sprintf("f-%d", i)
		es = append(es, pool.Entry{Call: Work.With(WorkArgs{Key: k, Group: "F", N: i}), Options: []pool.Option{pool.WithID(k)}})
	}
	began := time.Now()
	ids := batch(t, a, es)
	testserver.Eventually(t, 10*time.Second, "the burst held by the first dispatcher", func() bool {
		s := a.Stats()
		return s.Loaded && s.Queued == 1
	})
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	held := time.Since(began) // for the failure messages, not asserted
	if n := len(e.tr.started()); n != 0 {
		t.Fatalf("%d runs started within the window (%s; enqueued, held and stopped in %s)", n, window, held)
	}
	if s := a.Stats(); s.Started != 0 || s.Debounced != 0 {
		t.Fatalf("first dispatcher started %d and recorded %d debounced before the window ended", s.Started, s.Debounced)
	}
	cfg.ID = "second"
	b := e.newPool(t, cfg)
	startPool(t, b)
	items := waitItems(t, b, ids, 30*time.Second)
	for id, it := range items {
		if id == "f-199" {
			if it.State != jetflow.Success {
				t.Errorf("f-199: %s (%s)", it.State, it.Error)
			}
			continue
		}
		if it.State != jetflow.Canceled || it.SupersededBy != "f-199" {
			t.Errorf("item %s: %s superseded by %q (%s)", id, it.State, it.SupersededBy, it.Error)
		}
	}
	e.waitIdle(t, b)
	if st := e.tr.started(); len(st) != 1 || st[0].n != 199 {
		t.Fatalf("runs %+v, want one, of f-199", st)
	}
	if s := b.Stats(); s.Started != 1 || s.Debounced != 199 {
		t.Errorf("second dispatcher started %d and counted %d debounced, want 1 and 199", s.Started, s.Debounced)
	}
}

// Canceling the waiting last item of a debounced burst cancels the burst:
// nothing runs, each earlier item is recorded as debounced into it, and
// every item's on-complete runs once.
func TestKeyDebounceCancelWinner(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	ctx := context.Background()
	cfg := testConfig("debcancel")
	cfg.Key = keyOfGroup
	cfg.Debounce = pool.Debounce{Window: time.Minute}
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	var ids []string
	for i := range 5 {
		ids = append(ids, enqueue(t, pl, fmt.Sprintf("w-%d", i), WorkArgs{Group: "W", N: i}))
	}
	// All four collapsed into w-4 (Queued 1 alone may be w-0 seen first).
	testserver.Eventually(t, 10*time.Second, "the burst collapsed", func() bool {
		s := pl.Stats()
		return s.Loaded && s.Queued == 1 && s.Collapsed == 4
	})
	if err := pl.Cancel(ctx, "w-4"); err != nil {
		t.Fatal(err)
	}
	items := e.waitFinished(t, pl, ids)
	for id, it := range items {
		if it.State != jetflow.Canceled {
			t.Errorf("item %s: %s", id, it.State)
		}
		if id != "w-4" && it.SupersededBy != "w-4" {
			t.Errorf("item %s: superseded by %q (%s)", id, it.SupersededBy, it.Error)
		}
	}
	for id, cs := range e.tr.completions() {
		if len(cs) != 1 {
			t.Errorf("item %s: %d callbacks", id, len(cs))
		}
	}
	if n := len(e.tr.started()); n != 0 {
		t.Fatalf("%d runs started", n)
	}
}
