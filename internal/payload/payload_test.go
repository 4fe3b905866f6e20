package payload_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/payload"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		ref  payload.Ref
		ok   bool
	}{
		{"reference", `{"jetflowPayload":{"name":"r1/args/X","size":20971520}}`, payload.Ref{Name: "r1/args/X", Size: 20971520}, true},
		{"with spaces", ` { "jetflowPayload" : { "name" : "r1/args/X" , "size" : 3 } } `, payload.Ref{Name: "r1/args/X", Size: 3}, true},
		{"a second key", `{"jetflowPayload":{"name":"r1/args/X","size":3},"to":"a@b.c"}`, payload.Ref{}, false},
		{"no name", `{"jetflowPayload":{"size":3}}`, payload.Ref{}, false},
		{"not an object inside", `{"jetflowPayload":"r1/args/X"}`, payload.Ref{}, false},
		{"the key as a value", `{"note":"jetflowPayload"}`, payload.Ref{}, false},
		{"small args", `{"to":"a@b.c"}`, payload.Ref{}, false},
		{"null", `null`, payload.Ref{}, false},
		{"empty", ``, payload.Ref{}, false},
		{"not JSON", `{"jetflowPayload":`, payload.Ref{}, false},
		{"longer than a reference", `{"jetflowPayload":{"name":"` + strings.Repeat("n", 1024) + `","size":3}}`, payload.Ref{}, false},
	}
	for _, c := range cases {
		ref, ok := payload.Parse([]byte(c.in))
		if ok != c.ok || ref != c.ref {
			t.Errorf("%s: Parse(%.60s) = %+v, %t; want %+v, %t", c.name, c.in, ref, ok, c.ref, c.ok)
		}
	}
}

func TestThreshold(t *testing.T) {
	t.Parallel()
	cases := []struct {
		max  int64
		want int
	}{
		{1 << 20, 256 << 10}, // NATS's default
		{8 << 20, 2 << 20},   // jetflow's embedded server
		{0, 0},               // not known: nothing offloaded
		{-1, 0},
	}
	for _, c := range cases {
		if got := payload.Threshold(c.max); got != c.want {
			t.Errorf("Threshold(%d) = %d, want %d", c.max, got, c.want)
		}
	}
	at := bytes.Repeat([]byte("a"), 256<<10)
	if payload.Above(at, 1<<20) || !payload.Above(append(at, 'a'), 1<<20) || payload.Above(append(at, 'a'), 0) {
		t.Error("Above: a payload at the threshold stays, one byte more goes; nothing goes when the max is not known")
	}
}

// A payload above the threshold goes to the bucket and comes back whole,
// through a server restart (file storage), on a server of NATS's default
// max payload; one at most the threshold is not touched; a reference to
// an object that is not there is jetflow.ErrPayloadMissing.
func TestOffloadAndResolveThroughARestart(t *testing.T) {
	t.Parallel()
	ts := testserver.StartMaxPayload(t, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := streams.Config{}.WithDefaults()
	if err := streams.Provision(ctx, ts.JS, cfg); err != nil {
		t.Fatal(err)
	}
	bucket := cfg.PayloadsBucket()
	small := []byte(`"` + strings.Repeat("s", 256<<10-2) + `"`)
	got, err := payload.Offload(ctx, ts.JS, bucket, "run-1", "args", small)
	if err != nil || !bytes.Equal(got, small) {
		t.Fatalf("a payload at the threshold: %d bytes back, %v; want it unchanged", len(got), err)
	}
	big := make([]byte, 20<<20)
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	ref, err := payload.Offload(ctx, ts.JS, bucket, "run-1", "args", big)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := payload.Parse(ref)
	if !ok || r.Size != len(big) || !strings.HasPrefix(r.Name, "run-1/args/") || len(ref) > 200 {
		t.Fatalf("reference %s: parsed %+v, %t", ref, r, ok)
	}
	obs, err := ts.JS.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if n := countObjects(ctx, t, obs); n != 1 {
		t.Fatalf("%d objects in the bucket, want 1 (the small payload stays inline)", n)
	}
	ts.Restart()
	testserver.Eventually(t, 10*time.Second, "reconnected", ts.NC.IsConnected)
	back, err := payload.Resolve(ctx, ts.JS, bucket, ref)
	if err != nil || !bytes.Equal(back, big) {
		t.Fatalf("resolved after a restart: %d bytes, %v; want the %d bytes written", len(back), err, len(big))
	}
	if back, err := payload.Resolve(ctx, ts.JS, bucket, small); err != nil || !bytes.Equal(back, small) {
		t.Fatalf("resolving no reference: %d bytes, %v; want it unchanged", len(back), err)
	}
	missing := []byte(`{"jetflowPayload":{"name":"run-2/args/none","size":3}}`)
	if _, err := payload.Resolve(ctx, ts.JS, bucket, missing); !errors.Is(err, jetflow.ErrPayloadMissing) {
		t.Fatalf("a reference to no object: %v, want jetflow.ErrPayloadMissing", err)
	}
	wrongSize := []byte(`{"jetflowPayload":{"name":"` + r.Name + `","size":3}}`)
	if _, err := payload.Resolve(ctx, ts.JS, bucket, wrongSize); !errors.Is(err, jetflow.ErrPayloadMissing) {
		t.Fatalf("a reference of another size: %v, want jetflow.ErrPayloadMissing", err)
	}
	if _, err := payload.Offload(ctx, ts.JS, bucket, "run-3", "args", make([]byte, payload.MaxSize+1)); !errors.Is(err, jetflow.ErrBadArgs) {
		t.Fatalf("a payload above MaxSize: %v, want jetflow.ErrBadArgs", err)
	}
	if n := countObjects(ctx, t, obs); n != 1 {
		t.Fatalf("%d objects in the bucket, want 1: a refused payload stores nothing", n)
	}
}

func countObjects(ctx context.Context, t *testing.T, obs jetstream.ObjectStore) int {
	t.Helper()
	list, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

func TestOwner(t *testing.T) {
	for name, want := range map[string]string{
		"order-42/args/Vb1X": "order-42", "wf_1/step-3.1/abc": "wf_1",
		"order-42/args": "", "a/b/c/d": "", "order 42/args/x": "", "/args/x": "", "x//y": "", "x/y/": "",
	} {
		got, ok := payload.Owner(name)
		if got != want || ok != (want != "") {
			t.Errorf("Owner(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

// The payload sweep's one rule: an object goes when its owner's record,
// seen ended, is gone, and its owner's parent has no record either.
func TestSweep(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	ret := 7 * 24 * time.Hour
	ended := now.Add(-ret - time.Minute)
	done := &jetflow.Run{ID: "r", State: jetflow.Success, CompletedTime: ended}
	child := &jetflow.Run{ID: "r", State: jetflow.Failed, CompletedTime: ended, Parent: "p"}
	marked := payload.Mark{Ended: ended}
	cases := []struct {
		name       string
		mark       payload.Mark
		rec        *jetflow.Run
		parentGone bool
		want       payload.Action
		wantMark   payload.Mark
	}{
		{"running: kept", payload.Mark{}, &jetflow.Run{State: jetflow.InProgress}, false, payload.Keep, payload.Mark{}},
		{"pending, marked by an earlier run of the id: kept", marked, &jetflow.Run{State: jetflow.Pending}, false, payload.Keep, marked},
		{"ended, unmarked: marked", payload.Mark{}, done, false, payload.MarkEnded, marked},
		{"ended, marked: kept", marked, done, false, payload.Keep, marked},
		{"ended child: marked with its parent", payload.Mark{}, child, false, payload.MarkEnded, payload.Mark{Ended: ended, Parent: "p"}},
		{"ended again (the id reused): marked anew", payload.Mark{Ended: ended.Add(-time.Hour)}, done, false, payload.MarkEnded, marked},
		{"no record, never seen ended: kept", payload.Mark{}, nil, true, payload.Keep, payload.Mark{}},
		{"no record, seen ended, retention passed: removed", marked, nil, true, payload.Remove, marked},
		{"no record, seen ended less than the retention ago: kept", payload.Mark{Ended: now.Add(-time.Hour)}, nil, true, payload.Keep, payload.Mark{Ended: now.Add(-time.Hour)}},
		{"no record, its parent's exists: kept", payload.Mark{Ended: ended, Parent: "p"}, nil, false, payload.Keep, payload.Mark{Ended: ended, Parent: "p"}},
		{"no record, nor its parent's: removed", payload.Mark{Ended: ended, Parent: "p"}, nil, true, payload.Remove, payload.Mark{Ended: ended, Parent: "p"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			act, m := payload.Sweep(c.mark, c.rec, now, ret, func(id string) bool {
				if id != "p" {
					t.Errorf("asked about %q", id)
				}
				return c.parentGone
			})
			if act != c.want || !m.Ended.Equal(c.wantMark.Ended) || m.Parent != c.wantMark.Parent {
				t.Errorf("got %v %+v, want %v %+v", act, m, c.want, c.wantMark)
			}
		})
	}
}

func TestMarkMetaRoundTrip(t *testing.T) {
	m := payload.Mark{Ended: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Parent: "p"}
	meta := m.Meta(map[string]string{"x": "y"})
	if got := payload.MarkOf(meta); !got.Ended.Equal(m.Ended) || got.Parent != "p" || meta["x"] != "y" {
		t.Fatalf("round trip: %+v from %v", got, meta)
	}
	if got := payload.MarkOf(map[string]string{payload.MetaEnded: "soon"}); !got.Ended.IsZero() {
		t.Fatalf("an unreadable mark read as %+v", got)
	}
}
