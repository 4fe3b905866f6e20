package trigger_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/nats-io/nats.go/jetstream"
)

// A trigger on jetflow's own streams, or capturing subjects NATS or
// jetflow publish on, would turn jetflow's writes (and every reply) into
// runs that write more: Add and Bind refuse it with ErrInvalid, and leave
// nothing behind (no definition, no capture stream, no consumer).
func TestTriggersFeedingThemselvesAreRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	var defs []trigger.Def
	for _, s := range []string{"JETFLOW_FN", "JETFLOW_RUNIDX", "KV_jetflow_runs", "KV_jetflow_delayed", "KV_jetflow_leases",
		"KV_jetflow_functions", "KV_jetflow_crons", "KV_jetflow_journal", "KV_jetflow_pools",
		"a\x00b", "a b", "a\tb", "a\u00a0b", strings.Repeat("S", 300)} {
		defs = append(defs, trigger.Def{Stream: s})
	}
	for _, s := range []string{">", "*", "*.>", "*.*", "_INBOX.>", "_INBOX.abc", "jetflow.>", "jetflow.cancel", "*.cancel",
		"jetflow.fn.x.y", "$KV.>", "$KV.jetflow_runs.>", "$JS.>", "$JS.API.>", "$SYS.>", "$O.>",
		"\x00.a", "a.\x7f", "a b", "a\n", "é.\u200b"} {
		defs = append(defs, trigger.Def{Subjects: []string{s}})
	}
	defs = append(defs, trigger.Def{Subjects: []string{"ok.one", "_INBOX.>"}})
	for i, d := range defs {
		d.Name = "self" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		d.Function = Ship.Name()
		if _, err := trigger.Add(ctx, e.p, d); !errors.Is(err, trigger.ErrInvalid) {
			t.Errorf("add stream %q subjects %q: %v, want ErrInvalid", d.Stream, d.Subjects, err)
		}
		if _, err := trigger.Get(ctx, e.p, d.Name); !errors.Is(err, trigger.ErrNotFound) {
			t.Errorf("stream %q subjects %q: refused, yet stored: %v", d.Stream, d.Subjects, err)
		}
		if _, err := e.js.Stream(ctx, kv.CaptureStream(streams.Config{}, d.Name)); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %q subjects %q: refused, yet its capture stream exists: %v", d.Stream, d.Subjects, err)
		}
		r := trigger.New(e.p, trigger.Config{})
		err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{Name: d.Name, Stream: d.Stream, Subjects: d.Subjects})
		if !errors.Is(err, trigger.ErrInvalid) {
			t.Errorf("bind stream %q subjects %q: %v, want ErrInvalid", d.Stream, d.Subjects, err)
		}
	}
	for _, s := range []string{"KV_jetflow_runs", "JETFLOW_FN"} {
		if n := consumers(t, e, s); n != 0 {
			t.Errorf("%d trigger consumers on %s", n, s)
		}
	}
	// What stays allowed: user subjects with wildcards or any printable
	// characters, a user's bucket, a filter '>' of the user's stream.
	e.ordersStream()
	if _, err := e.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "profiles"}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []trigger.Def{
		{Name: "ok1", Subjects: []string{"signups.*", "é.x.>", "jetflowx.a", "_INBOXES.a"}},
		{Name: "ok2", Stream: "ORDERS", Subjects: []string{">"}},
		{Name: "ok3", Stream: "KV_profiles"},
	} {
		d.Function = Ship.Name()
		if _, err := trigger.Add(ctx, e.p, d); err != nil {
			t.Errorf("add %+v: %v", d, err)
		}
	}
}

// consumers counts jetflow's trigger consumers on stream.
func consumers(t *testing.T, e *env, stream string) int {
	t.Helper()
	st, err := e.js.Stream(testCtx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	names := st.ConsumerNames(testCtx(t))
	for name := range names.Name() {
		if strings.Contains(name, "_trigger_") {
			n++
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// A stream of the user's that mirrors jetflow's runs bucket is jetflow's
// runs all the same: Add refuses it, and creates no consumer on it.
func TestTriggerOnAMirrorOfJetflowsStreamIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "RUNCOPY", Mirror: &jetstream.StreamSource{Name: "KV_jetflow_runs"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := trigger.Add(ctx, e.p, trigger.Def{Name: "copy", Function: Ship.Name(), Stream: "RUNCOPY"}); !errors.Is(err, trigger.ErrInvalid) {
		t.Fatalf("add on a mirror of KV_jetflow_runs: %v, want ErrInvalid", err)
	}
	if n := consumers(t, e, "RUNCOPY"); n != 0 {
		t.Fatalf("%d trigger consumers on the mirror", n)
	}
	if _, err := trigger.Get(ctx, e.p, "copy"); !errors.Is(err, trigger.ErrNotFound) {
		t.Fatalf("refused, yet stored: %v", err)
	}
}

// A definition written into the bucket by hand (past Add) on jetflow's
// runs bucket is not run: one enqueued run stays one run.
func TestHandWrittenSelfFeedingTriggerIsNotRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	e.worker()
	b, err := e.js.KeyValue(ctx, "jetflow_functions")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, kv.TriggerKey("self"), []byte(`{"name":"self","function":"test.trigger.ship","stream":"KV_jetflow_runs","origin":"runtime","window":1000}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, kv.TriggerKey("inbox"), []byte(`{"name":"inbox","function":"test.trigger.ship","subjects":["_INBOX.>"],"origin":"runtime","window":1000}`)); err != nil {
		t.Fatal(err)
	}
	r := e.runner(trigger.Config{}, nil)
	if _, err := e.p.Enqueue(ctx, Ship.With(Order{ID: "one"})); err != nil {
		t.Fatal(err)
	}
	e.waitRecords(Ship.Name(), 1, jetflow.Success)
	time.Sleep(2 * time.Second) // what a self-feeding trigger would make meanwhile: thousands of runs
	if n := len(e.records(Ship.Name())); n != 1 {
		t.Fatalf("%d runs of %s from one enqueue", n, Ship.Name())
	}
	if got := r.Running(); len(got) != 0 {
		t.Fatalf("runner runs %v", got)
	}
	if n := consumers(t, e, "KV_jetflow_runs"); n != 0 {
		t.Fatalf("%d trigger consumers on KV_jetflow_runs", n)
	}
	if _, err := e.js.Stream(ctx, kv.CaptureStream(streams.Config{}, "inbox")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("a capture stream of _INBOX.>: %v", err)
	}
}

// Definitions written into the bucket by hand that are not definitions
// (garbage, or naming another trigger) are listed as unreadable under
// their key's name, never in place of the trigger they name; Get and
// Pause say so (ErrUnreadable, jetflow.ErrBadRecord); Delete removes them,
// and a definition on a stream that cannot exist, without an error.
func TestHandWrittenDefinitionsAreListedAndDeletable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	e.ordersStream()
	e.worker()
	if _, err := trigger.Add(ctx, e.p, trigger.Def{Name: "real", Function: Ship.Name(), Stream: "ORDERS"}); err != nil {
		t.Fatal(err)
	}
	// A capture trigger whose definition is then overwritten: Delete
	// still removes its capture stream.
	if _, err := trigger.Add(ctx, e.p, trigger.Def{Name: "cap", Function: Ship.Name(), Subjects: []string{"cap.x"}}); err != nil {
		t.Fatal(err)
	}
	b, err := e.js.KeyValue(ctx, "jetflow_functions")
	if err != nil {
		t.Fatal(err)
	}
	put := func(name, v string) {
		t.Helper()
		if _, err := b.Put(ctx, kv.TriggerKey(name), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	put("garbage", "{not json")
	put("cap", "\x00\x01")
	put("liar", `{"name":"real","function":"evil.fn","stream":"ORDERS","origin":"runtime","window":5}`)
	put("wild", `{"name":"wild","function":"test.trigger.ship","stream":">","origin":"runtime"}`)
	r := e.runner(trigger.Config{}, nil)
	testserver.Eventually(t, 10*time.Second, "runner runs real", func() bool {
		got := r.Running()
		return len(got) == 1 && got[0] == "real"
	})

	tis, err := trigger.List(ctx, e.p)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]trigger.Info{}
	for _, ti := range tis {
		byName[ti.Name] = ti
	}
	if len(tis) != 5 || len(byName) != 5 {
		t.Fatalf("listed %d triggers, want cap, garbage, liar, real, wild: %+v", len(tis), tis)
	}
	if ti := byName["real"]; ti.Function != Ship.Name() || ti.Window != trigger.DefaultWindow || ti.Unreadable != "" {
		t.Fatalf("real listed as %+v", ti)
	}
	for _, n := range []string{"garbage", "cap", "liar"} {
		ti := byName[n]
		if ti.Unreadable == "" || ti.State() != "unreadable" || ti.Function != "" {
			t.Errorf("%s listed as %+v, want unreadable", n, ti)
		}
	}
	mustContain(t, byName["liar"].Unreadable, `"real"`)
	if ti := byName["wild"]; ti.Unreadable != "" || ti.Stream != ">" || ti.ConsumerError == "" {
		t.Errorf("wild listed as %+v", ti)
	}

	for _, n := range []string{"garbage", "liar"} {
		if _, err := trigger.Get(ctx, e.p, n); !errors.Is(err, trigger.ErrUnreadable) || !errors.Is(err, jetflow.ErrBadRecord) ||
			strings.Count(err.Error(), "unreadable") != 1 || strings.Contains(err.Error(), "run record") {
			t.Errorf("get %s: %v, want ErrUnreadable, said once", n, err)
		}
		if _, err := trigger.Pause(ctx, e.p, n); !errors.Is(err, trigger.ErrUnreadable) {
			t.Errorf("pause %s: %v, want ErrUnreadable", n, err)
		}
	}
	if d, err := trigger.Get(ctx, e.p, "real"); err != nil || d.Paused || d.Function != Ship.Name() {
		t.Fatalf("real after pausing liar: %+v %v", d, err)
	}
	for _, n := range []string{"garbage", "cap", "liar", "wild"} {
		if err := trigger.Delete(ctx, e.p, n); err != nil {
			t.Errorf("delete %s: %v", n, err)
		}
		if _, err := b.Get(ctx, kv.TriggerKey(n)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("after delete, %s's key: %v", n, err)
		}
		if err := trigger.Delete(ctx, e.p, n); !errors.Is(err, trigger.ErrNotFound) {
			t.Errorf("delete %s twice: %v, want ErrNotFound", n, err)
		}
	}
	if _, err := e.js.Stream(ctx, kv.CaptureStream(streams.Config{}, "cap")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("cap's capture stream after delete: %v", err)
	}
	// real is untouched, and still runs.
	if _, err := e.js.Consumer(ctx, "ORDERS", kv.TriggerConsumer(streams.Config{}, "real")); err != nil {
		t.Fatalf("real's consumer: %v", err)
	}
	e.publish("orders.created", 0, 3, nil)
	e.waitRecords(Ship.Name(), 3, jetflow.Success)
	tis, err = trigger.List(ctx, e.p)
	if err != nil || len(tis) != 1 || tis[0].Name != "real" {
		t.Fatalf("list after deletes: %+v %v", tis, err)
	}
}

// A trigger on a user's stream whose definition is then overwritten by
// garbage (or by one naming no stream that can exist) no longer says
// where its consumer is: Delete finds it on whichever stream holds it,
// and leaves other triggers' consumers alone.
func TestDeleteOverwrittenTriggerRemovesItsConsumer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	e.ordersStream()
	for _, n := range []string{"keep", "junk", "wildcard"} {
		if _, err := trigger.Add(ctx, e.p, trigger.Def{Name: n, Function: Ship.Name(), Stream: "ORDERS"}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := e.js.KeyValue(ctx, "jetflow_functions")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, kv.TriggerKey("junk"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, kv.TriggerKey("wildcard"), []byte(`{"name":"wildcard","function":"test.trigger.ship","stream":">","origin":"runtime"}`)); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"junk", "wildcard"} {
		if _, err := e.js.Consumer(ctx, "ORDERS", kv.TriggerConsumer(streams.Config{}, n)); err != nil {
			t.Fatalf("%s's consumer before delete: %v", n, err)
		}
		if err := trigger.Delete(ctx, e.p, n); err != nil {
			t.Fatalf("delete %s: %v", n, err)
		}
		if _, err := e.js.Consumer(ctx, "ORDERS", kv.TriggerConsumer(streams.Config{}, n)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("%s's consumer on ORDERS after delete: %v, want it gone", n, err)
		}
	}
	if _, err := e.js.Consumer(ctx, "ORDERS", kv.TriggerConsumer(streams.Config{}, "keep")); err != nil {
		t.Fatalf("keep's consumer: %v", err)
	}
}
