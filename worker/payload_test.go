package worker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/payload"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

type bigArgs struct {
	Blob string `json:"blob"`
}

var bigRun = jetflow.Define[bigArgs]("test.big")

// blob is n bytes of text that differ along their length.
func blob(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return string(b)
}

// storedValue is the run record as the runs bucket holds it.
func storedValue(t *testing.T, e *env, id string) []byte {
	t.Helper()
	kvb, err := e.JS.KeyValue(context.Background(), streams.Config{}.WithDefaults().RunsBucket())
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kvb.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ent.Value()
}

// Args and a result of 20 MB, on a server of NATS's default max payload
// (1 MB), go through the payloads bucket: the handler gets its args whole
// after a server restart between the write and the read, and Get and Wait
// return the result whole after another restart. The record keeps
// references only.
func TestLargeArgsAndResultThroughServerRestarts(t *testing.T) {
	// Not parallel: 20 MB payloads under -race take the machine for a
	// while, and would slow the package's parallel tests past their
	// deadlines; the parallel tests start after this one.
	ts := testserver.StartMaxPayload(t, 1<<20)
	e := setupOn(t, ts, worker.Config{})
	in, out := blob(20<<20), strings.ToUpper(blob(20<<20))
	var ran atomic.Int32
	var gotArgs atomic.Value
	worker.Handle(e.W, bigRun, func(ctx context.Context, j *worker.Job[bigArgs]) error {
		ran.Add(1)
		gotArgs.Store(sha256.Sum256([]byte(j.Args.Blob)))
		return j.SetResult(out)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	id, err := e.P.Enqueue(ctx, bigRun.With(bigArgs{Blob: in}))
	if err != nil {
		t.Fatal(err)
	}
	ts.Restart() // written before, read after
	testserver.Eventually(t, 10*time.Second, "reconnected", ts.NC.IsConnected)
	e.start(t)
	r, err := e.P.Wait(ctx, id)
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	if r.State != jetflow.Success || ran.Load() != 1 {
		t.Fatalf("run %s: %s %q, handler ran %d times; want success, once", id, r.State, r.Error, ran.Load())
	}
	if sum, _ := gotArgs.Load().([32]byte); sum != sha256.Sum256([]byte(in)) {
		t.Fatal("the handler's args are not the 20 MB given to Enqueue")
	}
	want, _ := json.Marshal(out)
	if !bytes.Equal(r.Result, want) {
		t.Fatalf("Wait's result: %d bytes, want the handler's %d", len(r.Result), len(want))
	}
	stored := storedValue(t, e, id)
	if len(stored) > 4096 || bytes.Count(stored, []byte(`"`+payload.Key+`"`)) != 2 {
		t.Fatalf("the stored record has %d bytes: %.300s; want a small record with two references", len(stored), stored)
	}
	ts.Restart()
	testserver.Eventually(t, 10*time.Second, "reconnected", ts.NC.IsConnected)
	g, err := e.P.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	wantArgs, _ := json.Marshal(bigArgs{Blob: in})
	if !bytes.Equal(g.Result, want) || !bytes.Equal(g.Args, wantArgs) {
		t.Fatalf("Get after a restart: %d bytes of args, %d of result; want %d and %d", len(g.Args), len(g.Result), len(wantArgs), len(want))
	}
}

// A run whose args are a reference to an object the payloads bucket does
// not hold (published by another client, or expired) fails for good with
// jetflow.ErrPayloadMissing, its handler never called, and Get returns
// the typed error with the record.
func TestMissingPayloadFailsTheRun(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var ran atomic.Int32
	worker.Handle(e.W, hostileRec, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		ran.Add(1)
		return nil
	})
	e.start(t)
	publishRaw(t, e, "ref-missing", nil, []byte(`{"jetflowPayload":{"name":"ref-missing/args/gone","size":42}}`))
	// Get returns the record with the error of its args (below): wait on
	// the record.
	var r *jetflow.Run
	testserver.Eventually(t, 20*time.Second, "run ref-missing failed", func() bool {
		r, _ = e.P.Get(context.Background(), "ref-missing")
		return r != nil && r.State == jetflow.Failed
	})
	if !r.Permanent || r.Attempts != 1 || !strings.Contains(r.Error, jetflow.ErrPayloadMissing.Error()) || !strings.Contains(r.Error, jetflow.ErrBadArgs.Error()) {
		t.Fatalf("record: permanent %t, attempts %d, error %q; want a permanent failure naming the missing payload", r.Permanent, r.Attempts, r.Error)
	}
	if ran.Load() != 0 {
		t.Fatalf("the handler ran %d times, want never", ran.Load())
	}
	ctx := context.Background()
	got, err := e.P.Get(ctx, "ref-missing")
	if !errors.Is(err, jetflow.ErrPayloadMissing) || got == nil || got.State != jetflow.Failed {
		t.Fatalf("Get: %+v, %v; want the failed record and jetflow.ErrPayloadMissing", got, err)
	}
	if _, err := e.P.Wait(ctx, "ref-missing"); !errors.Is(err, jetflow.ErrPayloadMissing) {
		t.Fatalf("Wait: %v, want jetflow.ErrPayloadMissing", err)
	}
}

// A run with large args due later than the payloads bucket keeps them is
// refused before anything is written; one due within it is accepted.
func TestLargeArgsDueAfterTheirTTLAreRefused(t *testing.T) {
	t.Parallel()
	ts := testserver.StartMaxPayload(t, 1<<20)
	e := setupOn(t, ts, worker.Config{})
	ctx := context.Background()
	cfg := streams.Config{}.WithDefaults()
	args := bigRun.With(bigArgs{Blob: blob(300 << 10)})
	keep := cfg.PayloadTTL - cfg.Retention
	_, err := e.P.RunAfter(ctx, keep+time.Hour, args, producer.WithID("too-late"))
	if !errors.Is(err, producer.ErrArgsTooLarge) {
		t.Fatalf("large args due after %s: %v, want producer.ErrArgsTooLarge", keep, err)
	}
	if _, err := e.P.Get(ctx, "too-late"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("a refused run was written: %v", err)
	}
	if _, err := e.P.RunAfter(ctx, keep-time.Hour, args, producer.WithID("in-time")); err != nil {
		t.Fatalf("large args due within %s: %v", keep, err)
	}
	small := bigRun.With(bigArgs{Blob: "small"})
	if _, err := e.P.RunAfter(ctx, 10*keep, small, producer.WithID("small-late")); err != nil {
		t.Fatalf("small args due much later: %v", err)
	}
}
