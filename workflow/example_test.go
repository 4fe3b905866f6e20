package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// Order is the input of the example's workflow.
type Order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// Fulfil reserves stock, waits for the payment event (up to a minute) and
// ships. Each step is journaled: the replay after the event returns the
// reservation without reserving again.
var Fulfil = workflow.Define("orders.fulfil", func(wf *workflow.Context, o Order) (string, error) {
	res, err := workflow.Step(wf, "reserve", func(ctx context.Context) (string, error) {
		fmt.Println("reserving stock for", o.ID)
		return "res-" + o.ID, nil
	})
	if err != nil {
		return "", err
	}
	paid, err := workflow.AwaitEvent[int](wf, "paid", time.Minute)
	if errors.Is(err, workflow.ErrEventTimeout) {
		return "canceled " + res, nil
	}
	if err != nil {
		return "", err
	}
	return workflow.Step(wf, "ship", func(ctx context.Context) (string, error) {
		return fmt.Sprintf("shipped %s, paid %d", res, paid), nil
	})
})

func Example() {
	nc, closeAll, err := embedded.Dial("", embedded.Options{SyncEvery: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer closeAll()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(ctx, js, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := workflow.Register(w, Fulfil); err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	id, err := workflow.Start(ctx, p, Fulfil, Order{ID: "o-1", Amount: 42}, workflow.WithID("fulfil-o-1"))
	if err != nil {
		log.Fatal(err)
	}
	// The payment may come before or after the workflow awaits it.
	if err := workflow.SendEvent(ctx, p, id, "paid", 42); err != nil {
		log.Fatal(err)
	}
	out, err := workflow.Result(ctx, p, Fulfil, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
	st, err := workflow.Get(ctx, p, id)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range st.Steps {
		fmt.Println(s.Step, s.Kind, s.Name, s.State)
	}
	// Output:
	// reserving stock for o-1
	// shipped res-o-1, paid 42
	// 1 step reserve done
	// 2 event paid done
	// 3 step ship done
}
