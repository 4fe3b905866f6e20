// Command progress is the background job of the seeds: a long job reports
// its progress on its run record, and the caller watches it move from
// pending to inProgress to success in real time (the useQuery-on-a-job-record
// pattern, with producer.Watch in place of a reactive query).
//
//	go run ./examples/progress                    # embedded server in a temp dir
//	go run ./examples/progress --items 20 --step 50ms
//	go run ./examples/progress --url nats://127.0.0.1:4222
//
// The handler reports progress as often as it likes; the worker coalesces the
// writes (worker.Config.ProgressInterval), so a tight loop cannot flood the
// bucket, and the last value is always written before the run ends.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// ImportArgs are the arguments of imports.run.
type ImportArgs struct {
	File  string `json:"file"`
	Items int    `json:"items"`
}

// Import is the background job.
var Import = jetflow.Define[ImportArgs]("imports.run")

func main() {
	items := flag.Int("items", 10, "items the job processes")
	step := flag.Duration("step", 100*time.Millisecond, "time per item")
	url := flag.String("url", "", "NATS URL (default: an embedded server in a temp dir)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *items, *step); err != nil {
		fmt.Fprintln(os.Stderr, "progress:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, items int, step time.Duration) error {
	nc, cleanup, err := embedded.Dial(url, embedded.Options{SyncEvery: time.Second})
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
	w, err := worker.New(ctx, js, worker.Config{ProgressInterval: step / 2})
	if err != nil {
		return err
	}
	worker.Handle(w, Import, func(ctx context.Context, j *worker.Job[ImportArgs]) error {
		for i := 1; i <= j.Args.Items; i++ {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(step): // the work of one item
			}
			if err := j.Progress(ctx, jetflow.Progress{
				Processed: int64(i), Total: int64(j.Args.Items),
				Percent: float64(100*i) / float64(j.Args.Items), Message: "importing " + j.Args.File,
			}); err != nil {
				return err
			}
		}
		return j.SetResult(map[string]int{"imported": j.Args.Items})
	})
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()

	// Watch first (a watch waits for the record), then enqueue under that
	// id, so the watcher sees every state from pending on.
	id := fmt.Sprintf("import-%d", time.Now().UnixNano())
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	updates, err := p.Watch(wctx, id)
	if err != nil {
		return err
	}
	if _, err := p.Enqueue(ctx, Import.With(ImportArgs{File: "customers.csv", Items: items}), producer.WithID(id)); err != nil {
		return err
	}
	var last *jetflow.Run
	for r := range updates {
		last = r
		line := string(r.State)
		if r.Progress != nil {
			line += fmt.Sprintf("  %3.0f%%  %d/%d  %s", r.Progress.Percent, r.Progress.Processed, r.Progress.Total, r.Progress.Message)
		}
		fmt.Println("job:", line)
	}
	if last == nil || last.State != jetflow.Success {
		return fmt.Errorf("job did not succeed: %+v", last)
	}
	fmt.Printf("done: %s, result %s, attempts %d\n", last.State, last.Result, last.Attempts)
	return nil
}
