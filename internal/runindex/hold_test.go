package runindex_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// entriesByRun reads every index entry stored: the revisions of each run's.
func (e *env) entriesByRun() map[string][]string {
	e.t.Helper()
	ctx := context.Background()
	cfg := e.cfg.WithDefaults()
	idx, err := e.ts.JS.Stream(ctx, cfg.IndexStream())
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := idx.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]string{}
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := idx.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		if run := m.Header.Get(runindex.HeaderRun); run != "" {
			out[run] = append(out[run], m.Header.Get(runindex.HeaderRev))
		}
	}
	return out
}

// applied waits until ix has read every write of the runs bucket.
func (e *env) applied(ix *runindex.Indexer) {
	e.t.Helper()
	rs, err := e.ts.JS.Stream(context.Background(), streams.KVStream(e.cfg.WithDefaults().RunsBucket()))
	if err != nil {
		e.t.Fatal(err)
	}
	last := rs.CachedInfo().State.LastSeq
	testserver.Eventually(e.t, 30*time.Second, "indexer at the runs stream's end", func() bool { return ix.Stats().Seq >= last })
}

// onlyLatest checks that the index holds exactly one entry per run, that of
// its record's current revision.
func (e *env) onlyLatest(ids ...string) {
	e.t.Helper()
	got := e.entriesByRun()
	for _, id := range ids {
		r, err := e.st.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if want := []string{fmt.Sprint(r.Revision)}; !slices.Equal(got[id], want) {
			e.t.Fatalf("run %s: index entries at revisions %v, want %v only", id, got[id], want)
		}
	}
	if len(got) != len(ids) {
		e.t.Fatalf("index entries of %d runs, want %d: %v", len(got), len(ids), got)
	}
}

// pageIDs lists the runs of one state, newest first, one page.
func (e *env) pageIDs(s jetflow.State) []string {
	e.t.Helper()
	p, err := runindex.NewReader(e.st).List(context.Background(), runindex.Query{State: s, Function: "x", Limit: 50})
	if err != nil {
		e.t.Fatal(err)
	}
	return ids(p.Runs)
}

// A write of a run replaced by a later one while its entry is held is never
// published: a run created, claimed and ended within the hold costs the
// index one entry. A graceful stop publishes what is held.
func TestEntriesReplacedWithinTheHold(t *testing.T) {
	e := setup(t)
	ix := runindex.New(e.ts.JS, e.cfg)
	ix.Name, ix.Every, ix.Hold = "hold", time.Hour, time.Hour // nothing published before the stop
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ix.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testserver.Eventually(t, 30*time.Second, "the indexer's term", func() bool { return ix.Stats().CaughtUp })

	// Each write read before the next replaces it in the bucket.
	runs := e.write("x", jetflow.Pending, 3)
	a, b, c := runs[0], runs[1], runs[2]
	e.applied(ix)
	e.change(a, engine.Claim, jetflow.InProgress)
	e.applied(ix)
	e.change(a, engine.Succeed, jetflow.Success)
	e.change(b, engine.Fail, jetflow.Failed)
	e.applied(ix)
	if got := e.entriesByRun(); len(got) != 0 {
		t.Fatalf("entries published within the hold: %v", got)
	}
	if st := ix.Stats(); st.Replaced != 3 || st.Entries != 0 {
		t.Fatalf("held: %d replaced, %d published; want 3 and 0", st.Replaced, st.Entries)
	}
	cancel()
	<-done
	if st := ix.Stats(); st.Entries != 3 {
		t.Fatalf("a graceful stop published %d entries, want 3", st.Entries)
	}
	e.onlyLatest(a, b, c)

	// The next term resumes after them: nothing twice, counts and pages exact.
	_, stop := e.startIndexer("next")
	e.caughtUp()
	e.sameCounts("x")
	e.onlyLatest(a, b, c)
	for s, want := range map[jetflow.State][]string{jetflow.Success: {a}, jetflow.Failed: {b}, jetflow.Pending: {c}, jetflow.InProgress: nil} {
		if got := e.pageIDs(s); !slices.Equal(got, want) {
			t.Fatalf("%s: page %v, want %v", s, got, want)
		}
	}
	e.change(c, engine.Claim, jetflow.InProgress)
	e.caughtUp()
	stop()
	if got := e.pageIDs(jetflow.InProgress); !slices.Equal(got, []string{c}) {
		t.Fatalf("in progress: page %v, want [%s]", got, c)
	}
}

// A term that crashes with entries held (no last checkpoint) leaves no
// hole: the next resumes from the last checkpoint, whose writes it reads
// again, and after the last entry stored.
func TestHeldEntriesOfACrashedTerm(t *testing.T) {
	e := setup(t)
	first := e.write("x", jetflow.Pending, 4)
	_, stop := e.startIndexer("before")
	e.caughtUp()
	stop()

	ix := runindex.New(e.ts.JS, e.cfg)
	ix.Name, ix.Every, ix.Hold = "crashes", time.Hour, time.Hour
	ctx, crash := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ix.Run(ctx) }()
	t.Cleanup(func() { crash(errors.New("cleanup")); <-done })
	more := e.write("x", jetflow.Pending, 5)
	for _, id := range more[:2] {
		e.change(id, engine.Claim, jetflow.InProgress)
	}
	e.change(first[0], engine.Claim, jetflow.InProgress)
	e.applied(ix)
	crash(errors.New("the process died"))
	<-done
	if got := e.entriesByRun(); len(got) != len(first) {
		t.Fatalf("a crashed term published what it held: entries of %d runs, want %d", len(got), len(first))
	}

	_, stop = e.startIndexer("after")
	e.caughtUp()
	stop()
	e.sameCounts("x")
	got := e.entriesByRun()
	for _, id := range append(slices.Clone(first[1:]), more...) {
		if len(got[id]) != 1 {
			t.Fatalf("run %s: entries %v, want one", id, got[id])
		}
	}
	if len(got[first[0]]) != 2 { // its pending write, indexed before, and its claim
		t.Fatalf("run %s: entries %v, want two", first[0], got[first[0]])
	}
	for s, want := range map[jetflow.State][]string{
		jetflow.Pending:    {more[4], more[3], more[2], first[3], first[2], first[1]},
		jetflow.InProgress: {first[0], more[1], more[0]},
	} {
		if got := e.pageIDs(s); !slices.Equal(got, want) {
			t.Fatalf("%s: page %v, want %v", s, got, want)
		}
	}
}

// A checkpoint publishes what is held first: once it covers a write, the
// write's entry is stored (a term crashing after it loses nothing).
func TestCheckpointPublishesWhatIsHeld(t *testing.T) {
	e := setup(t)
	ix := runindex.New(e.ts.JS, e.cfg)
	ix.Name, ix.Every, ix.Hold = "cp", 50*time.Millisecond, time.Hour
	ctx, crash := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ix.Run(ctx) }()
	t.Cleanup(func() { crash(errors.New("cleanup")); <-done })
	runs := e.write("x", jetflow.Failed, 5)
	e.caughtUp()
	crash(errors.New("the process died"))
	<-done
	e.onlyLatest(runs...)
	_, stop := e.startIndexer("after")
	runs = append(runs, e.write("x", jetflow.Failed, 2)...)
	e.caughtUp()
	stop()
	e.onlyLatest(runs...)
	e.sameCounts("x")
}
