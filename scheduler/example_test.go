package scheduler_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

type ReminderArgs struct {
	Note string `json:"note"`
}

var Remind = jetflow.Define[ReminderArgs]("reminders.send")

func ExampleScheduler() {
	js, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	// The scheduler publishes delayed runs when they are due. Any number
	// may run; the one holding the lease does the work.
	s, err := scheduler.New(ctx, js, scheduler.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := s.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	id, err := p.RunAfter(ctx, 200*time.Millisecond, Remind.With(ReminderArgs{Note: "stand up"}))
	if err != nil {
		log.Fatal(err)
	}
	run, err := p.Get(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.State)

	// A worker runs it once the scheduler has published it. (Started
	// here, after the read above, so that the read finds it pending
	// however long that read took.)
	w, err := worker.New(ctx, js, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	worker.Handle(w, Remind, func(ctx context.Context, j *worker.Job[ReminderArgs]) error {
		fmt.Println("reminder:", j.Args.Note)
		return nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	run, err = p.Wait(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.State)
	fmt.Println("started at or after its scheduled time:", !run.StartedTime.Before(run.ScheduledTime))
	// Output:
	// pending
	// reminder: stand up
	// success
	// started at or after its scheduled time: true
}

// exampleServer starts an embedded JetStream server in a temp dir and
// returns a JetStream context on it, and a func that removes it all.
func exampleServer() (jetstream.JetStream, func()) {
	// A 1 s fsync interval instead of the default 10 ms: nats-server v2.15.2
	// sets a new file store's sync timer without its lock, a race that a
	// timer firing within 10 ms lets "go test -race" report.
	nc, closeAll, err := embedded.Dial("", embedded.Options{SyncEvery: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	return js, closeAll
}
