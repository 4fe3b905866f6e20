package runindex_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type env struct {
	t    *testing.T
	ts   *testserver.Env
	runs *engine.Runs
	st   *kv.Store
	cfg  streams.Config
	n    int
	pad  string // appended to the ids write names
}

func setup(t *testing.T) *env { return setupWith(t, streams.Config{}) }

func setupWith(t *testing.T, cfg streams.Config) *env {
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
		id := fmt.Sprintf("r%06d", e.n) + e.pad
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
	_, err := e.runs.Change(context.Background(), step, id, func(r *jetflow.Run) bool {
		r.State = to
		if to.Terminal() {
			r.CompletedTime = time.Now().UTC()
		}
		return true
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// startIndexer runs an indexer until the returned stop is called.
func (e *env) startIndexer(name string) (*runindex.Indexer, func()) {
	ix := runindex.New(e.ts.JS, e.cfg)
	ix.Name, ix.Every = name, 50*time.Millisecond
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

// startCrashable runs an indexer checkpointing every every; crash stops it
// as a crash would, without a last checkpoint.
func (e *env) startCrashable(name string, every time.Duration) (crash func()) {
	ix := runindex.New(e.ts.JS, e.cfg)
	ix.Name, ix.Every = name, every
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ix.Run(ctx) }()
	crash = func() { cancel(errors.New("crash")); <-done }
	e.t.Cleanup(crash)
	return crash
}

// A term that ends without a checkpoint leaves entries after the last one;
// the next term does not publish them again. An index written before
// batches holds one entry per message, in headers. Pages read both, show
// each run once, newest first, and page both ways alike, also where the
// entries of two functions interleave.
func TestIndexEntriesAfterACrashAreNotWrittenAgain(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cfg := e.cfg.WithDefaults()
	idx, err := e.ts.JS.Stream(ctx, cfg.IndexStream())
	if err != nil {
		t.Fatal(err)
	}
	// An index written before batches: one entry per message, in headers.
	failed := e.write("x", jetflow.Failed, 5)
	for _, id := range failed {
		r, err := e.st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(cfg.IndexSubject(string(jetflow.Failed), "x"))
		m.Header.Set(runindex.HeaderRun, id)
		m.Header.Set(runindex.HeaderRev, strconv.FormatUint(r.Revision, 10))
		if _, err := e.ts.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// No checkpoint: the first term counts from the start, and finds the
	// five entries stored.
	_, stop := e.startIndexer("one")
	failed = append(failed, e.write("x", jetflow.Failed, 40)...)
	e.caughtUp()
	stop() // a last checkpoint
	// A term that publishes entries and crashes before its checkpoint.
	crash := e.startCrashable("two", time.Hour)
	all := slices.Clone(failed)
	rs, err := e.ts.JS.Stream(ctx, streams.KVStream(cfg.RunsBucket()))
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		failed = append(failed, e.write("x", jetflow.Failed, 7)...)
		all = append(all, failed[len(failed)-7:]...)
		all = append(all, e.write("y", jetflow.Failed, 3)...)
		info, err := rs.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		testserver.Eventually(t, 30*time.Second, "entries of every write published", func() bool {
			m, err := idx.GetLastMsgForSubject(ctx, cfg.IndexFilter("", ""))
			return err == nil && m.Header.Get(runindex.HeaderRev) == strconv.FormatUint(info.State.LastSeq, 10)
		})
	}
	crash()
	e.startIndexer("three")
	failed = append(failed, e.write("x", jetflow.Failed, 4)...)
	all = append(all, failed[len(failed)-4:]...)
	e.caughtUp()

	// Every write indexed once: the five old entries, the batches.
	entries, oldStyle, batches := 0, 0, 0
	c, err := idx.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{cfg.IndexFilter("", "")}})
	if err != nil {
		t.Fatal(err)
	}
	for left := c.CachedInfo().NumPending; left > 0; left-- {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		switch n := bytes.Count(m.Data(), []byte{'\n'}); {
		case n == 0:
			oldStyle++
			entries++
		case n > 1:
			batches++
			entries += n
		default:
			entries++
		}
	}
	t.Logf("index: %d entries for %d writes (%d messages of one entry in headers, %d batches of several)", entries, len(all), oldStyle, batches)
	if oldStyle != 5 || batches == 0 || entries != len(all) {
		t.Fatalf("index: %d entries for %d writes (%d messages of one entry in headers, %d batches of several)", entries, len(all), oldStyle, batches)
	}

	rd := runindex.NewReader(e.st)
	pages := func(q runindex.Query) ([]string, []runindex.Page) {
		t.Helper()
		var got []string
		var ps []runindex.Page
		for len(ps) <= len(all) {
			p, err := rd.List(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
			got = append(got, ids(p.Runs)...)
			if p.Next == "" {
				break
			}
			q.After = p.Next
		}
		q.After = ""
		for i := len(ps) - 1; i > 0; i-- {
			q.Before = ps[i].Prev
			p, err := rd.List(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(ids(p.Runs)) != fmt.Sprint(ids(ps[i-1].Runs)) {
				t.Fatalf("%+v: page %d backward %v, forward %v", q, i-1, ids(p.Runs), ids(ps[i-1].Runs))
			}
		}
		return got, ps
	}
	for _, limit := range []int{1, 3, 7, 50} {
		// One function: newest first, exactly.
		got, _ := pages(runindex.Query{State: jetflow.Failed, Function: "x", Limit: limit})
		want := slices.Clone(failed)
		slices.Reverse(want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("function x, limit %d: pages show %v, want %v", limit, got, want)
		}
		// Two functions whose entries interleave.
		got, _ = pages(runindex.Query{State: jetflow.Failed, Limit: limit})
		want = slices.Clone(all)
		slices.Reverse(want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("state failed, limit %d: pages show %v, want %v", limit, got, want)
		}
	}
}

// A server whose max payload is small still takes every batch: a batch is
// bounded by bytes (run ids are up to 200 characters) as well as entries.
func TestBatchesFitTheServersMaxPayload(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), MaxPayload: 8 << 10, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := streams.Provision(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Open(ctx, js, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ts: &testserver.Env{T: t, NC: nc, JS: js}, runs: engine.New(st), st: st, pad: strings.Repeat("x", 193)}
	failed := e.write("x", jetflow.Failed, 300) // 300 entries of 222 bytes: 66 KB
	e.startIndexer("one")
	e.caughtUp()
	rd := runindex.NewReader(e.st)
	p, err := rd.List(ctx, runindex.Query{State: jetflow.Failed, Limit: 300})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(failed)
	if fmt.Sprint(ids(p.Runs)) != fmt.Sprint(failed) {
		t.Fatalf("page of %d runs, want the %d written", len(p.Runs), len(failed))
	}
	idx, err := js.Stream(ctx, streams.Config{}.WithDefaults().IndexStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := idx.Info(ctx, jetstream.WithSubjectFilter(streams.Config{}.WithDefaults().IndexFilter("", "")))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("300 entries of 222 bytes in %d index messages", info.State.Msgs-1)
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
	for range 2 { // from the tail
		p, err := rd.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p)
		got = append(got, ids(p.Runs)...)
		q.After = p.Next
	}
	e.startIndexer("two")
	e.caughtUp()
	for q.After != "" { // from the index
		p, err := rd.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p)
		got = append(got, ids(p.Runs)...)
		q.After = p.Next
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

// A batch lost while the one after it was stored (a reconnect, a stream
// leader change) leaves a hole; the next term publishes the missing
// entries, after the others. Every run is listed once, both ways alike.
func TestIndexHoleFilledByTheNextTerm(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cfg := e.cfg.WithDefaults()
	all := e.write("x", jetflow.Failed, 5)
	_, stop := e.startIndexer("one")
	e.caughtUp()
	stop()
	lost := e.write("x", jetflow.Failed, 3)
	kept := e.write("x", jetflow.Failed, 3)
	all = append(append(all, lost...), kept...)
	// The term that read them stored the second batch only.
	var body []byte
	var top uint64
	for _, id := range kept {
		r, err := e.st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		body = fmt.Appendf(body, "%d %s\n", r.Revision, id)
		top = r.Revision
	}
	m := nats.NewMsg(cfg.IndexSubject(string(jetflow.Failed), "x"))
	m.Header.Set(runindex.HeaderRev, strconv.FormatUint(top, 10))
	m.Data = body
	if _, err := e.ts.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	e.startIndexer("two")
	more := e.write("y", jetflow.Failed, 2)
	all = append(all, more...)
	e.caughtUp()

	rd := runindex.NewReader(e.st)
	for _, q := range []runindex.Query{{State: jetflow.Failed, Function: "x"}, {State: jetflow.Failed}} {
		for _, limit := range []int{1, 2, 4} {
			q.Limit, q.After, q.Before = limit, "", ""
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
			want := slices.Clone(all)
			if q.Function == "x" {
				want = slices.DeleteFunc(want, func(id string) bool { return slices.Contains(more, id) })
			}
			slices.Sort(want)
			sorted := slices.Clone(got)
			slices.Sort(sorted)
			if fmt.Sprint(sorted) != fmt.Sprint(want) {
				t.Fatalf("%+v: pages show %v, want each of %v once", q, got, want)
			}
			q.After = ""
			for i := len(pages) - 1; i > 0; i-- {
				q.Before = pages[i].Prev
				p, err := rd.List(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(ids(p.Runs)) != fmt.Sprint(ids(pages[i-1].Runs)) {
					t.Fatalf("%+v: page %d backward %v, forward %v", q, i-1, ids(p.Runs), ids(pages[i-1].Runs))
				}
			}
		}
	}
}
