// Command gracefulworker is a worker that deploys without losing or
// repeating a run: on SIGTERM (Kubernetes' signal before it kills a pod)
// its readiness fails at once, it takes no new run, its running handlers
// have a grace period to finish, and those still running then are canceled
// and their runs handed back, unharmed, for the next worker to run at once.
//
//	go run ./examples/gracefulworker                  # the demo: embedded server in a temp dir
//	go run ./examples/gracefulworker --url nats://127.0.0.1:4222
//	go run ./examples/gracefulworker --serve --url nats://127.0.0.1:4222 --health :8080
//
// With --serve it is only the worker, as a deployment runs it: it serves
// reports.build until SIGTERM or SIGINT (worker.RunUntilSignal), and with
// --health its /livez and /readyz for the orchestrator's probes. It prints
// a line per run it starts, finishes and hands back, and exits 0 after a
// graceful stop.
//
// Without --serve it shows a deploy in one process: it enqueues --runs runs
// (the first --slow of them take --slow-work, the others --work), starts the
// worker, sends itself SIGTERM once half of the quick runs are done, and
// then starts a second worker, the new version, which runs what is left:
// every run succeeds, each after one attempt.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// ReportArgs are the arguments of reports.build: how long the work takes.
type ReportArgs struct {
	Millis int `json:"millis"`
}

// Build is the function the worker serves.
var Build = jetflow.Define[ReportArgs]("reports.build")

type flags struct {
	url, health           string
	serve                 bool
	runs, slow            int
	work, slowWork, grace time.Duration
	concurrency           int
}

func main() {
	var f flags
	flag.StringVar(&f.url, "url", "", "NATS URL (default: an embedded server in a temp dir)")
	flag.BoolVar(&f.serve, "serve", false, "only serve reports.build until SIGTERM or SIGINT")
	flag.StringVar(&f.health, "health", "", "with --serve: address to serve /livez and /readyz on, e.g. :8080")
	flag.DurationVar(&f.grace, "grace", 2*time.Second, "how long running handlers may finish after SIGTERM before they are canceled and their runs handed back")
	flag.IntVar(&f.concurrency, "concurrency", 4, "runs at once")
	flag.IntVar(&f.runs, "runs", 20, "demo: runs to enqueue")
	flag.IntVar(&f.slow, "slow", 2, "demo: how many of them are slow")
	flag.DurationVar(&f.work, "work", 50*time.Millisecond, "demo: the work of a quick run")
	flag.DurationVar(&f.slowWork, "slow-work", 5*time.Second, "demo: the work of a slow run")
	flag.Parse()
	var err error
	if f.serve {
		err = serve(f)
	} else {
		err = demo(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gracefulworker:", err)
		os.Exit(1)
	}
}

// tally counts what one worker's handler did.
type tally struct{ ran, handedBack atomic.Int64 }

// newWorker is the worker of a deployment: reports.build works for the
// run's Millis, and gives up when its context is canceled (the worker is
// stopping), which hands the run back.
func newWorker(ctx context.Context, js jetstream.JetStream, name string, concurrency int, t *tally) (*worker.Worker, error) {
	w, err := worker.New(ctx, js, worker.Config{ID: name, Concurrency: concurrency})
	if err != nil {
		return nil, err
	}
	worker.Handle(w, Build, func(ctx context.Context, j *worker.Job[ReportArgs]) error {
		fmt.Printf("start %s attempt %d\n", j.ID(), j.Attempt())
		select {
		case <-time.After(time.Duration(j.Args.Millis) * time.Millisecond):
		case <-ctx.Done():
			t.handedBack.Add(1)
			fmt.Printf("handed back %s\n", j.ID())
			return context.Cause(ctx)
		}
		t.ran.Add(1)
		fmt.Printf("ran %s attempt %d\n", j.ID(), j.Attempt())
		return nil
	})
	return w, nil
}

func serve(f flags) error {
	if f.url == "" {
		return errors.New("--serve needs --url")
	}
	ctx := context.Background()
	nc, cleanup, err := embedded.Dial(f.url, embedded.Options{})
	if err != nil {
		return err
	}
	defer cleanup()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	var t tally
	w, err := newWorker(ctx, js, "", f.concurrency, &t)
	if err != nil {
		return err
	}
	if f.health != "" {
		srv := &http.Server{Addr: f.health, Handler: w.Health(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.ListenAndServe() }()
		defer func() { _ = srv.Close() }()
	}
	go func() {
		// Say when the worker takes runs, for a script (or test) to wait on.
		for w.Ready() != nil {
			time.Sleep(50 * time.Millisecond)
		}
		fmt.Println("ready")
	}()
	err = w.RunUntilSignal(ctx, f.grace)
	fmt.Printf("stopped: %d ran, %d handed back; readiness: %v\n", t.ran.Load(), t.handedBack.Load(), w.Ready())
	return err
}

func demo(f flags) error {
	ctx := context.Background()
	nc, cleanup, err := embedded.Dial(f.url, embedded.Options{SyncEvery: time.Second})
	if err != nil {
		return err
	}
	defer cleanup()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		return err
	}
	ids := make([]string, f.runs)
	for i := range ids {
		d := f.work
		if i < f.slow {
			d = f.slowWork
		}
		if ids[i], err = p.Enqueue(ctx, Build.With(ReportArgs{Millis: int(d.Milliseconds())})); err != nil {
			return err
		}
	}
	fmt.Printf("enqueued %d runs, %d of them slow (%s)\n", f.runs, f.slow, f.slowWork)

	// Version 1 runs until SIGTERM.
	var old tally
	w1, err := newWorker(ctx, js, "v1", f.concurrency, &old)
	if err != nil {
		return err
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w1.RunUntilSignal(ctx, f.grace) }()
	for old.ran.Load() < int64(f.runs-f.slow)/2 {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("deploy: SIGTERM to version 1")
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		return err
	}
	if err := <-stopped; err != nil {
		return err
	}
	fmt.Printf("version 1 stopped: readiness %v; %d ran, %d handed back\n", w1.Ready(), old.ran.Load(), old.handedBack.Load())

	// Version 2 runs what is left.
	var cur tally
	w2, err := newWorker(ctx, js, "v2", f.concurrency, &cur)
	if err != nil {
		return err
	}
	if err := w2.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = w2.Stop(context.Background()) }()
	return summarize(ctx, p, ids, &old, &cur)
}

// summarize waits for every run and prints their outcomes.
func summarize(ctx context.Context, p *producer.Producer, ids []string, old, cur *tally) error {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	succeeded, onceEach := 0, true
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for _, id := range ids {
		wg.Go(func() {
			r, err := p.Wait(wctx, id)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if r.State == jetflow.Success {
				succeeded++
			}
			onceEach = onceEach && r.Attempts == 1
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("version 2: %d ran\n", cur.ran.Load())
	fmt.Printf("summary: %d of %d succeeded, each attempted once: %v, ran %d times in all\n",
		succeeded, len(ids), onceEach, old.ran.Load()+cur.ran.Load())
	return nil
}
