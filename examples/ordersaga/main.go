// Command ordersaga is an order saga as a durable workflow on jetflow:
// reserve the items, charge the card, ship; when a step fails for good,
// the steps already done are compensated in reverse order (the charge
// refunded, the reservation released), each compensation a journaled step
// of its own, so a crash in the middle of compensating neither loses nor
// repeats one.
//
//	go run ./examples/ordersaga
//	go run ./examples/ordersaga --url nats://127.0.0.1:4222
//
// Two orders show both paths: order A goes through; order B's card is
// declined (a permanent failure of the charge function after its retries)
// and its reservation is released.
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

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// Order is the saga's input.
type Order struct {
	ID     string `json:"id"`
	Items  int    `json:"items"`
	Amount int    `json:"amount"`
	Card   string `json:"card"`
}

// ChargeArgs are the arguments of payments.charge.
type ChargeArgs struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
	Card   string `json:"card"`
}

// Charge is an ordinary at-most-once function (a card is never charged
// twice), called from the saga as a child run.
var Charge = jetflow.Define[ChargeArgs]("payments.charge", jetflow.WithKind(jetflow.AtMostOnce))

// ledger records what the services did, to show the saga's effects.
type ledger struct {
	mu    sync.Mutex
	lines []string
}

func (l *ledger) add(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := fmt.Sprintf(format, a...)
	l.lines = append(l.lines, line)
	fmt.Println(line)
}

var book = &ledger{}

func charge(_ context.Context, j *worker.Job[ChargeArgs]) error {
	if j.Args.Card == "declined" {
		return jetflow.Permanent(errors.New("card declined"))
	}
	book.add("charged %d to %s for order %s", j.Args.Amount, j.Args.Card, j.Args.Order)
	return j.SetResult("ch-" + j.Args.Order)
}

// Saga is the workflow. Every step, compensations included, is journaled.
var Saga = workflow.Define("orders.saga", func(wf *workflow.Context, o Order) (string, error) {
	var undo []func() error // compensations of the steps done, in order
	compensate := func(cause error) (string, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			if err := undo[i](); err != nil {
				return "", fmt.Errorf("compensating after %v: %w", cause, err)
			}
		}
		return fmt.Sprintf("order %s canceled: %v; compensated %d step(s)", o.ID, cause, len(undo)), nil
	}

	reservation, err := workflow.Step(wf, "reserve", func(ctx context.Context) (string, error) {
		book.add("reserved %d item(s) for order %s", o.Items, o.ID)
		return "res-" + o.ID, nil
	})
	if err != nil {
		return "", err
	}
	undo = append(undo, func() error {
		_, err := workflow.Step(wf, "release", func(ctx context.Context) (string, error) {
			book.add("released %s", reservation)
			return "released", nil
		})
		return err
	})

	chargeID, err := workflow.Call[string](wf, Charge.With(ChargeArgs{Order: o.ID, Amount: o.Amount, Card: o.Card}))
	if err != nil {
		return compensate(err)
	}
	undo = append(undo, func() error {
		_, err := workflow.Step(wf, "refund", func(ctx context.Context) (string, error) {
			book.add("refunded %s", chargeID)
			return "refunded", nil
		})
		return err
	})

	if _, err := workflow.Step(wf, "ship", func(ctx context.Context) (string, error) {
		book.add("shipped order %s", o.ID)
		return "shipped", nil
	}); err != nil {
		return compensate(err)
	}
	return fmt.Sprintf("order %s done: %s, %s", o.ID, reservation, chargeID), nil
})

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url); err != nil {
		fmt.Fprintln(os.Stderr, "ordersaga:", err)
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
	worker.Handle(w, Charge, charge)
	if err := workflow.Register(w, Saga); err != nil {
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

	run := fmt.Sprint(time.Now().UnixNano()) // fresh ids against a shared server
	orders := []Order{
		{ID: "A", Items: 2, Amount: 40, Card: "visa-4242"},
		{ID: "B", Items: 1, Amount: 15, Card: "declined"},
	}
	ids := map[string]string{}
	for _, o := range orders {
		id, err := workflow.Start(ctx, p, Saga, o, workflow.WithID("saga-"+o.ID+"-"+run))
		if err != nil {
			return err
		}
		ids[o.ID] = id
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, o := range orders {
		res, err := workflow.Result(wctx, p, Saga, ids[o.ID])
		if err != nil {
			return fmt.Errorf("order %s: %w", o.ID, err)
		}
		fmt.Println(res)
	}
	st, err := workflow.Get(ctx, p, ids["B"])
	if err != nil {
		return err
	}
	fmt.Println("order B's steps:")
	for _, s := range st.Steps {
		fmt.Printf("  %s %-5s %-16s %s\n", s.Step, s.Kind, s.Name, s.State)
	}
	return nil
}
