package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/backlog"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// The backlog figures on the 3-node cluster match a direct count while the
// function consumer's leader moves: a worker holds 3 runs (its
// MaxParallel), the rest wait. After each of three leader step-downs (and
// 5 more runs enqueued), a read's in-flight figure is the handlers running
// and its ready figure the function's messages in the stream (a work-queue
// stream keeps each until it is acknowledged) less those in flight; and
// the leader that answered is the new one.
func TestClusterBacklogAcrossConsumerLeaderChanges(t *testing.T) {
	t.Parallel()
	url, scfg, nc, p, _ := stepDownEnv(t)
	_, js := connect(t, url)
	fn := jetflow.Define[args]("it.backlog")
	ctx := context.Background()
	w, err := worker.New(ctx, js, worker.Config{Streams: scfg})
	if err != nil {
		t.Fatal(err)
	}
	var running atomic.Int64
	hold := make(chan struct{})
	worker.Handle(w, fn, func(ctx context.Context, _ *worker.Job[args]) error {
		running.Add(1)
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return nil
	}, worker.Options{MaxParallel: 3, Concurrency: 3})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(hold)
		stopWithin(w.StopAndCancel)
	})
	cfg := scfg.WithDefaults()
	consumer := worker.ConsumerName(cfg.Prefix, fn.Name())
	enqueue := func(n int) {
		for i := range n {
			if _, err := p.Enqueue(ctx, fn.With(args{N: i})); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(10)
	testserver.Eventually(t, time.Minute, "3 runs held", func() bool { return running.Load() == 3 })

	r := backlog.New(js, scfg)
	// direct counts the function's messages in the stream.
	direct := func(ctx context.Context) (uint64, error) {
		st, err := js.Stream(ctx, cfg.FunctionStream())
		if err != nil {
			return 0, err
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(cfg.FunctionFilter(fn.Name())))
		if err != nil {
			return 0, err
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		return n, nil
	}
	leader := func(ctx context.Context) (string, error) {
		c, err := js.Consumer(ctx, cfg.FunctionStream(), consumer)
		if err != nil {
			return "", err
		}
		if ci := c.CachedInfo(); ci.Cluster != nil {
			return ci.Cluster.Leader, nil
		}
		return "", nil
	}
	total := uint64(10)
	for i := 1; i <= 3; i++ {
		var before string
		retry(t, 30*time.Second, "the consumer leader", func(ctx context.Context) (err error) {
			before, err = leader(ctx)
			return err
		})
		resp, err := nc.Request(fmt.Sprintf("$JS.API.CONSUMER.LEADER.STEPDOWN.%s.%s", cfg.FunctionStream(), consumer), nil, 10*time.Second)
		if err != nil {
			t.Fatalf("stepdown %d: %v", i, err)
		}
		var sd struct {
			Success bool `json:"success"`
		}
		if err := json.Unmarshal(resp.Data, &sd); err != nil || !sd.Success {
			t.Fatalf("stepdown %d: %s", i, resp.Data)
		}
		enqueue(5)
		total += 5
		var f backlog.Function
		var stored uint64
		var after string
		testserver.Eventually(t, time.Minute, fmt.Sprintf("figures after step-down %d", i), func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			figs, err := r.Read(ctx)
			if err != nil {
				return false
			}
			var ok bool
			if f, ok = figs.Function(fn.Name()); !ok {
				return false
			}
			if stored, err = direct(ctx); err != nil {
				return false
			}
			after, _ = leader(ctx)
			return stored == total && f.Ready == stored-uint64(running.Load()) && f.InFlight == int(running.Load())
		})
		if after == before || after == "" {
			t.Errorf("step-down %d: the consumer leader is %q, before %q", i, after, before)
		}
		if f.InFlight != 3 || f.Ready != total-3 || f.Waiting != total {
			t.Errorf("step-down %d: %+v, want 3 in flight and %d ready", i, f, total-3)
		}
		t.Logf("step-down %d: leader %s -> %s; %d ready, %d in flight, %d stored", i, before, after, f.Ready, f.InFlight, stored)
	}
}
