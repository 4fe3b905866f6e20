package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nuid"
	"github.com/redis/go-redis/v9"
)

// asynqE2E enqueues n no-op tasks from enqueuers goroutines (Asynq has no
// batch insert) to a queue of its own, then starts a server of the given
// concurrency and waits until the queue reports all n processed. The rate
// is n over the time from the first enqueue to that report. The queue is
// deleted afterwards.
func asynqE2E(ctx context.Context, addr string, n, size, concurrency, enqueuers int) (float64, string, error) {
	if addr == "" {
		return 0, "", skipf("no -redis address given")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	info, err := rdb.Info(pctx, "server").Result()
	cancel()
	rdb.Close()
	if err != nil {
		return 0, "", skipf("Redis at -redis unreachable: %v", err)
	}
	version := "?"
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
			version = v
		}
	}

	opt := asynq.RedisClientOpt{Addr: addr}
	queue := "peers_" + strings.ToLower(nuid.Next())
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	defer func() { _ = insp.DeleteQueue(queue, true) }()
	client := asynq.NewClient(opt)
	defer client.Close()
	payload, err := json.Marshal(args(size))
	if err != nil {
		return 0, "", err
	}

	var handled atomic.Int64
	done := make(chan struct{})
	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency: concurrency,
		Queues:      map[string]int{queue: 1},
		LogLevel:    asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("peers:noop", func(context.Context, *asynq.Task) error {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})

	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for range max(enqueuers, 1) {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := client.EnqueueContext(ctx, asynq.NewTask("peers:noop", payload), asynq.Queue(queue)); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return 0, "", fmt.Errorf("asynq enqueue: %w", *e)
	}
	enqueued := time.Since(start)
	if err := srv.Start(mux); err != nil {
		return 0, "", fmt.Errorf("asynq server: %w", err)
	}
	defer srv.Shutdown()
	select {
	case <-done:
	case <-ctx.Done():
		return 0, "", fmt.Errorf("%d of %d Asynq tasks handled: %w", handled.Load(), n, ctx.Err())
	}
	// A task is done once the server has removed it from the active list
	// and counted it processed, after the handler returned.
	for {
		qi, err := insp.GetQueueInfo(queue)
		if err != nil {
			return 0, "", fmt.Errorf("asynq queue info: %w", err)
		}
		if qi.ProcessedTotal >= n && qi.Active == 0 && qi.Pending == 0 {
			elapsed := time.Since(start)
			if qi.FailedTotal > 0 {
				return 0, "", fmt.Errorf("%d Asynq tasks failed", qi.FailedTotal)
			}
			return rate(n, elapsed), fmt.Sprintf("Redis %s; enqueued in %s from %d goroutines, all processed at %s",
				version, enqueued.Round(time.Millisecond), enqueuers, elapsed.Round(time.Millisecond)), nil
		}
		select {
		case <-ctx.Done():
			return 0, "", fmt.Errorf("%d of %d Asynq tasks processed: %w", qi.ProcessedTotal, n, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
