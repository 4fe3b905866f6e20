package main

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/jetflowtest"
	"github.com/nats-io/nats.go/jetstream"
)

// The order-payment story on jetflowtest's fake clock: the payment check
// is scheduled 30 minutes after each order; the order paid at minute 10
// has its check canceled, the other is expired at minute 30. The test
// takes milliseconds.
func TestPaymentCheckOnAFakeClock(t *testing.T) {
	t.Parallel()
	env := jetflowtest.New(t, jetflowtest.Options{})
	ctx := context.Background()
	orders, err := env.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: ordersBucket})
	if err != nil {
		t.Fatal(err)
	}
	app := &shop{orders: orders, p: env.Producer, after: 30 * time.Minute, runs: map[string]int{}}
	jetflowtest.Handle(env, PaymentCheck, app.paymentCheck)

	t0 := env.Now()
	paid, err := app.createOrder(ctx, "a book")
	if err != nil {
		t.Fatal(err)
	}
	unpaid, err := app.createOrder(ctx, "a lamp")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{paid, unpaid} {
		r := jetflowtest.RequireEnqueued(t, env, PaymentCheck, PaymentCheckArgs{OrderID: id},
			jetflowtest.RequireOpts{State: jetflow.Pending, ScheduledAt: t0.Add(30 * time.Minute)})
		if r.ID != checkID(id) {
			t.Fatalf("check of %s has id %s, want %s", id, r.ID, checkID(id))
		}
	}
	// Scheduling a check again (a retried request) makes no second one.
	if err := app.scheduleCheck(ctx, paid); err != nil {
		t.Fatal(err)
	}
	jetflowtest.RequireEnqueued(t, env, PaymentCheck, PaymentCheckArgs{OrderID: paid})

	env.Advance(10 * time.Minute)
	if err := app.pay(ctx, paid); err != nil {
		t.Fatal(err)
	}
	jetflowtest.RequireEnqueued(t, env, PaymentCheck, PaymentCheckArgs{OrderID: paid},
		jetflowtest.RequireOpts{State: jetflow.Canceled})

	env.Advance(20*time.Minute - time.Millisecond)
	if n := app.ran(unpaid); n != 0 {
		t.Fatalf("the check of %s ran %d times before minute 30", unpaid, n)
	}
	env.Advance(time.Millisecond)

	for _, c := range []struct {
		order, status string
		check         jetflow.State
		runs          int
	}{{paid, "paid", jetflow.Canceled, 0}, {unpaid, "expired", jetflow.Success, 1}} {
		o, _, err := app.get(ctx, c.order)
		if err != nil {
			t.Fatal(err)
		}
		r, err := env.Producer.Get(ctx, checkID(c.order))
		if err != nil {
			t.Fatal(err)
		}
		if o.Status != c.status || r.State != c.check || app.ran(c.order) != c.runs {
			t.Errorf("%s: order %s, check %s, %d check runs; want %s, %s, %d",
				c.order, o.Status, r.State, app.ran(c.order), c.status, c.check, c.runs)
		}
	}
	// A payment after the order expired is refused.
	if err := app.pay(ctx, unpaid); err != nil {
		t.Fatal(err)
	}
	if o, _, _ := app.get(ctx, unpaid); o.Status != "expired" {
		t.Fatalf("late payment changed %s to %s", unpaid, o.Status)
	}
}
