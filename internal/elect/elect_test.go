package elect

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go/jetstream"
)

func TestHeld(t *testing.T) {
	const ttl = 4 * time.Second
	for _, c := range []struct {
		since time.Duration
		want  bool
	}{
		{0, true},
		{time.Second, true},
		{3*time.Second - time.Nanosecond, true},
		{3 * time.Second, false}, // 3/4 of the TTL: another may take it a TTL after the write
		{10 * time.Second, false},
	} {
		if got := held(c.since, ttl); got != c.want {
			t.Errorf("held(%s, %s) = %v, want %v", c.since, ttl, got, c.want)
		}
	}
}

// Holds answers for the term a ctx carries: a term renewed just now holds,
// one whose last renewal was sent 3/4 of the TTL ago does not (a process
// paused that long resumes holding nothing), nor one that ended; a ctx of
// no term holds.
func TestHolds(t *testing.T) {
	const ttl = time.Second
	in := func(tm *term) context.Context {
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), termKey{}, tm))
		t.Cleanup(cancel)
		return ctx // derived, as a dispatch's request ctx is
	}
	fresh := &term{ttl: ttl, sent: time.Now()}
	stale := &term{ttl: ttl, sent: time.Now().Add(-ttl * 3 / 4)}
	over := &term{ttl: ttl, sent: time.Now(), over: true}
	switch {
	case !Holds(in(fresh)):
		t.Error("a term renewed just now does not hold")
	case Holds(in(stale)):
		t.Error("a term last renewed 3/4 of the TTL ago holds")
	case Holds(in(over)):
		t.Error("an ended term holds")
	case !Holds(context.Background()):
		t.Error("a ctx of no term does not hold")
	}
	stale.renewed(time.Now())
	if !Holds(in(stale)) {
		t.Error("a term renewed again does not hold")
	}
}

// A term's ctx holds while the term runs and not once it ended: lead's
// ctx carries the term Holds asks about.
func TestTermCtxHolds(t *testing.T) {
	env := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kvb, err := env.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "elect_test", LimitMarkerTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e := &Elector{Lease: kv.NewLease(env.JS, kvb, "leader", "me", time.Second, nil), TTL: time.Second}
	terms := make(chan context.Context, 1)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(rctx, func(tctx context.Context) {
			terms <- tctx
			<-tctx.Done()
		})
	}()
	var tctx context.Context
	select {
	case tctx = <-terms:
	case <-ctx.Done():
		t.Fatal("no term started")
	}
	// Renewals every TTL/5 keep it held past the first 3/4 TTL.
	time.Sleep(time.Second)
	if !Holds(tctx) {
		t.Fatal("a running term's ctx does not hold")
	}
	stop()
	<-done
	if Holds(tctx) {
		t.Fatal("an ended term's ctx holds")
	}
}
