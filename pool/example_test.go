package pool_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// EmailArgs are the arguments of emails.send.
type EmailArgs struct {
	To string `json:"to"`
}

var (
	SendEmail = jetflow.Define[EmailArgs]("emails.send")
	EmailSent = jetflow.Define[jetflow.Completion]("emails.sent")
)

// A pool of at most two emails at a time across the cluster, at most 100
// per minute; the high-priority email goes first, and each email's outcome
// reaches an on-complete function once.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "jetflow-pool-example-")
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			log.Print(err)
		}
	}()
	// SyncEvery 1 s only to keep "go test -race" quiet about a nats-server
	// v2.15.2 timer race; the default (10 ms) is what services should use.
	srv, err := embedded.Start(embedded.Options{Dir: dir, SyncEvery: time.Second})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	nc, _ := srv.Connect()
	defer nc.Close()
	js, _ := jetstream.New(nc)

	// Workers serve the functions and the pool's done function.
	w, _ := worker.New(ctx, js, worker.Config{})
	worker.Handle(w, SendEmail, func(ctx context.Context, j *worker.Job[EmailArgs]) error {
		return j.SetResult("sent to " + j.Args.To)
	})
	done := make(chan jetflow.Completion, 3)
	worker.Handle(w, EmailSent, func(ctx context.Context, j *worker.Job[jetflow.Completion]) error {
		done <- j.Args
		return nil
	})
	if err := pool.Register(w); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	// The pool, and its dispatcher (any number may run; one is active).
	p, _ := producer.New(ctx, js, producer.Config{})
	pl, err := pool.New(ctx, p, pool.Config{
		Name: "emails", MaxParallelism: 2,
		RateLimit: pool.RateLimit{N: 100, Per: time.Minute},
	})
	if err != nil {
		panic(err)
	}
	if err := pl.Start(ctx); err != nil {
		panic(err)
	}
	defer func() {
		if err := pl.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	for _, to := range []string{"ann", "bob", "cy"} {
		prio := pool.Normal
		if to == "cy" {
			prio = pool.High
		}
		_, err := pl.Enqueue(ctx, SendEmail.With(EmailArgs{To: to}),
			pool.WithID("welcome-"+to), pool.WithPriority(prio),
			pool.WithOnComplete(jetflow.Call{Name: EmailSent.Name(), Args: map[string]string{"campaign": "welcome"}}))
		if err != nil {
			panic(err)
		}
	}
	got := map[string]jetflow.Completion{}
	for range 3 {
		c := <-done
		got[c.Run.ID] = c
	}
	for _, id := range []string{"welcome-ann", "welcome-bob", "welcome-cy"} {
		c := got[id]
		fmt.Printf("%s: %s, result %s, context %s\n", id, c.Run.State, c.Run.Result, c.Context)
	}
	it, _ := pl.Status(ctx, "welcome-cy")
	fmt.Println("status of welcome-cy:", it.State, "after", it.Attempts, "attempt; run", it.RunID)
	// Output:
	// welcome-ann: success, result "sent to ann", context {"campaign":"welcome"}
	// welcome-bob: success, result "sent to bob", context {"campaign":"welcome"}
	// welcome-cy: success, result "sent to cy", context {"campaign":"welcome"}
	// status of welcome-cy: success after 1 attempt; run emails-welcome-cy-1
}

// ReportArgs are the arguments of reports.rebuild.
type ReportArgs struct {
	Customer string `json:"customer"`
	Version  int    `json:"version"`
}

var RebuildReport = jetflow.Define[ReportArgs]("reports.rebuild")

// Items keyed by customer: at most one rebuild per customer at a time, and
// a burst of changes for one customer debounced into one rebuild with the
// last change's args; the others are recorded as debounced into it.
func Example_keys() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "jetflow-pool-keys-example-")
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			log.Print(err)
		}
	}()
	srv, err := embedded.Start(embedded.Options{Dir: dir, SyncEvery: time.Second})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	nc, _ := srv.Connect()
	defer nc.Close()
	js, _ := jetstream.New(nc)

	w, _ := worker.New(ctx, js, worker.Config{})
	ran := make(chan ReportArgs, 10)
	worker.Handle(w, RebuildReport, func(ctx context.Context, j *worker.Job[ReportArgs]) error {
		ran <- j.Args
		return nil
	})
	if err := pool.Register(w); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	p, _ := producer.New(ctx, js, producer.Config{})
	pl, err := pool.New(ctx, p, pool.Config{
		Name: "reports", MaxParallelism: 10,
		Key:      pool.KeyOf(func(a ReportArgs) string { return a.Customer }),
		KeyLimit: 1,
		Debounce: pool.Debounce{Window: 2 * time.Second, MaxWait: 10 * time.Second},
	})
	if err != nil {
		panic(err)
	}
	if err := pl.Start(ctx); err != nil {
		panic(err)
	}
	defer func() {
		if err := pl.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	for v := 1; v <= 3; v++ {
		id := fmt.Sprintf("acme-v%d", v)
		if _, err := pl.Enqueue(ctx, RebuildReport.With(ReportArgs{Customer: "acme", Version: v}), pool.WithID(id)); err != nil {
			panic(err)
		}
	}
	fmt.Printf("rebuilt %+v\n", <-ran)
	for v := 1; v <= 3; v++ {
		id := fmt.Sprintf("acme-v%d", v)
		for {
			it, err := pl.Status(ctx, id)
			if err == nil && it.Finished() {
				fmt.Printf("%s (key %s): %s %s\n", id, it.Key, it.State, it.Error)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Output:
	// rebuilt {Customer:acme Version:3}
	// acme-v1 (key acme): canceled jetflow: run canceled: debounced into acme-v3
	// acme-v2 (key acme): canceled jetflow: run canceled: debounced into acme-v3
	// acme-v3 (key acme): success
}
