package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

type EmailArgs struct {
	To string `json:"to"`
}

var SendEmail = jetflow.Define[EmailArgs]("emails.send")

type PaymentCheckArgs struct {
	OrderID string `json:"orderId"`
}

var PaymentCheck = jetflow.Define[PaymentCheckArgs]("orders.paymentCheck")

func ExampleProducer_Enqueue() {
	js, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(ctx, js, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	worker.Handle(w, SendEmail, func(ctx context.Context, j *worker.Job[EmailArgs]) error {
		fmt.Println("sending an email to", j.Args.To)
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

	id, err := p.Enqueue(ctx, SendEmail.With(EmailArgs{To: "a@b.c"}))
	if err != nil {
		log.Fatal(err)
	}
	run, err := p.Wait(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.Name, run.State, string(run.Args))
	// Output:
	// sending an email to a@b.c
	// emails.send success {"to":"a@b.c"}
}

func ExampleProducer_Batch() {
	js, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(ctx, js, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	worker.Handle(w, SendEmail, func(ctx context.Context, j *worker.Job[EmailArgs]) error { return nil })
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	// All or none: the three records are written in one atomic batch.
	ids, err := p.Batch(ctx, []producer.Item{
		{Call: SendEmail.With(EmailArgs{To: "ann@example.com"})},
		{Call: SendEmail.With(EmailArgs{To: "bob@example.com"})},
		{Call: SendEmail.With(EmailArgs{To: "cid@example.com"})},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range ids {
		run, err := p.Wait(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(run.Args), run.State)
	}

	// Limits are checked before anything is written.
	_, err = p.Batch(ctx, make([]producer.Item, producer.MaxBatch+1))
	fmt.Println(errors.Is(err, producer.ErrTooManyRuns))
	// Output:
	// {"to":"ann@example.com"} success
	// {"to":"bob@example.com"} success
	// {"to":"cid@example.com"} success
	// true
}

func ExampleWithID() {
	js, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// The id is an idempotency key: an order's payment check is scheduled
	// once, however many times the request that creates it is retried.
	check := PaymentCheck.With(PaymentCheckArgs{OrderID: "order-42"})
	id, err := p.RunAfter(ctx, 30*time.Minute, check, producer.WithID("order-42-payment-check"))
	fmt.Println(id, err)

	id, err = p.RunAfter(ctx, 30*time.Minute, check, producer.WithID("order-42-payment-check"))
	fmt.Println(id, errors.Is(err, producer.ErrAlreadyExists))

	run, err := p.Get(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.State)

	// The payment arrived: the check is no longer needed.
	if err := p.Cancel(ctx, id); err != nil {
		log.Fatal(err)
	}
	run, err = p.Get(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.State)
	// Output:
	// order-42-payment-check <nil>
	// order-42-payment-check true
	// pending
	// canceled
}

// exampleServer starts an embedded JetStream server in a temp dir and
// returns a JetStream context on it, and a func that removes it all.
func ExampleProducer_EnqueueAsync() {
	js, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// Publishes are pipelined: each call returns before the server
	// confirms; Wait says when that run is durable.
	pending := make([]*producer.Pending, 0, 3)
	for _, to := range []string{"a@b.c", "d@e.f", "g@h.i"} {
		f, err := p.EnqueueAsync(ctx, SendEmail.With(EmailArgs{To: to}))
		if err != nil {
			log.Fatal(err)
		}
		pending = append(pending, f)
	}
	for _, f := range pending {
		if err := f.Wait(ctx); err != nil {
			log.Fatal(err)
		}
		run, err := p.Get(ctx, f.ID())
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(run.State, string(run.Args))
	}
	// Output:
	// pending {"to":"a@b.c"}
	// pending {"to":"d@e.f"}
	// pending {"to":"g@h.i"}
}

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
