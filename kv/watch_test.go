package kv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A watch whose consumer is not created in time is given up with
// ErrWatchSlow, not waited for the client's whole timeout; one started
// again once the server answers works.
func TestWatchWithinGivesUpASlowStart(t *testing.T) {
	env := testserver.Start(t)
	g := testserver.NewGate(t, env.Port)
	nc, err := nats.Connect(g.URL(), nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "watched"})
	if err != nil {
		t.Fatal(err)
	}

	g.Hold() // the server does not answer
	w, err := kv.WatchWithin(ctx, b, ">", kv.WatchWait, jetstream.UpdatesOnly())
	g.Open()
	if !errors.Is(err, kv.ErrWatchSlow) || w != nil {
		t.Fatalf("watch started while the server did not answer: %v, %v; want kv.ErrWatchSlow", w, err)
	}

	// Started again, with the bound doubled each time it is too short (a
	// loaded machine works through what the gate held).
	wait := kv.NextWatchWait(kv.WatchWait, err)
	for {
		w, err = kv.WatchWithin(ctx, b, "a.>", wait, jetstream.UpdatesOnly())
		if !errors.Is(err, kv.ErrWatchSlow) {
			break
		}
		wait = kv.NextWatchWait(wait, err)
	}
	if err != nil {
		t.Fatalf("watch started again: %v", err)
	}
	defer func() { _ = w.Stop() }()
	if _, err := b.Put(ctx, "b.1", []byte("other")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "a.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w.Updates():
		if e == nil || e.Key() != "a.1" || string(e.Value()) != "x" {
			t.Fatalf("update %v, want a.1=x", e)
		}
	case <-ctx.Done():
		t.Fatal("no update")
	}
}
