// Command pool runs 100 items through a work pool with max parallelism 5,
// after Convex's workpool: however many workers serve the function, at most
// five items run at once across all of them; the first ten items are high
// priority and start first; every tenth item fails its first attempt and is
// retried by the pool; and every item's on-complete callback feeds a
// summary, exactly once per item.
//
//	go run ./examples/pool                         # embedded server in a temp dir
//	go run ./examples/pool --items 500 --parallelism 20
//	go run ./examples/pool --url nats://127.0.0.1:4222
//
// The handler of thumbnails.resize counts how many copies of itself run at
// once; the program prints the largest count it saw beside the limit. Worker,
// pool dispatcher and scheduler run in this one process; each could run in
// its own, and any number of workers and dispatchers may run. The program
// exits when every item's callback has run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// ResizeArgs are the arguments of thumbnails.resize.
type ResizeArgs struct {
	Image string `json:"image"`
	// Flaky makes the first attempt fail.
	Flaky bool `json:"flaky,omitempty"`
}

// The item function and the on-complete function. An on-complete function
// receives a jetflow.Completion: the item's outcome and the context given
// with the callback.
var (
	Resize  = jetflow.Define[ResizeArgs]("thumbnails.resize")
	Resized = jetflow.Define[jetflow.Completion]("thumbnails.resized")
)

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	items := flag.Int("items", 100, "number of items")
	parallelism := flag.Int("parallelism", 5, "max parallelism of the pool")
	verbose := flag.Bool("v", false, "log jetflow's info messages to stderr")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *items, *parallelism, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "pool:", err)
		os.Exit(1)
	}
}

// summary tallies the callbacks.
type summary struct {
	mu       sync.Mutex
	seen     map[string]int
	states   map[jetflow.State]int
	retried  int
	finished chan struct{}
	want     int
}

func (s *summary) add(c jetflow.Completion) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[c.Run.ID]++
	if s.seen[c.Run.ID] > 1 {
		return
	}
	s.states[c.Run.State]++
	if c.Run.Attempts > 1 {
		s.retried++
	}
	if len(s.seen) == s.want {
		close(s.finished)
	}
}

func run(ctx context.Context, url string, n, parallelism int, verbose bool) error {
	nc, closeAll, err := embedded.Dial(url, embedded.Options{})
	if err != nil {
		return err
	}
	defer closeAll()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}

	// Worker: the item handler, the callback, and the pool's own done
	// function (pool.Register), which gives slots back as items end.
	var cur, peak atomic.Int64
	sum := &summary{seen: map[string]int{}, states: map[jetflow.State]int{}, finished: make(chan struct{}), want: n}
	w, err := worker.New(ctx, js, worker.Config{Logger: logger, Concurrency: 3 * parallelism})
	if err != nil {
		return err
	}
	worker.Handle(w, Resize, func(ctx context.Context, j *worker.Job[ResizeArgs]) error {
		c := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
		}
		time.Sleep(time.Duration(5+rand.IntN(10)) * time.Millisecond) // the "resize"
		// Each attempt is a run of its own: attempt 1 of this item is run
		// pool.RunID("thumbnails", image, 1).
		if j.Args.Flaky && j.ID() == pool.RunID("thumbnails", j.Args.Image, 1) {
			return errors.New("storage timeout")
		}
		return j.SetResult("thumb-" + j.Args.Image)
	})
	worker.Handle(w, Resized, func(ctx context.Context, j *worker.Job[jetflow.Completion]) error {
		sum.add(j.Args)
		return nil
	})
	if err := pool.Register(w); err != nil {
		return err
	}

	p, err := producer.New(ctx, js, producer.Config{Logger: logger})
	if err != nil {
		return err
	}
	pl, err := pool.New(ctx, p, pool.Config{
		Name: "thumbnails", MaxParallelism: parallelism, Logger: logger,
		Retry: pool.Retry{MaxAttempts: 3, Backoff: jetflow.Backoff{Initial: 50 * time.Millisecond}},
	})
	if err != nil {
		return err
	}
	// A scheduler runs too, as in any deployment: its repair sweep covers a
	// process dying between two writes.
	s, err := scheduler.New(ctx, js, scheduler.Config{Logger: logger})
	if err != nil {
		return err
	}
	for _, start := range []func(context.Context) error{w.Start, pl.Start, s.Start} {
		if err := start(ctx); err != nil {
			return err
		}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = pl.Stop(sctx)
		_ = w.Stop(sctx)
		_ = s.Stop(sctx)
	}()
	fmt.Printf("pool thumbnails: max parallelism %d\n", parallelism)

	// 100 items in one batch: every 10th is flaky, the first ten are high
	// priority. Each has its callback, with the image name as context.
	entries := make([]pool.Entry, n)
	high, flaky := 0, 0
	for i := range n {
		img := fmt.Sprintf("img-%03d", i)
		opts := []pool.Option{pool.WithID(img), pool.WithOnComplete(jetflow.Call{Name: Resized.Name(), Args: img})}
		if i < 10 {
			opts = append(opts, pool.WithPriority(pool.High))
			high++
		}
		args := ResizeArgs{Image: img, Flaky: i%10 == 9}
		if args.Flaky {
			flaky++
		}
		entries[i] = pool.Entry{Call: Resize.With(args), Options: opts}
	}
	start := time.Now()
	for i := 0; i < n; i += pool.MaxBatch {
		if _, err := pl.EnqueueBatch(ctx, entries[i:min(n, i+pool.MaxBatch)]); err != nil {
			return err
		}
	}
	fmt.Printf("enqueued %d items (%d high priority, %d flaky)\n", n, high, flaky)

	select {
	case <-sum.finished:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(2 * time.Minute):
		return errors.New("items did not finish within 2 minutes")
	}
	took := time.Since(start)
	sum.mu.Lock()
	defer sum.mu.Unlock()
	fmt.Printf("all %d items finished in %s\n", len(sum.seen), took.Round(time.Millisecond))
	fmt.Printf("summary: %d succeeded, %d failed, %d canceled; %d needed a retry\n",
		sum.states[jetflow.Success], sum.states[jetflow.Failed], sum.states[jetflow.Canceled], sum.retried)
	fmt.Printf("max concurrent handlers observed: %d (limit %d)\n", peak.Load(), parallelism)
	it, err := pl.Status(ctx, "img-009")
	if err != nil {
		return err
	}
	fmt.Printf("img-009: %s after %d attempts, result %s\n", it.State, it.Attempts, it.Result)
	if peak.Load() > int64(parallelism) {
		return fmt.Errorf("%d handlers ran at once, above the limit %d", peak.Load(), parallelism)
	}
	return nil
}
