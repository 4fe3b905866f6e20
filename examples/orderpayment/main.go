// Command orderpayment is the order-payment check of Convex's scheduling
// docs, on jetflow: creating an order schedules orders.paymentCheck 30
// minutes later; when the payment arrives first, the check is canceled; when
// it does not, the check runs and marks the order expired.
//
//	go run ./examples/orderpayment                  # waits the full 30 minutes
//	go run ./examples/orderpayment --after 3s       # the same story in seconds
//	go run ./examples/orderpayment --url nats://127.0.0.1:4222
//
// Two orders show both paths: order 1 is paid in time (its check is
// canceled and never runs), order 2 is not (its check runs and expires it).
// Each check has an idempotency key, producer.WithID("order-<n>-payment-check"):
// scheduling it a second time (a retried request, a crash and restart
// between creating the order and scheduling its check) returns
// producer.ErrAlreadyExists instead of a second check.
//
// Producer, worker and scheduler run in this one process; each could run in
// its own. The program exits when both orders are settled.
package main

import (
	"context"
	"encoding/json"
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
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// PaymentCheckArgs are the arguments of orders.paymentCheck.
type PaymentCheckArgs struct {
	OrderID string `json:"orderId"`
}

// PaymentCheck expires an order that is still unpaid when it runs.
var PaymentCheck = jetflow.Define[PaymentCheckArgs]("orders.paymentCheck")

// Order is a row of the example's own orders table (a KV bucket).
type Order struct {
	Item   string `json:"item"`
	Status string `json:"status"` // pending, paid or expired
}

const ordersBucket = "example_orders"

// checkID is the idempotency key of an order's payment check.
func checkID(orderID string) string { return orderID + "-payment-check" }

// shop is the application: its orders table and the jetflow producer.
type shop struct {
	orders jetstream.KeyValue
	p      *producer.Producer
	after  time.Duration

	mu   sync.Mutex
	runs map[string]int // payment check runs per order, to show who ran
}

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	after := flag.Duration("after", 30*time.Minute, "how long an order waits for its payment")
	verbose := flag.Bool("v", false, "log jetflow's info messages to stderr")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *after, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "orderpayment:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, after time.Duration, verbose bool) error {
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
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	orders, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: ordersBucket})
	if err != nil {
		return fmt.Errorf("orders bucket: %w", err)
	}
	p, err := producer.New(ctx, js, producer.Config{Logger: logger})
	if err != nil {
		return err
	}
	app := &shop{orders: orders, p: p, after: after, runs: map[string]int{}}

	w, err := worker.New(ctx, js, worker.Config{Logger: logger})
	if err != nil {
		return err
	}
	worker.Handle(w, PaymentCheck, app.paymentCheck)
	s, err := scheduler.New(ctx, js, scheduler.Config{Logger: logger})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
		_ = s.Stop(sctx)
	}()

	// Two orders, each with its payment check.
	order1, err := app.createOrder(ctx, "a book")
	if err != nil {
		return err
	}
	order2, err := app.createOrder(ctx, "a lamp")
	if err != nil {
		return err
	}

	// The same check again: the idempotency key refuses a second one.
	_, err = p.RunAfter(ctx, after, PaymentCheck.With(PaymentCheckArgs{OrderID: order1}), producer.WithID(checkID(order1)))
	fmt.Printf("schedule %s again: %v (errors.Is ErrAlreadyExists: %t)\n",
		checkID(order1), err, errors.Is(err, producer.ErrAlreadyExists))
	if !errors.Is(err, producer.ErrAlreadyExists) {
		return fmt.Errorf("second schedule of %s: want ErrAlreadyExists, got %v", checkID(order1), err)
	}

	// Order 1 is paid in time: its check is canceled.
	if err := app.pay(ctx, order1); err != nil {
		return err
	}

	// Order 2 is never paid: its check runs when due.
	fmt.Printf("waiting %s for %s to run...\n", after, checkID(order2))
	wctx, cancel := context.WithTimeout(ctx, after+time.Minute)
	defer cancel()
	r2, err := p.Wait(wctx, checkID(order2))
	if err != nil {
		return fmt.Errorf("%s: %w", checkID(order2), err)
	}
	// Order 1's check was due before order 2's: had it not been canceled,
	// it would have run by now.
	r1, err := p.Get(ctx, checkID(order1))
	if err != nil {
		return err
	}
	for _, c := range []struct {
		order string
		run   *jetflow.Run
	}{{order1, r1}, {order2, r2}} {
		fmt.Printf("%s: %s (handler runs: %d)\n", checkID(c.order), c.run.State, app.ran(c.order))
	}
	fmt.Println("orders:")
	for _, id := range []string{order1, order2} {
		o, _, err := app.get(ctx, id)
		if err != nil {
			return err
		}
		fmt.Printf("  %s (%s): %s\n", id, o.Item, o.Status)
	}
	if r1.State != jetflow.Canceled || r2.State != jetflow.Success {
		return fmt.Errorf("checks ended %s and %s, want canceled and success", r1.State, r2.State)
	}
	return nil
}

// createOrder stores a new pending order and schedules its payment check.
// Convex does both in one transaction; here a crash between the two writes
// is repaired by calling scheduleCheck again, which the idempotency key
// makes safe.
func (a *shop) createOrder(ctx context.Context, item string) (string, error) {
	data, _ := json.Marshal(Order{Item: item, Status: "pending"})
	var id string
	for n := 1; ; n++ { // order numbers: the first free one
		id = fmt.Sprintf("order-%d", n)
		_, err := a.orders.Create(ctx, id, data)
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("create order: %w", err)
		}
		break
	}
	if err := a.scheduleCheck(ctx, id); err != nil {
		return "", err
	}
	fmt.Printf("%s created (%s, pending); %s scheduled in %s\n", id, item, checkID(id), a.after)
	return id, nil
}

func (a *shop) scheduleCheck(ctx context.Context, orderID string) error {
	_, err := a.p.RunAfter(ctx, a.after, PaymentCheck.With(PaymentCheckArgs{OrderID: orderID}),
		producer.WithID(checkID(orderID)))
	if errors.Is(err, producer.ErrAlreadyExists) {
		return nil // scheduled before: one check is enough
	}
	return err
}

// pay records the payment of an order and cancels its payment check. The
// order's revision decides a race with the check: whichever writes first
// wins, the other sees the new status.
func (a *shop) pay(ctx context.Context, orderID string) error {
	o, rev, err := a.get(ctx, orderID)
	if err != nil {
		return err
	}
	if o.Status != "pending" {
		fmt.Printf("%s: payment refused, the order is %s\n", orderID, o.Status)
		return nil
	}
	o.Status = "paid"
	data, _ := json.Marshal(o)
	if _, err := a.orders.Update(ctx, orderID, data, rev); err != nil {
		return fmt.Errorf("pay %s: %w", orderID, err)
	}
	if err := a.p.Cancel(ctx, checkID(orderID)); err != nil {
		return fmt.Errorf("cancel %s: %w", checkID(orderID), err)
	}
	r, err := a.p.Get(ctx, checkID(orderID))
	if err != nil {
		return err
	}
	fmt.Printf("%s paid; %s is %s\n", orderID, checkID(orderID), r.State)
	return nil
}

// paymentCheck is the handler of orders.paymentCheck: an order still
// pending when its check runs is expired.
func (a *shop) paymentCheck(ctx context.Context, j *worker.Job[PaymentCheckArgs]) error {
	id := j.Args.OrderID
	a.mu.Lock()
	a.runs[id]++
	a.mu.Unlock()
	o, rev, err := a.get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return jetflow.Permanent(fmt.Errorf("no order %s", id))
	}
	if err != nil {
		return err
	}
	if o.Status != "pending" {
		fmt.Printf("orders.paymentCheck %s: %s, nothing to do\n", id, o.Status)
		return nil
	}
	o.Status = "expired"
	data, _ := json.Marshal(o)
	if _, err := a.orders.Update(ctx, id, data, rev); err != nil {
		return err // paid meanwhile, or a transient error: the retry reads it again
	}
	fmt.Printf("orders.paymentCheck %s: no payment, order expired\n", id)
	return nil
}

func (a *shop) get(ctx context.Context, id string) (Order, uint64, error) {
	e, err := a.orders.Get(ctx, id)
	if err != nil {
		return Order{}, 0, err
	}
	var o Order
	err = json.Unmarshal(e.Value(), &o)
	return o, e.Revision(), err
}

func (a *shop) ran(orderID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[orderID]
}
