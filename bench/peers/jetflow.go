package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// noop is the jetflow function every jetflow phase runs.
var noop = jetflow.Define[noopArgs]("peers.noop")

// workerOptions are jetflow bench's: enough concurrency that the worker is
// never a no-op's bottleneck, runs pulled 1000 ahead as raw pulls.
var workerOptions = worker.Options{Concurrency: 256, Prefetch: 1000, MaxParallel: 10_000}

// jetflowE2E enqueues n runs of a no-op function through EnqueueAsync
// (pipelined, at most maxPending unconfirmed, as raw publishes), then
// starts a worker and waits until all n records are success. With sched, a
// scheduler is started first and leads throughout, as in a deployment (its
// run indexer follows every record write). The rate is n over the time
// from the first enqueue to the last record written (the runs bucket's
// last message time), each role on a connection of its own.
func jetflowE2E(ctx context.Context, url, prefix string, n, size int, sched bool) (float64, string, error) {
	cfg := streams.Config{Prefix: prefix}
	pnc, pjs, err := connect(url, "peers-producer", jetstream.WithPublishAsyncMaxPending(maxPending))
	if err != nil {
		return 0, "", err
	}
	defer pnc.Close()
	p, err := producer.New(ctx, pjs, producer.Config{Streams: cfg})
	if err != nil {
		return 0, "", fmt.Errorf("producer: %w", err)
	}
	wnc, wjs, err := connect(url, "peers-worker")
	if err != nil {
		return 0, "", err
	}
	defer wnc.Close()
	w, err := worker.New(ctx, wjs, worker.Config{Streams: cfg})
	if err != nil {
		return 0, "", fmt.Errorf("worker: %w", err)
	}
	var handled atomic.Int64
	done := make(chan struct{})
	if err := worker.Register(w, noop, func(context.Context, *worker.Job[noopArgs]) error {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	}, workerOptions); err != nil {
		return 0, "", fmt.Errorf("worker: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = w.Stop(sctx)
		cancel()
	}()
	onc, ojs, err := connect(url, "peers-observer")
	if err != nil {
		return 0, "", err
	}
	defer onc.Close()
	if sched {
		stopScheduler, err := startScheduler(ctx, url, cfg)
		if err != nil {
			return 0, "", err
		}
		defer stopScheduler()
	}

	c := noop.With(args(size))
	start := time.Now()
	if err := enqueuePipelined(ctx, p, c, n); err != nil {
		return 0, "", err
	}
	enqueued := time.Since(start)
	if err := w.Start(ctx); err != nil {
		return 0, "", fmt.Errorf("worker: %w", err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return 0, "", fmt.Errorf("%d of %d runs handled: %w", handled.Load(), n, ctx.Err())
	}
	handledIn := time.Since(start)
	last, err := waitSuccess(ctx, ojs, cfg, n)
	if err != nil {
		return 0, "", err
	}
	elapsed := max(last.Sub(start), handledIn)
	return rate(n, elapsed), fmt.Sprintf("enqueued in %s, all success records written at %s",
		enqueued.Round(time.Millisecond), elapsed.Round(time.Millisecond)), nil
}

// startScheduler starts a scheduler of cfg's streams on a connection of
// its own and returns once it leads; stop stops it, then closes its
// connection.
func startScheduler(ctx context.Context, url string, cfg streams.Config) (stop func(), err error) {
	snc, sjs, err := connect(url, "peers-scheduler")
	if err != nil {
		return nil, err
	}
	s, err := scheduler.New(ctx, sjs, scheduler.Config{Streams: cfg})
	if err == nil {
		err = s.Start(ctx)
	}
	if err != nil {
		snc.Close()
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	stop = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.Stop(sctx)
		cancel()
		snc.Close()
	}
	for !s.IsLeader() {
		select {
		case <-ctx.Done():
			stop()
			return nil, fmt.Errorf("the scheduler never became leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return stop, nil
}

// enqueuePipelined enqueues n runs of c through EnqueueAsync, at most
// maxPending unconfirmed (as raw publishes), and returns once every one is
// confirmed.
func enqueuePipelined(ctx context.Context, p *producer.Producer, c jetflow.Call, n int) error {
	ring := make([]*producer.Pending, maxPending) // run i waits in slot i % maxPending
	for i := range n {
		f, err := p.EnqueueAsync(ctx, c)
		if err != nil {
			return fmt.Errorf("enqueue at run %d: %w", i, err)
		}
		if old := ring[i%maxPending]; old != nil {
			if err := old.Wait(ctx); err != nil {
				return fmt.Errorf("enqueue: %w", err)
			}
		}
		ring[i%maxPending] = f
	}
	for _, f := range ring {
		if f != nil {
			if err := f.Wait(ctx); err != nil {
				return fmt.Errorf("enqueue: %w", err)
			}
		}
	}
	return nil
}

// waitSuccess waits until n records of cfg's runs bucket are success and
// returns the time of the bucket's last write. It polls the stream's info
// until the bucket has been quiet for 50 ms and only then reads the
// records' headers, so that waiting weighs little on what is measured.
func waitSuccess(ctx context.Context, js jetstream.JetStream, cfg streams.Config, n int) (time.Time, error) {
	name := streams.KVStream(cfg.WithDefaults().RunsBucket())
	var last uint64
	changed := time.Now()
	var ok int
	for {
		st, err := js.Stream(ctx, name)
		if err == nil {
			if s := st.CachedInfo().State; s.LastSeq != last {
				last, changed = s.LastSeq, time.Now()
			}
		}
		if time.Since(changed) >= 50*time.Millisecond {
			if ok, err = countSuccess(ctx, js, cfg); err == nil && ok == n {
				return st.CachedInfo().State.LastTime, nil
			}
			changed = time.Now()
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d runs recorded success: %w", ok, n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// countSuccess counts the latest records of cfg's runs bucket in state
// success, reading headers only through one ordered consumer.
func countSuccess(ctx context.Context, js jetstream.JetStream, cfg streams.Config) (int, error) {
	bucket := cfg.WithDefaults().RunsBucket()
	st, err := js.Stream(ctx, streams.KVStream(bucket))
	if err != nil {
		return 0, err
	}
	if st.CachedInfo().State.Msgs == 0 {
		return 0, nil
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{streams.KVSubject(bucket, ">")},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly:    true,
	})
	if err != nil {
		return 0, err
	}
	it, err := c.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	n := 0
	for {
		m, err := it.Next()
		if err != nil {
			return n, fmt.Errorf("scan runs: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			return n, fmt.Errorf("scan runs: %w", err)
		}
		if m.Headers().Get("KV-Operation") == "" && m.Headers().Get("Nats-Marker-Reason") == "" &&
			jetflow.State(m.Headers().Get(kv.HeaderState)) == jetflow.Success {
			n++
		}
		if md.NumPending == 0 {
			return n, nil
		}
	}
}
