// Command cart is a shopping cart as a long-lived entity workflow on
// jetflow: opened by the first event sent to it (signal with start: two
// concurrent calls, one cart), filled by updates that the workflow
// validates and answers once journaled, read by a query while it waits,
// and kept short by continuing as new every few items.
//
//	go run ./examples/cart
//	go run ./examples/cart --url nats://127.0.0.1:4222
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// State is the cart, carried from one run to the next.
type State struct {
	Customer string `json:"customer"`
	Items    int    `json:"items"`
	Run      int    `json:"run"`
}

// Item is an update's input.
type Item struct {
	Name string `json:"name"`
	Qty  int    `json:"qty"`
}

// itemsPerRun: after this many updates a run continues as new, so that no
// run's journal (and replay) grows with the cart's life.
const itemsPerRun = 3

var errBadQty = errors.New("quantity must be positive")

// Cart is the workflow.
var Cart = workflow.Define("shop.cart", func(wf *workflow.Context, st State) (string, error) {
	st.Run++
	workflow.SetQueryHandler(wf, "cart", func() (State, error) { return st, nil })
	if st.Customer == "" {
		who, err := workflow.AwaitEvent[string](wf, "open", 0)
		if err != nil {
			return "", err
		}
		st.Customer = who
	}
	for range itemsPerRun {
		checkout := false
		err := workflow.AwaitUpdate(wf, "add", 0, func(it Item) (int, error) {
			checkout = it.Name == "checkout"
			st.Items += it.Qty
			return st.Items, nil
		}, func(it Item) error {
			if it.Qty < 0 || it.Qty == 0 && it.Name != "checkout" {
				return errBadQty
			}
			return nil
		})
		if err != nil {
			return "", err
		}
		if checkout {
			return fmt.Sprintf("%s paid for %d item(s) over %d run(s)", st.Customer, st.Items, st.Run), nil
		}
	}
	return "", workflow.ContinueAsNew(wf, st)
})

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url); err != nil {
		fmt.Fprintln(os.Stderr, "cart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string) error {
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
	p, err := producer.New(ctx, js, producer.Config{Logger: logger})
	if err != nil {
		return err
	}
	w, err := worker.New(ctx, js, worker.Config{Logger: logger})
	if err != nil {
		return err
	}
	if err := workflow.Register(w, Cart); err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	id := fmt.Sprintf("cart-%d", time.Now().UnixNano()) // fresh against a shared server

	// Two services open the same cart at once: one workflow, both events.
	var wg sync.WaitGroup
	started := make([]bool, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { started[i], errs[i] = workflow.SendEventWithStart(ctx, p, Cart, id, State{}, "open", "alice") })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	n := 0
	for _, s := range started {
		if s {
			n++
		}
	}
	fmt.Printf("opened the cart: started by %d of 2 calls\n", n)

	for _, it := range []Item{{"book", 1}, {"pen", 3}, {"lamp", -2}, {"mug", 2}, {"card", 1}} {
		total, err := workflow.Update[Item, int](ctx, p, id, "add", it)
		switch {
		case errors.Is(err, workflow.ErrUpdateRejected):
			fmt.Printf("add %s x%d: rejected (errors.Is ErrUpdateRejected: true)\n", it.Name, it.Qty)
		case err != nil:
			return err
		default:
			fmt.Printf("add %s x%d: %d item(s)\n", it.Name, it.Qty, total)
		}
	}
	st, err := workflow.Query[State](ctx, p, id, "cart")
	if err != nil {
		return err
	}
	fmt.Printf("query: %s has %d item(s), in run %d of the cart\n", st.Customer, st.Items, st.Run)
	if _, err := workflow.Update[Item, int](ctx, p, id, "add", Item{Name: "checkout"}); err != nil {
		return err
	}
	res, err := workflow.Result(ctx, p, Cart, id)
	if err != nil {
		return err
	}
	fmt.Println("result:", res)
	return nil
}
