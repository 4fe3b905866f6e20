package producer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

type rideArgs struct {
	N int `json:"n"`
}

var rideFn = jetflow.Define[rideArgs]("ride.work")

// Calls whose ctx allows it ride out a moment with no stream to answer
// (an election on a cluster): each returns its id, and each
// run exists exactly once afterwards.
func TestCallsRideOutAServerRestart(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// No stream answers for a moment (as while a cluster elects a new
	// leader): the function stream and the buckets take other subjects,
	// then theirs again.
	scfg := streams.Config{}.WithDefaults()
	var saved []jetstream.StreamConfig
	for _, name := range []string{scfg.FunctionStream(), streams.KVStream(scfg.RunsBucket()), streams.KVStream(scfg.DelayedBucket())} {
		st, err := ts.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		saved = append(saved, cfg)
		cfg.Subjects = []string{"away." + name}
		if _, err := ts.JS.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		time.Sleep(time.Second) // the outage the calls must outlast
		for _, cfg := range saved {
			if _, err := ts.JS.UpdateStream(ctx, cfg); err != nil {
				t.Error(err)
			}
		}
	}()
	type call struct {
		name string
		do   func(ctx context.Context) (string, error)
	}
	calls := []call{
		{"enqueue", func(ctx context.Context) (string, error) { return p.Enqueue(ctx, rideFn.With(rideArgs{1})) }},
		{"enqueue with id", func(ctx context.Context) (string, error) {
			return p.Enqueue(ctx, rideFn.With(rideArgs{2}), producer.WithID("ride-keyed"))
		}},
		{"run after", func(ctx context.Context) (string, error) { return p.RunAfter(ctx, time.Hour, rideFn.With(rideArgs{3})) }},
	}
	ids := make([]string, len(calls))
	errs := make([]error, len(calls))
	done := make(chan int)
	for i, c := range calls {
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			ids[i], errs[i] = c.do(cctx)
			done <- i
		}()
	}
	for range calls {
		<-done
	}
	<-restarted
	for i, c := range calls {
		if errs[i] != nil {
			t.Fatalf("%s through an outage: %v", c.name, errs[i])
		}
		r, err := p.Get(ctx, ids[i])
		if err != nil || r.State != jetflow.Pending || r.Name != rideFn.Name() {
			t.Fatalf("%s: run %s is %+v (%v), want pending", c.name, ids[i], r, err)
		}
	}
	// An idempotency key still says when it was used.
	if _, err := p.Enqueue(ctx, rideFn.With(rideArgs{2}), producer.WithID("ride-keyed")); !errors.Is(err, producer.ErrAlreadyExists) {
		t.Fatalf("second use of the key: %v, want ErrAlreadyExists", err)
	}
}
