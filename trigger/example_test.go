package trigger_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Shipment is the args of orders.ship.
type Shipment struct {
	Order string `json:"order"`
}

var ShipOrder = jetflow.Define[Shipment]("orders.ship")

// Every order on the ORDERS stream becomes one run of orders.ship: the
// same order published twice (same Order-Id) is one run, and a message
// that is not an order is a failed run with the reason.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "jetflow-trigger-example-")
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

	// The user's stream, with its events already flowing.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		panic(err)
	}
	shipped := make(chan string, 4)
	w, _ := worker.New(ctx, js, worker.Config{})
	worker.Handle(w, ShipOrder, func(ctx context.Context, j *worker.Job[Shipment]) error {
		shipped <- j.Args.Order
		return nil
	})
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	// The trigger runs in the worker's process, on its producer.
	r := trigger.New(w.Producer(), trigger.Config{})
	err = trigger.Bind(r, trigger.Func(ShipOrder), trigger.Spec[Shipment]{
		Name: "ship", Stream: "ORDERS", Subjects: []string{"orders.created"}, IDHeader: "Order-Id",
		Map: func(m jetstream.Msg) (Shipment, error) {
			if len(m.Data()) == 0 {
				return Shipment{}, errors.New("empty order")
			}
			return Shipment{Order: string(m.Data())}, nil
		},
	})
	if err != nil {
		panic(err)
	}
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	defer func() {
		if err := r.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()

	for _, o := range []string{"A-1", "A-1", "B-2", ""} {
		m := &nats.Msg{Subject: "orders.created", Data: []byte(o), Header: nats.Header{"Order-Id": {"id-" + o}}}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			panic(err)
		}
	}
	got := []string{<-shipped, <-shipped}
	sort.Strings(got)
	fmt.Println("shipped", got)
	run, _ := w.Producer().Wait(ctx, trigger.HeaderRunID("ship", "id-A-1"))
	fmt.Println(run.ID, run.State)
	run, _ = w.Producer().Wait(ctx, trigger.HeaderRunID("ship", "id-"))
	fmt.Println(run.State, strings.Contains(run.Error, "empty order"))
	// Output:
	// shipped [A-1 B-2]
	// trg-ship-id-A-1 success
	// failed true
}
