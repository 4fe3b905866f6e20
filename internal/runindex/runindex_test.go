package runindex_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type env struct {
	t    testing.TB
	ts   *testserver.Env
	runs *engine.Runs
	st   *kv.Store
	cfg  streams.Config
	n    int
}

func setup(t *testing.T) *env { return setupWith(t, streams.Config{}) }

func setupWith(t testing.TB, cfg streams.Config) *env {
	ts := testserver.Start(t)
	ctx := context.Background()
	if err := streams.Provision(ctx, ts.JS, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Open(ctx, ts.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ts: ts, runs: engine.New(st), st: st, cfg: cfg}
}

// write writes n records of fn in state s through the engine (published
// asynchronously, each a create), and returns their ids in write order.
func (e *env) write(fn string, s jetflow.State, n int) []string {
	e.t.Helper()
	step := map[jetflow.State]engine.Step{jetflow.Pending: engine.Schedule, jetflow.InProgress: engine.Open,
		jetflow.Success: engine.Succeed, jetflow.Failed: engine.Fail, jetflow.Canceled: engine.Cancel}[s]
	var ids []string
	wait := func() {
		select {
		case <-e.ts.JS.PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			e.t.Fatal("writes not acknowledged")
		}
	}
	for i := range n {
		if i%1000 == 999 {
			wait()
		}
		e.n++
		id := fmt.Sprintf("r%06d", e.n)
		now := time.Now().UTC()
		r := &jetflow.Run{ID: id, Name: fn, State: s, ScheduledTime: now, CreationTime: now}
		if s.Terminal() {
			r.CompletedTime = now
		}
		m, err := e.runs.WriteMsg(step, engine.None, r, 0)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.ts.JS.PublishMsgAsync(m); err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	wait()
	return ids
}

// change moves run id to state to with step.
func (e *env) change(id string, step engine.Step, to jetflow.State) {
	e.t.Helper()
	_, err := e.runs.Change(context.Background(), step, id, func(r *jetflow.Run) *jetflow.Run {
		next := *r
		next.State = to
		if to.Terminal() {
			next.CompletedTime = time.Now().UTC()
		}
		return &next
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// startIndexer runs an indexer until the returned stop is called.
func (e *env) startIndexer(name string) (*runindex.Indexer, func()) {
	ix := runindex.New(e.ts.JS, e.cfg)
	ix.Name, ix.Every = name, 50*time.Millisecond
	if testing.Verbose() {
		ix.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ix.Run(ctx) }()
	stop := func() { cancel(); <-done }
	e.t.Cleanup(stop)
	return ix, stop
}

// caughtUp waits until the checkpoint reflects every write.
func (e *env) caughtUp() {
	e.t.Helper()
	rs, err := e.ts.JS.Stream(context.Background(), streams.KVStream(e.cfg.WithDefaults().RunsBucket()))
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := rs.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	last := info.State.LastSeq
	testserver.Eventually(e.t, 30*time.Second, "checkpoint at the runs stream's end", func() bool {
		cp, err := runindex.ReadCheckpoint(context.Background(), e.ts.JS, e.cfg)
		return err == nil && !cp.Rebuilding && cp.Seq >= last
	})
}

// sameCounts checks the index's counts against a scan of every record.
func (e *env) sameCounts(fns ...string) {
	e.t.Helper()
	rd := runindex.NewReader(e.st)
	for _, fn := range append([]string{""}, fns...) {
		got, err := rd.Counts(context.Background(), fn)
		if err != nil {
			e.t.Fatal(err)
		}
		want, err := rd.CountsScan(context.Background(), fn)
		if err != nil {
			e.t.Fatal(err)
		}
		if got.Source != "index" || got.Counts != want.Counts {
			e.t.Fatalf("function %q: index counts %+v (%s), scan %+v", fn, got.Counts, got.Source, want.Counts)
		}
	}
}

func TestCountsExactAcrossIndexerRestart(t *testing.T) {
	e := setup(t)
	e.write("a", jetflow.Success, 300)
	failed := e.write("a", jetflow.Failed, 7)
	e.write("b", jetflow.Canceled, 5)
	pend := e.write("b", jetflow.Pending, 40)
	running := e.write("a", jetflow.InProgress, 12)
	_, stop := e.startIndexer("one")
	e.caughtUp()
	e.sameCounts("a", "b")
	rd := runindex.NewReader(e.st)
	c, _ := rd.Counts(context.Background(), "a")
	if c.Success != 300 || c.Failed != int64(len(failed)) || c.InProgress != 12 || c.Pending != 0 {
		t.Fatalf("counts of a %+v", c.Counts)
	}
	// Stopped: runs change once each while no indexer reads; the next
	// resumes from the checkpoint, without a recount.
	stop()
	for _, id := range pend[30:] {
		e.change(id, engine.Claim, jetflow.InProgress)
	}
	e.write("b", jetflow.Failed, 2)
	ix1b, stop := e.startIndexer("one-again")
	e.caughtUp()
	e.sameCounts("a", "b")
	if n := ix1b.Stats().Rebuilds; n != 0 {
		t.Fatalf("resumed with %d recounts", n)
	}
	// Stopped mid-way: runs move on (twice each: claimed, then ended)
	// while no indexer reads: what the checkpoint counted for them is no
	// longer in the stream (the bucket keeps one revision), so the next
	// indexer recounts, and the counts are exact again.
	stop()
	for i, id := range pend[:20] {
		e.change(id, engine.Claim, jetflow.InProgress)
		if i%2 == 0 {
			e.change(id, engine.Succeed, jetflow.Success)
		} else {
			e.change(id, engine.Fail, jetflow.Failed)
		}
	}
	for _, id := range running[:5] {
		e.change(id, engine.Cancel, jetflow.Canceled)
	}
	e.write("c", jetflow.Pending, 9)
	ix2, _ := e.startIndexer("two")
	e.caughtUp()
	e.sameCounts("a", "b", "c")
	c, _ = rd.Counts(context.Background(), "b")
	if c.Pending != 10 || c.InProgress != 10 || c.Success != 10 || c.Failed != 12 || c.Canceled != 5 {
		t.Fatalf("counts of b after the restart %+v", c.Counts)
	}
	// Live changes with the indexer running.
	for _, id := range pend[20:30] {
		e.change(id, engine.Claim, jetflow.InProgress)
	}
	e.caughtUp()
	e.sameCounts("a", "b", "c")
	if n := ix2.Stats().Rebuilds; n != 1 {
		t.Fatalf("%d recounts after runs changed twice unread, want 1", n)
	}
}

func TestExpiredRecordsLeaveTheCounts(t *testing.T) {
	e := setupWith(t, streams.Config{Retention: 3 * time.Second})
	ix, _ := e.startIndexer("one")
	e.write("a", jetflow.Success, 5)
	e.write("a", jetflow.Pending, 2)
	e.caughtUp()
	rd := runindex.NewReader(e.st)
	c, err := rd.Counts(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if c.Pending != 2 || c.Success > 5 {
		t.Fatalf("counts %+v", c.Counts)
	}
	// The terminal records expire (Nats-TTL); their slots drop out, the
	// pending runs stay.
	testserver.Eventually(t, 30*time.Second, "expired runs uncounted", func() bool {
		c, err := rd.Counts(context.Background(), "a")
		s, serr := rd.CountsScan(context.Background(), "a")
		return err == nil && serr == nil && c.Counts == s.Counts && c.Success == 0 && c.Pending == 2
	})
	if n := ix.Stats().Rebuilds; n != 1 { // the first count only
		t.Fatalf("%d recounts, want 1 (the first)", n)
	}
}

func TestListPagesByStateAndFunctionNewestFirst(t *testing.T) {
	e := setup(t)
	e.write("x", jetflow.Success, 50)
	fx := e.write("x", jetflow.Failed, 5)
	e.write("y", jetflow.Success, 50)
	fy := e.write("y", jetflow.Failed, 5)
	e.startIndexer("one")
	e.caughtUp()
	// Indexed, then more writes not in the checkpoint yet still listed.
	rd := runindex.NewReader(e.st)
	want := append(append([]string{}, fx...), fy...)
	reverse := func(s []string) []string {
		out := make([]string, len(s))
		for i := range s {
			out[len(s)-1-i] = s[i]
		}
		return out
	}
	check := func(q runindex.Query, want []string) {
		t.Helper()
		var got []string
		var pages []runindex.Page
		for {
			p, err := rd.List(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, p)
			for _, r := range p.Runs {
				got = append(got, r.ID)
			}
			if p.Next == "" {
				break
			}
			q.After, q.Before = p.Next, ""
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%+v: got %v, want %v", q, got, want)
		}
		// Back from the last page to the first.
		for i := len(pages) - 1; i > 0; i-- {
			q.After, q.Before = "", pages[i].Prev
			p, err := rd.List(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(ids(p.Runs)) != fmt.Sprint(ids(pages[i-1].Runs)) {
				t.Fatalf("%+v: page %d backward %v, forward %v", q, i-1, ids(p.Runs), ids(pages[i-1].Runs))
			}
		}
	}
	check(runindex.Query{State: jetflow.Failed, Limit: 3}, reverse(want))
	check(runindex.Query{State: jetflow.Failed, Function: "y", Limit: 2}, reverse(fy))
	all := e.write("y", jetflow.Pending, 3) // written after the checkpoint: the tail
	check(runindex.Query{Function: "y", Limit: 4}, reverse(append(idsOf(56, 110), all...)))
}

// idsOf names the runs written n-th to m-th.
func idsOf(n, m int) []string {
	var out []string
	for i := n; i <= m; i++ {
		out = append(out, fmt.Sprintf("r%06d", i))
	}
	return out
}

func ids(rs []*jetflow.Run) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func TestPageCostFollowsThePageNotTheBucket(t *testing.T) {
	e := setup(t)
	e.write("bulk", jetflow.Success, 20000)
	failed := e.write("bulk", jetflow.Failed, 10)
	e.write("bulk", jetflow.Success, 2000)
	e.startIndexer("one")
	e.caughtUp()
	rd := runindex.NewReader(e.st)
	before := runindex.MessagesRead()
	p, err := rd.List(context.Background(), runindex.Query{State: jetflow.Failed, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	n := runindex.MessagesRead() - before
	if len(p.Runs) != 10 || p.Runs[0].ID != failed[9] {
		t.Fatalf("page %v", ids(p.Runs))
	}
	// 10 index entries and 10 records, not 22,010.
	if n > 40 {
		t.Fatalf("a page of 10 failed runs read %d messages", n)
	}
	t.Logf("a page of 10 failed runs among 22,010 read %d messages", n)

	// Many failed runs far below the top: the window that reaches them
	// holds thousands; only its upper part is read.
	more := e.write("bulk", jetflow.Failed, 3000)
	e.write("bulk", jetflow.Success, 20000)
	e.caughtUp()
	before = runindex.MessagesRead()
	p, err = rd.List(context.Background(), runindex.Query{State: jetflow.Failed, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	n = runindex.MessagesRead() - before
	if len(p.Runs) != 10 || p.Runs[0].ID != more[len(more)-1] || p.Runs[9].ID != more[len(more)-10] {
		t.Fatalf("page %v", ids(p.Runs))
	}
	if n > 70 {
		t.Fatalf("a page of 10 among 3,010 failed runs under 20,000 others read %d messages", n)
	}
	t.Logf("a page of 10 among 3,010 failed runs under 20,000 others read %d messages", n)
}

// Pages read while the indexer lags (from the runs stream's tail) and
// after it has caught up (from the index) follow on from each other, both
// ways: the writes of two functions interleaved, each run once, newest
// first.
func TestPagesAcrossTheIndexCatchingUp(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	all := e.write("x", jetflow.Failed, 3)
	_, stop := e.startIndexer("one")
	e.caughtUp()
	stop()
	// Not indexed yet: x and y interleaved.
	for range 4 {
		all = append(all, e.write("x", jetflow.Failed, 1)...)
		all = append(all, e.write("y", jetflow.Failed, 2)...)
	}
	want := slices.Clone(all)
	slices.Reverse(want)
	rd := runindex.NewReader(e.st)
	q := runindex.Query{State: jetflow.Failed, Limit: 2}
	var pages []runindex.Page
	var got []string
	next := func() {
		t.Helper()
		p, err := rd.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p)
		got = append(got, ids(p.Runs)...)
		q.After = p.Next
	}
	next() // from the tail
	next()
	e.startIndexer("two")
	e.caughtUp()
	for q.After != "" { // from the index
		next()
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pages show %v, want %v", got, want)
	}
	// Back: the first pages' cursors were in the tail, now indexed.
	for i := len(pages) - 1; i > 0; i-- {
		p, err := rd.List(ctx, runindex.Query{State: jetflow.Failed, Limit: 2, Before: pages[i].Prev})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ids(p.Runs)) != fmt.Sprint(ids(pages[i-1].Runs)) {
			t.Fatalf("page %d backward (cursor %s) %v, forward %v", i-1, pages[i].Prev, ids(p.Runs), ids(pages[i-1].Runs))
		}
	}
}

// The indexer stores entries in order, each expecting the index stream's
// last sequence: a message of another publisher in between makes the
// entries after it refused, the term ends, and the next resumes after the
// last entry stored, from the previous checkpoint's counts. Every run is
// listed once, newest first, both ways alike, and the counts stay exact.
func TestIndexResumesAfterARefusedEntry(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cfg := e.cfg.WithDefaults()
	ix, _ := e.startIndexer("one")
	var all, xs []string
	for i := range 8 {
		fn := []string{"x", "y"}[i%2]
		w := e.write(fn, jetflow.Failed, 15)
		all = append(all, w...)
		if fn == "x" {
			xs = append(xs, w...)
		}
		m := nats.NewMsg(cfg.IndexSubject(string(jetflow.Failed), fn))
		m.Data = []byte("not an entry")
		if _, err := e.ts.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	e.caughtUp()
	e.sameCounts("x", "y")
	if n := ix.Stats().Checkpoints; n == 0 {
		t.Fatal("no checkpoint")
	}
	rd := runindex.NewReader(e.st)
	want := slices.Clone(all)
	slices.Reverse(want)
	for _, fn := range []string{"", "x"} {
		want := want
		if fn == "x" {
			want = slices.Clone(xs)
			slices.Reverse(want)
		}
		for _, limit := range []int{1, 7, 50} {
			q := runindex.Query{State: jetflow.Failed, Function: fn, Limit: limit}
			var got []string
			var pages []runindex.Page
			for len(pages) <= len(all) {
				p, err := rd.List(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				pages = append(pages, p)
				got = append(got, ids(p.Runs)...)
				if p.Next == "" {
					break
				}
				q.After = p.Next
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("function %q limit %d: pages show %d runs %v, want %d %v", fn, limit, len(got), got, len(want), want)
			}
			q.After = ""
			for i := len(pages) - 1; i > 0; i-- {
				q.Before = pages[i].Prev
				p, err := rd.List(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(ids(p.Runs)) != fmt.Sprint(ids(pages[i-1].Runs)) {
					t.Fatalf("function %q limit %d: page %d backward %v, forward %v", fn, limit, i-1, ids(p.Runs), ids(pages[i-1].Runs))
				}
			}
		}
	}
}

// A message on the index's subjects that names no run (only the scheduler
// role may publish there, docs/permissions.md) is skipped, and while it is
// the index's last message pages still read the index, not every record.
func TestJunkLastIndexMessage(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cfg := e.cfg.WithDefaults()
	e.write("x", jetflow.Success, 2000)
	failed := e.write("x", jetflow.Failed, 5)
	_, stop := e.startIndexer("one")
	e.caughtUp()
	stop()
	later := e.write("x", jetflow.Failed, 2) // not indexed: read from the runs stream's tail
	for _, h := range []nats.Header{nil, {runindex.HeaderRun: {"r000001"}}, {runindex.HeaderRev: {"x7"}, runindex.HeaderRun: {"../.."}}} {
		m := nats.NewMsg(cfg.IndexSubject(string(jetflow.Failed), "x"))
		m.Data = []byte("junk")
		for k, v := range h {
			m.Header[k] = v
		}
		if _, err := e.ts.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	rd := runindex.NewReader(e.st)
	want := append(slices.Clone(failed), later...)
	slices.Reverse(want)
	for _, limit := range []int{3, 10} {
		q := runindex.Query{State: jetflow.Failed, Limit: limit}
		var got []string
		var pages []runindex.Page
		before := runindex.MessagesRead()
		for {
			p, err := rd.List(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, p)
			got = append(got, ids(p.Runs)...)
			if p.Next == "" || len(pages) > len(want) {
				break
			}
			q.After = p.Next
		}
		if n := runindex.MessagesRead() - before; n > 100 {
			t.Errorf("limit %d: the pages read %d messages: every record, not the index", limit, n)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("limit %d: pages show %v, want %v", limit, got, want)
		}
		for i := len(pages) - 1; i > 0; i-- {
			p, err := rd.List(ctx, runindex.Query{State: jetflow.Failed, Limit: limit, Before: pages[i].Prev})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(ids(p.Runs)) != fmt.Sprint(ids(pages[i-1].Runs)) {
				t.Fatalf("limit %d: page %d backward %v, forward %v", limit, i-1, ids(p.Runs), ids(pages[i-1].Runs))
			}
		}
	}
}

// The index stream purged by hand, then deleted, while runs go on: the
// indexer starts a term over what is left (a marker it stores itself, so
// it never waits for a message that is gone), makes the stream again, and
// rebuilds the entries and counts: every run listed once.
func TestIndexerAfterTheIndexIsPurgedOrDeleted(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cfg := e.cfg.WithDefaults()
	all := e.write("x", jetflow.Failed, 20)
	_, stop := e.startIndexer("one")
	e.caughtUp()
	stop()
	idx, err := e.ts.JS.Stream(ctx, cfg.IndexStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := idx.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	all = append(all, e.write("x", jetflow.Failed, 5)...)
	_, stop = e.startIndexer("two")
	e.caughtUp()
	e.sameCounts("x")
	if err := e.ts.JS.DeleteStream(ctx, cfg.IndexStream()); err != nil {
		t.Fatal(err)
	}
	all = append(all, e.write("x", jetflow.Failed, 5)...)
	e.caughtUp()
	e.sameCounts("x")
	stop()
	rd := runindex.NewReader(e.st)
	q := runindex.Query{State: jetflow.Failed, Limit: 7}
	var got []string
	for range len(all) {
		p, err := rd.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(p.Runs)...)
		if q.After = p.Next; q.After == "" {
			break
		}
	}
	want := slices.Clone(all)
	slices.Reverse(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pages show %v, want %v", got, want)
	}
}

// A page over a long tail of writes not indexed yet (the indexer stopped,
// 5,000 writes, 1 in 100 a match) is exact, and reads the tail in a few
// windows that grow, not one consumer per few dozen records: the tail's
// consumers count every record, not the page's matches.
func TestPageOverALongTail(t *testing.T) {
	e := setup(t)
	_, stop := e.startIndexer("before")
	indexed := e.write("x", jetflow.Failed, 20)
	e.caughtUp()
	stop()
	var failed []string
	for range 50 {
		e.write("x", jetflow.Pending, 99)
		failed = append(failed, e.write("x", jetflow.Failed, 1)...)
	}
	want := append(slices.Clone(indexed), failed...)
	slices.Reverse(want)
	rd := runindex.NewReader(e.st)
	q := runindex.Query{State: jetflow.Failed, Limit: 10}
	var got []string
	var consumers []int64
	for len(got) < len(want) {
		c0 := runindex.ConsumersMade()
		p, err := rd.List(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, runindex.ConsumersMade()-c0)
		got = append(got, ids(p.Runs)...)
		if q.After = p.Next; q.After == "" {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pages show %v, want %v", got, want)
	}
	t.Logf("consumers made by each page: %v", consumers)
	if consumers[0] > 8 {
		t.Fatalf("the first page made %d consumers over the tail (pages: %v), want at most 8", consumers[0], consumers)
	}
}

// Records removed between a window's count and its fetch, with nothing
// written after them (expired, or purged: a record replaced by its next
// write adds that write at the stream's end, which makes up the count)
// leave the window short of its count: the page still shows each match
// once and does not wait for the missing ones (a fetch that waited would
// hold the page for its 5 s expiry).
func TestPageWhenRecordsGoBetweenCountAndFetch(t *testing.T) {
	e := setup(t)
	_, stop := e.startIndexer("before")
	e.caughtUp() // a checkpoint, nothing indexed
	stop()
	var failed []string
	for range 5 {
		// A tail longer than the pages read by gets (shortTail): read by
		// counted windows.
		e.write("x", jetflow.Pending, 60)
		failed = append(failed, e.write("x", jetflow.Failed, 1)...)
	}
	slices.Reverse(failed)
	runsStream := streams.KVStream(e.cfg.WithDefaults().RunsBucket())
	removed := 0
	var hook time.Duration // spent in the hook, inside the page's time
	runindex.SetCounted(func(st jetstream.Stream, lo, hi uint64) {
		if st.CachedInfo().Config.Name != runsStream || removed > 0 {
			return
		}
		defer func(start time.Time) { hook += time.Since(start) }(time.Now())
		// Remove the window's pending records (none is a match), as their
		// expiry would: a purge of their subjects, which writes nothing.
		for seq := lo; seq < hi; seq++ {
			m, err := st.GetMsg(context.Background(), seq)
			if err != nil || m.Header.Get(kv.HeaderState) != string(jetflow.Pending) {
				continue
			}
			if err := st.Purge(context.Background(), jetstream.WithPurgeSubject(m.Subject)); err != nil {
				t.Error(err)
			}
			removed++
		}
	})
	t.Cleanup(func() { runindex.SetCounted(nil) })
	start := time.Now()
	p, err := runindex.NewReader(e.st).List(context.Background(), runindex.Query{State: jetflow.Failed, Limit: 10})
	// The hook's reads and purges (two requests a record of the window)
	// are the test's, not the page's: a loaded machine can stretch them
	// to seconds of their own.
	took := time.Since(start) - hook
	if err != nil {
		t.Fatal(err)
	}
	if removed == 0 {
		t.Fatal("no record was removed between a count and its fetch")
	}
	if got := ids(p.Runs); fmt.Sprint(got) != fmt.Sprint(failed) {
		t.Fatalf("page shows %v, want %v", got, failed)
	}
	t.Logf("%d records removed; the page took %v (and the removal %v)", removed, took, hook)
	// Not a speed figure: a fetch that waited for the removed records
	// would take its whole 5 s expiry.
	if took >= 4*time.Second {
		t.Fatalf("the page took %v: a fetch waited for records removed after its count", took)
	}
}

// The unfiltered page (the dashboard's first page) reads the newest records
// of the runs stream by gets, no consumer: a consumer's creation on the
// runs bucket makes the server walk every key (nats-server counts the
// messages pending for it through its index of subjects), so the page grew
// with the records kept. Every run once, newest write first, both ways,
// across the gaps that later writes and a delete leave in the stream.
func TestUnfilteredPagesReadByGets(t *testing.T) {
	e := setup(t)
	e.startIndexer("one")
	e.write("x", jetflow.InProgress, 300)
	e.change("r000150", engine.Fail, jetflow.Failed)
	e.change("r000010", engine.Fail, jetflow.Failed)
	b, err := e.ts.JS.KeyValue(context.Background(), e.cfg.WithDefaults().RunsBucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(context.Background(), "r000290"); err != nil {
		t.Fatal(err)
	}
	e.caughtUp()
	want := []string{"r000010", "r000150"}
	for i := 300; i >= 1; i-- {
		if i != 10 && i != 150 && i != 290 {
			want = append(want, fmt.Sprintf("r%06d", i))
		}
	}
	rd := runindex.NewReader(e.st)
	q := runindex.Query{Limit: 7}
	var got []string
	var pages []runindex.Page
	c0, r0 := runindex.ConsumersMade(), runindex.MessagesRead()
	for {
		p, err := rd.List(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(pages) == 0 {
			// Reads: about the page's records (8: a page and one more),
			// a quarter more and a get per chain of gets.
			if n := runindex.MessagesRead() - r0; n > 4*8 {
				t.Fatalf("the first page read %d messages, want at most 32", n)
			}
		}
		pages = append(pages, p)
		got = append(got, ids(p.Runs)...)
		if q.After = p.Next; q.After == "" {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pages show %v, want %v", got, want)
	}
	for i := len(pages) - 1; i > 0; i-- {
		p, err := rd.List(context.Background(), runindex.Query{Limit: 7, Before: pages[i].Prev})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ids(p.Runs)) != fmt.Sprint(ids(pages[i-1].Runs)) {
			t.Fatalf("page %d backward %v, forward %v", i-1, ids(p.Runs), ids(pages[i-1].Runs))
		}
	}
	if n := runindex.ConsumersMade() - c0; n != 0 {
		t.Fatalf("unfiltered pages made %d consumers, want none", n)
	}
}

// Entries are batched: the consecutive writes of one index subject that the
// indexer reads together are one message (a value of Jetflow-Run and
// Jetflow-Rev each). Pages filtered by state over two functions, by
// function, and by both show every run once, newest first, both ways,
// with cursors inside batches; the counts stay exact.
func TestBatchedEntriesPageBothWays(t *testing.T) {
	e := setup(t)
	var fx, fy, sx []string
	for range 3 {
		fx = append(fx, e.write("x", jetflow.Failed, 40)...)
		fy = append(fy, e.write("y", jetflow.Failed, 30)...)
		sx = append(sx, e.write("x", jetflow.Success, 20)...)
	}
	e.startIndexer("one") // reads the 270 writes as a backlog: batches
	e.caughtUp()
	idx, err := e.ts.JS.Stream(context.Background(), e.cfg.WithDefaults().IndexStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := idx.Info(context.Background(), jetstream.WithSubjectFilter(e.cfg.WithDefaults().IndexFilter("", "")))
	if err != nil {
		t.Fatal(err)
	}
	var msgs uint64
	for _, n := range info.State.Subjects {
		msgs += n
	}
	t.Logf("270 entries in %d index messages", msgs)
	if msgs >= 270 {
		t.Fatalf("270 entries in %d messages: not batched", msgs)
	}
	rd := runindex.NewReader(e.st)
	rev := func(s ...[]string) []string {
		var all []string
		for _, x := range s {
			all = append(all, x...)
		}
		slices.Sort(all) // ids are in write order
		slices.Reverse(all)
		return all
	}
	for _, c := range []struct {
		q    runindex.Query
		want []string
	}{
		{runindex.Query{State: jetflow.Failed, Limit: 17}, rev(fx, fy)},
		{runindex.Query{Function: "x", Limit: 23}, rev(fx, sx)},
		{runindex.Query{State: jetflow.Failed, Function: "y", Limit: 7}, rev(fy)},
	} {
		q := c.q
		var got []string
		var pages []runindex.Page
		for {
			p, err := rd.List(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, p)
			got = append(got, ids(p.Runs)...)
			if q.After = p.Next; q.After == "" {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Fatalf("%+v: pages show %v, want %v", c.q, got, c.want)
		}
		for i := len(pages) - 1; i > 0; i-- {
			q := c.q
			q.Before = pages[i].Prev
			p, err := rd.List(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(ids(p.Runs)) != fmt.Sprint(ids(pages[i-1].Runs)) {
				t.Fatalf("%+v: page %d backward %v, forward %v", c.q, i-1, ids(p.Runs), ids(pages[i-1].Runs))
			}
		}
	}
	e.sameCounts("x", "y")
}
