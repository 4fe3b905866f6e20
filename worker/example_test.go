package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

type EmailArgs struct {
	To string `json:"to"`
}

type ChargeArgs struct {
	OrderID string `json:"orderId"`
}

var (
	SendEmail = jetflow.Define[EmailArgs]("emails.send")
	Charge    = jetflow.Define[ChargeArgs]("payments.charge")
)

func ExampleHandle() {
	js, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	w, err := worker.New(ctx, js, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// Any error retries with backoff, until MaxAttempts are spent.
	worker.Handle(w, SendEmail, func(ctx context.Context, j *worker.Job[EmailArgs]) error {
		if j.Attempt() == 1 {
			fmt.Println("attempt 1: mail server busy")
			return errors.New("421 try again later")
		}
		fmt.Printf("attempt %d: sent to %s\n", j.Attempt(), j.Args.To)
		return nil
	}, worker.Options{MaxAttempts: 3, Backoff: jetflow.Backoff{Initial: 50 * time.Millisecond}})
	// Permanent stops retrying at once.
	worker.Handle(w, Charge, func(ctx context.Context, j *worker.Job[ChargeArgs]) error {
		fmt.Printf("attempt %d: charging %s\n", j.Attempt(), j.Args.OrderID)
		return jetflow.Permanent(errors.New("card declined"))
	}, worker.Options{MaxAttempts: 3})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()
	// Retries wait in the delayed bucket: the scheduler starts them when due.
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

	p := w.Producer()
	for _, call := range []jetflow.Call{
		SendEmail.With(EmailArgs{To: "a@b.c"}),
		Charge.With(ChargeArgs{OrderID: "order-42"}),
	} {
		id, err := p.Enqueue(ctx, call)
		if err != nil {
			log.Fatal(err)
		}
		run, err := p.Wait(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s, attempts: %d", run.Name, run.State, run.Attempts)
		if run.Error != "" {
			fmt.Printf(", error: %s", run.Error)
		}
		fmt.Println()
	}
	// Output:
	// attempt 1: mail server busy
	// attempt 2: sent to a@b.c
	// emails.send: success, attempts: 2
	// attempt 1: charging order-42
	// payments.charge: failed, attempts: 1, error: card declined
}

func ExampleJob_RunAfter() {
	js, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	type SignupArgs struct {
		User string `json:"user"`
	}
	signup := jetflow.Define[SignupArgs]("users.signup")
	w, err := worker.New(ctx, js, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	worker.Handle(w, signup, func(ctx context.Context, j *worker.Job[SignupArgs]) error {
		// A run scheduled by a retryable handler is committed only if this
		// attempt succeeds; a retry does not schedule it twice.
		_, err := j.RunAfter(ctx, 100*time.Millisecond, SendEmail.With(EmailArgs{To: j.Args.User}))
		return err
	})
	worker.Handle(w, SendEmail, func(ctx context.Context, j *worker.Job[EmailArgs]) error {
		fmt.Println("welcome email to", j.Args.To, "scheduled by a run:", j.Parent() != "")
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

	p := w.Producer()
	id, err := p.Enqueue(ctx, signup.With(SignupArgs{User: "ann@example.com"}))
	if err != nil {
		log.Fatal(err)
	}
	parent, err := p.Wait(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	child, err := p.Wait(ctx, parent.Children[0])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(parent.Name, parent.State, "->", child.Name, child.State)
	// Output:
	// welcome email to ann@example.com scheduled by a run: true
	// users.signup success -> emails.send success
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
