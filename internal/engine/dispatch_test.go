package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
)

var dispatched = jetflow.Define[struct{ N int }]("engine.dispatched")

// The roles reach a producer's plumbing through the engine: its
// Dispatcher (Of) and the option that holds a child for its parent.
func TestDispatcherOfProducer(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d := engine.Of(p)
	if d == nil || d.Store() == nil || d.Runs() == nil || d.Streams().Prefix != "jetflow" {
		t.Fatalf("dispatcher of a producer: %+v", d)
	}
	hold, ok := engine.HoldOption().(producer.Option)
	if !ok {
		t.Fatalf("HoldOption is %T, want a producer.Option", engine.HoldOption())
	}

	// A held run is written, not dispatched.
	id, err := p.Enqueue(ctx, dispatched.With(struct{ N int }{1}), hold, producer.WithParent("parent-1"), producer.WithID("held-1"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.Store().Show(ctx, id)
	if err != nil || r.State != jetflow.Pending || r.HeldBy != "parent-1" {
		t.Fatalf("held run: %+v %v", r, err)
	}
	if q, err := d.Store().Queued(ctx, r.Name, id); err != nil || q {
		t.Fatalf("held run queued %v (%v): it must wait for its parent", q, err)
	}
	// Release clears the hold and publishes it.
	if err := d.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	if r, err := d.Store().Show(ctx, id); err != nil || r.HeldBy != "" || r.State != jetflow.Pending {
		t.Fatalf("released run: %+v %v", r, err)
	}
	if q, err := d.Store().Queued(ctx, r.Name, id); err != nil || !q {
		t.Fatalf("released run queued %v (%v)", q, err)
	}
	env := engine.Envelope(r)
	if env.ID != id || env.Function != dispatched.Name() || env.Attempt != 1 || env.Parent != "parent-1" {
		t.Fatalf("envelope %+v", env)
	}

	// Complete schedules the callback once, under its derived id.
	args, _ := json.Marshal(map[string]string{"k": "v"})
	done := &jetflow.Run{ID: "done-1", Name: dispatched.Name(), State: jetflow.Success, CompletedTime: time.Now().UTC(),
		OnComplete: &jetflow.Callback{Function: dispatched.Name(), Args: args}}
	for range 2 {
		if err := d.Complete(ctx, done); err != nil {
			t.Fatal(err)
		}
	}
	cb, err := p.Get(ctx, jetflow.CompletionID(done.ID))
	if err != nil || cb.Parent != done.ID || cb.State != jetflow.Pending {
		t.Fatalf("callback run: %+v %v", cb, err)
	}
	var c jetflow.Completion
	if err := json.Unmarshal(cb.Args, &c); err != nil || c.Run.ID != done.ID || string(c.Context) != string(args) {
		t.Fatalf("callback args %s: %v", cb.Args, err)
	}
	// A run not ended, or without a callback, has none.
	if err := d.Complete(ctx, &jetflow.Run{ID: "x", State: jetflow.Pending, OnComplete: done.OnComplete}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, jetflow.CompletionID("x")); err == nil {
		t.Fatal("callback of a run that has not ended")
	}
}

func TestMayRedispatch(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	const window = 2 * time.Minute
	run := func(st jetflow.State, attempts int, held string, age time.Duration) *jetflow.Run {
		return &jetflow.Run{State: st, Attempts: attempts, HeldBy: held, CreationTime: now.Add(-age)}
	}
	cases := []struct {
		name string
		r    *jetflow.Run
		want bool
	}{
		{"pending, new, just created", run(jetflow.Pending, 0, "", time.Second), true},
		{"created half the window ago: a publish then may have left the window", run(jetflow.Pending, 0, "", window/2), false},
		{"attempted", run(jetflow.Pending, 1, "", time.Second), false},
		{"held by its parent", run(jetflow.Pending, 0, "parent", time.Second), false},
		{"running", run(jetflow.InProgress, 1, "", time.Second), false},
		{"ended", run(jetflow.Success, 1, "", time.Second), false},
	}
	for _, c := range cases {
		if got := engine.MayRedispatch(c.r, now, window); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A call whose create landed but whose answer was lost, and which failed
// before it dispatched, leaves a pending record with no message. The next
// call with that id is told ErrAlreadyExists, and takes the run for
// accepted: the producer then dispatches it too (no scheduler runs here to
// repair it).
func TestExistingRunFoundByACreateIsDispatched(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d := engine.Of(p)
	now := time.Now().UTC()
	args, _ := json.Marshal(struct{ N int }{7})
	r := &jetflow.Run{ID: "landed-1", Name: dispatched.Name(), Kind: jetflow.Retryable, Args: args,
		State: jetflow.Pending, ScheduledTime: now, CreationTime: now}
	if _, err := d.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if q, err := d.Store().Queued(ctx, r.Name, r.ID); err != nil || q {
		t.Fatalf("queued %v (%v) before anything dispatched it", q, err)
	}
	_, err = p.Enqueue(ctx, dispatched.With(struct{ N int }{7}), producer.WithID(r.ID))
	if !errors.Is(err, producer.ErrAlreadyExists) {
		t.Fatalf("Enqueue of an existing id: %v, want ErrAlreadyExists", err)
	}
	testserver.Eventually(t, 30*time.Second, "the existing run dispatched", func() bool {
		q, err := d.Store().Queued(ctx, r.Name, r.ID)
		return err == nil && q
	})
}
