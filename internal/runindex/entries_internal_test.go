package runindex

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
)

// Publishes that get no reply at all (sent to a replica that is not the
// stream's leader, or lost in an election: the server answers neither)
// hold their slots; once all are held, a publish gives up after the
// entries' patience and fails the term, which the next one resumes,
// instead of waiting for as long as the leadership lasts.
func TestEntriesGiveUpWhenNoReplyComes(t *testing.T) {
	ts := testserver.Start(t)
	e := sinkEntries(t, ts, 2, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last error
	for i := range 3 {
		last = e.publish(ctx, &nats.Msg{Subject: "sink.x", Header: nats.Header{}}, "idx-"+strconv.Itoa(i+1))
	}
	if last == nil || ctx.Err() != nil || !e.failed.Load() {
		t.Fatalf("third publish with two unanswered: %v (ctx %v, failed %v)", last, ctx.Err(), e.failed.Load())
	}
	if err := e.wait(ctx, time.Second); err == nil {
		t.Fatal("wait after the failure returned nil")
	}
}

// The term resumes after the last entry stored, however many messages
// that name no run came after it (only the scheduler role may publish
// there): resuming from the checkpoint instead would store the entries
// after it twice.
func TestResumePointPastMessagesThatNameNoRun(t *testing.T) {
	ts := testserver.Start(t)
	ctx := context.Background()
	cfg := streams.Config{}.WithDefaults()
	if err := streams.Provision(ctx, ts.JS, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	for rev := 1; rev <= 6; rev++ {
		m := nats.NewMsg(cfg.IndexSubject("failed", "x"))
		m.Header.Set(HeaderRun, "r"+strconv.Itoa(rev))
		m.Header.Set(HeaderRev, strconv.Itoa(rev))
		if _, err := ts.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	junk := func(n int) {
		for range n {
			m := nats.NewMsg(cfg.IndexSubject("failed", "x"))
			m.Data = []byte("junk")
			if _, err := ts.JS.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	ix := New(ts.JS, streams.Config{})
	idx, err := ts.JS.Stream(ctx, cfg.IndexStream())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 17, 300} {
		junk(n)
		// A term's marker, as term stores it: the resume point is the
		// last entry before it.
		ack, err := ts.JS.PublishMsg(ctx, nats.NewMsg(cfg.IndexTermSubject()))
		if err != nil {
			t.Fatal(err)
		}
		rev, ok, err := ix.resumePoint(ctx, idx, ack.Sequence)
		if err != nil || !ok || rev != 6 {
			t.Fatalf("after %d more messages naming no run: resume point %d, %v, %v; want 6", n, rev, ok, err)
		}
	}
	// Before sequence 5: the entry of revision 4.
	if rev, ok, err := ix.resumePoint(ctx, idx, 5); err != nil || !ok || rev != 4 {
		t.Fatalf("resume point before sequence 5: %d, %v, %v", rev, ok, err)
	}
}

// A flush cut short (its context ended while it waited for a slot) fails
// the term's chain, even once every message it did send is acknowledged:
// a checkpoint stored after it (leave's, at a graceful stop) would count
// the writes of the entries it never sent as indexed, and no later term
// would index them.
func TestFlushCutShortFailsTheChain(t *testing.T) {
	ts := testserver.Start(t)
	e := sinkEntries(t, ts, 1, time.Minute)
	ix := New(ts.JS, streams.Config{})
	st := &state{}
	st.pend.add("sink.a", "r1", 1)
	st.pend.add("sink.b", "r2", 2) // another subject: a second message
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := ix.flush(ctx, e, st); err == nil {
		t.Fatal("flush with its second message never sent returned nil")
	}
	e.done(nil) // the first message's acknowledgement comes after all
	if err := e.wait(context.Background(), time.Second); err == nil {
		t.Fatal("the chain took a checkpoint after a flush that did not send every entry")
	}
}

// sinkEntries is a chain of at most max entries in flight whose messages
// go to sink.> subjects, where a subscriber takes them and never answers.
func sinkEntries(t *testing.T, ts *testserver.Env, max int, patience time.Duration) *entries {
	t.Helper()
	sink, err := ts.NC.SubscribeSync("sink.>")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Unsubscribe() })
	e, err := newEntries(ts.NC, max, "", patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	return e
}
