package kv_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/cronspec"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func provisioned(t *testing.T) (*testserver.Env, *kv.Store) {
	t.Helper()
	ts := testserver.Start(t)
	ctx := context.Background()
	if err := streams.Provision(ctx, ts.JS, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Open(ctx, ts.JS, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return ts, st
}

func TestReadFunctionsSortedAndFiltered(t *testing.T) {
	t.Parallel()
	ts, _ := provisioned(t)
	ctx := context.Background()
	seen := time.Now().UTC().Truncate(time.Millisecond)
	for _, fi := range []kv.FunctionInfo{
		{Name: "emails.send", Kind: jetflow.Retryable, Worker: "w2", Concurrency: 3, MaxAttempts: 5, Seen: seen},
		{Name: "emails.send", Kind: jetflow.Retryable, Worker: "w1", Concurrency: 2, MaxAttempts: 5, Seen: seen},
		{Name: "billing.charge", Kind: jetflow.AtMostOnce, Worker: "w1", Concurrency: 1, MaxAttempts: 1, Seen: seen},
	} {
		if _, err := ts.JS.PublishMsg(ctx, kv.FunctionMsg(streams.Config{}, fi)); err != nil {
			t.Fatal(err)
		}
	}
	// An entry written by another client whose name is no function name
	// (it would make the dashboard's Pause button post elsewhere) is not
	// a worker's: left out.
	bad := nats.NewMsg(streams.KVSubject(streams.Config{}.WithDefaults().FunctionsBucket(), "w3.x"))
	bad.Data = []byte(`{"name":"x/../../runs/some-run/cancel?","worker":"w3"}`)
	if _, err := ts.JS.PublishMsg(ctx, bad); err != nil {
		t.Fatal(err)
	}
	all, err := kv.ReadFunctions(ctx, ts.JS, streams.Config{}, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, fi := range all {
		got = append(got, fi.Name+"@"+fi.Worker)
	}
	want := []string{"billing.charge@w1", "emails.send@w1", "emails.send@w2"}
	if len(got) != len(want) {
		t.Fatalf("functions = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("functions = %v, want %v", got, want)
		}
	}
	if !all[0].Seen.Equal(seen) || all[0].Kind != jetflow.AtMostOnce {
		t.Fatalf("entry = %+v", all[0])
	}
	one, err := kv.ReadFunctions(ctx, ts.JS, streams.Config{}, "emails.send")
	if err != nil || len(one) != 2 {
		t.Fatalf("filtered = %+v, %v", one, err)
	}
	none, err := kv.ReadFunctions(ctx, ts.JS, streams.Config{}, "nobody.serves")
	if err != nil || none == nil || len(none) != 0 {
		t.Fatalf("unserved = %#v, %v", none, err)
	}
	// The entry carries the registry's TTL.
	e, err := ts.JS.Stream(ctx, streams.KVStream(streams.Config{}.WithDefaults().FunctionsBucket()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.GetLastMsgForSubject(ctx, streams.KVSubject(streams.Config{}.WithDefaults().FunctionsBucket(), "w1.billing.charge"))
	if err != nil || m.Header.Get("Nats-TTL") != kv.FunctionTTL.String() {
		t.Fatalf("TTL header = %q, %v", m.Header.Get("Nats-TTL"), err)
	}
}

func TestReadFunctionsWithoutBucket(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	_, err := kv.ReadFunctions(context.Background(), ts.JS, streams.Config{}, "")
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("err = %v, want ErrBucketNotFound", err)
	}
}

func TestStoreCronsReadsRecordsAndLastOutcome(t *testing.T) {
	t.Parallel()
	ts, st := provisioned(t)
	ctx := context.Background()
	// Nothing registered yet: an empty list, at once.
	start := time.Now()
	list, err := st.Crons(ctx)
	if err != nil || list == nil || len(list) != 0 {
		t.Fatalf("empty bucket: %#v, %v", list, err)
	}
	bucket := streams.Config{}.WithDefaults().CronsBucket()
	put := func(key string, v any) {
		t.Helper()
		data, _ := json.Marshal(v)
		if _, err := ts.JS.PublishMsg(ctx, kv.PutMsg(bucket, key, data)); err != nil {
			t.Fatal(err)
		}
	}
	// Only index entries: still no cron, and no wait for messages that
	// never come.
	put("due.1.3600.b-cron", nil)
	if list, err := st.Crons(ctx); err != nil || len(list) != 0 {
		t.Fatalf("index only: %#v, %v", list, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("reading an empty crons bucket took %s", d)
	}
	fired := time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)
	run := &jetflow.Run{ID: "cron-b-cron-1767344400", Name: "reports.daily", State: jetflow.Failed, Error: "boom",
		ScheduledTime: fired, CreationTime: fired, CompletedTime: fired}
	if _, err := st.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	put(kv.CronDefPrefix+"b-cron", kv.CronRecord{Name: "b-cron", Origin: kv.CronOriginCode, Spec: cronspec.Daily(9, 0),
		Function: "reports.daily", Enabled: true, Next: fired.Add(24 * time.Hour), Due: fired.Add(24 * time.Hour).Unix(),
		LastTime: fired, LastRun: run.ID, Fired: 1})
	put(kv.CronDefPrefix+"a-cron", kv.CronRecord{Name: "a-cron", Origin: kv.CronOriginRuntime, Spec: cronspec.Interval(time.Minute),
		Function: "cleanup.run", Enabled: false})
	put(kv.CronDefPrefix+"gone", kv.CronRecord{Name: "gone"})
	b, err := ts.JS.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, kv.CronDefPrefix+"gone"); err != nil {
		t.Fatal(err)
	}
	list, err = st.Crons(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "a-cron" || list[1].Name != "b-cron" {
		t.Fatalf("crons = %+v", list)
	}
	a, c := list[0], list[1]
	if a.Enabled || a.Last != nil || a.Origin != kv.CronOriginRuntime {
		t.Fatalf("a-cron = %+v", a)
	}
	if c.Last == nil || c.Last.RunID != run.ID || c.Last.State != jetflow.Failed || c.Last.Error != "boom" ||
		!c.Last.Time.Equal(fired) || c.Fired != 1 || c.Schedule != cronspec.Daily(9, 0) {
		t.Fatalf("b-cron = %+v, last %+v", c, c.Last)
	}
}

// Decide reads what Show reads, from the runs stream's leader: the last
// revision, ErrNotFound for a record never written or deleted, and a typed
// error for a bad id; leader says the leader answered.
func TestDecideReadsTheLastRevisionFromTheLeader(t *testing.T) {
	t.Parallel()
	_, st := provisioned(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	r := &jetflow.Run{ID: "latest-1", Name: "fn.a", State: jetflow.Pending, ScheduledTime: now, CreationTime: now}
	rev, err := st.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	r.State, r.StartedTime = jetflow.InProgress, now
	rev2, err := st.Write(ctx, r, rev, jetflow.Pending)
	if err != nil {
		t.Fatal(err)
	}
	got, leader, err := st.Decide(ctx, "latest-1")
	if err != nil || !leader {
		t.Fatalf("Decide: leader %v, %v", leader, err)
	}
	if got.Revision != rev2 || got.State != jetflow.InProgress || got.Name != "fn.a" {
		t.Fatalf("Decide = rev %d state %s name %q, want rev %d inProgress fn.a", got.Revision, got.State, got.Name, rev2)
	}
	if shown, err := st.Show(ctx, "latest-1"); err != nil || shown.Revision != rev2 || shown.State != jetflow.InProgress {
		t.Fatalf("Show = %+v, %v; want rev %d inProgress", shown, err, rev2)
	}
	if _, leader, err := st.Decide(ctx, "never-written"); !errors.Is(err, jetflow.ErrNotFound) || !leader {
		t.Fatalf("missing record: leader %v, %v, want the leader's ErrNotFound", leader, err)
	}
	if err := st.Runs().Delete(ctx, "latest-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Decide(ctx, "latest-1"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("deleted record: %v, want ErrNotFound", err)
	}
	if _, _, err := st.Decide(ctx, "bad id"); !errors.Is(err, jetflow.ErrInvalidRunID) {
		t.Fatalf("bad id: %v, want ErrInvalidRunID", err)
	}
	if _, err := st.Show(ctx, "bad id"); !errors.Is(err, jetflow.ErrInvalidRunID) {
		t.Fatalf("Show of a bad id: %v, want ErrInvalidRunID", err)
	}
}

// A replica behind answers Show (a display may be a moment stale), never
// Decide: with half of the direct gets answered by a replica that lacks
// every record, Show says "not found" for a stored record at least once,
// and Decide and Lookup never do.
func TestDecideIsNotAnsweredByAReplicaBehind(t *testing.T) {
	t.Parallel()
	ts, st := provisioned(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := st.Create(ctx, &jetflow.Run{ID: "kept-1", Name: "fn.a", State: jetflow.Pending, ScheduledTime: now, CreationTime: now}); err != nil {
		t.Fatal(err)
	}
	ts.StaleRuns(t)
	missed := 0
	for range 40 {
		if _, err := st.Show(ctx, "kept-1"); errors.Is(err, jetflow.ErrNotFound) {
			missed++
		}
		if r, leader, err := st.Decide(ctx, "kept-1"); err != nil || !leader || r.State != jetflow.Pending {
			t.Fatalf("Decide = %+v, leader %v, %v; want the pending record from the leader", r, leader, err)
		}
		// Lookup, Show with a "not found" asked of the leader, always
		// finds it; a record the leader lacks too is ErrNotFound.
		if r, err := st.Lookup(ctx, "kept-1"); err != nil || r.State != jetflow.Pending {
			t.Fatalf("Lookup = %+v, %v; want the pending record", r, err)
		}
		if _, err := st.Lookup(ctx, "never-1"); !errors.Is(err, jetflow.ErrNotFound) {
			t.Fatalf("Lookup of a run never written: %v, want ErrNotFound", err)
		}
	}
	if missed == 0 {
		t.Fatal("Show was never answered by the replica behind: the test proves nothing")
	}
}
