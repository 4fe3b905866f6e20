// Command retrier makes an unreliable external call reliable with jetflow's
// action retrier (Convex's action-retrier component).
//
//	go run ./examples/retrier                     # embedded server in a temp dir
//	go run ./examples/retrier --failures 2        # fail exactly twice
//	go run ./examples/retrier --url nats://127.0.0.1:4222
//
// payments.charge calls a payment gateway that answers 503 a random number
// of times (1 to 3) before it accepts the charge. The function is
// at-most-once: a charge must never be sent twice by accident, so jetflow
// never re-runs it by itself. The retrier runs it again, on purpose, after a
// growing delay (initial backoff * base^failures, here 100 ms * 2^k, times
// a random factor in [0.5, 1.5)), until it succeeds or has failed MaxFailures+1 times, and then runs the
// on-complete callback payments.charged exactly once with the outcome.
//
// Every step is a run record in JetStream: stop this program between two
// attempts and start it again on the same server, and the retrier goes on.
// The program exits when the callback has run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/retrier"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// ChargeArgs are the arguments of payments.charge.
type ChargeArgs struct {
	Order  string `json:"order"`
	Amount int    `json:"amountCents"`
}

// Receipt is what the gateway answers when it accepts a charge.
type Receipt struct {
	ChargeID string `json:"chargeId"`
	Calls    int    `json:"calls"`
}

// ChargedContext is the context the callback is given.
type ChargedContext struct {
	Order string `json:"order"`
}

var (
	// Charge is at-most-once: jetflow never re-runs it; the retrier does,
	// deliberately.
	Charge = jetflow.Define[ChargeArgs]("payments.charge", jetflow.WithKind(jetflow.AtMostOnce))
	// Charged is the on-complete callback: it receives the outcome.
	Charged = jetflow.Define[jetflow.Completion]("payments.charged")
)

// gateway is the unreliable external service: it fails its first n calls.
type gateway struct {
	mu    sync.Mutex
	fails int
	calls int
}

func (g *gateway) charge(a ChargeArgs) (Receipt, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if g.calls <= g.fails {
		return Receipt{}, fmt.Errorf("gateway: 503 service unavailable (call %d)", g.calls)
	}
	return Receipt{ChargeID: fmt.Sprintf("ch_%s_%d", a.Order, g.calls), Calls: g.calls}, nil
}

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	failures := flag.Int("failures", 0, "how many calls the gateway fails before it succeeds; 0: random, 1 to 3")
	backoff := flag.Duration("backoff", 100*time.Millisecond, "the retrier's initial backoff")
	verbose := flag.Bool("v", false, "log jetflow's info messages to stderr")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *failures <= 0 {
		*failures = 1 + rand.IntN(3)
	}
	if err := run(ctx, *url, *failures, *backoff, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "retrier:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, failures int, backoff time.Duration, verbose bool) error {
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
	p, err := producer.New(ctx, js, producer.Config{Logger: logger})
	if err != nil {
		return err
	}
	// The retrier: Convex's defaults are 250 ms, base 2, 4 failures, with
	// jitter; a shorter initial backoff keeps the demo quick.
	r := retrier.New(p, retrier.Options{InitialBackoff: backoff})

	gw := &gateway{fails: failures}
	fmt.Printf("the gateway will fail %d time(s) before it accepts the charge\n", failures)
	w, err := worker.New(ctx, js, worker.Config{Logger: logger})
	if err != nil {
		return err
	}
	worker.Handle(w, Charge, func(ctx context.Context, j *worker.Job[ChargeArgs]) error {
		rec, err := gw.charge(j.Args)
		if err != nil {
			fmt.Printf("payments.charge %s: %v\n", j.ID(), err)
			return err
		}
		fmt.Printf("payments.charge %s: accepted, %s\n", j.ID(), rec.ChargeID)
		return j.SetResult(rec)
	})
	worker.Handle(w, Charged, func(ctx context.Context, j *worker.Job[jetflow.Completion]) error {
		st, err := retrier.FromCompletion(j.Args)
		if err != nil {
			return jetflow.Permanent(err)
		}
		var c ChargedContext
		if err := json.Unmarshal(j.Args.Context, &c); err != nil {
			return jetflow.Permanent(err)
		}
		switch st.State {
		case jetflow.Success:
			var rec Receipt
			if err := st.Decode(&rec); err != nil {
				return jetflow.Permanent(err)
			}
			fmt.Printf("payments.charged: order %s %s after %d attempts, charge %s\n", c.Order, st.State, st.Attempts, rec.ChargeID)
		default:
			fmt.Printf("payments.charged: order %s %s after %d attempts: %s\n", c.Order, st.State, st.Attempts, st.Error)
		}
		return nil
	})
	// The retrier's own functions (start and step) run on this worker too.
	if err := r.Register(w); err != nil {
		return err
	}
	// The scheduler publishes the delayed retries when they are due.
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

	order := "order-1"
	id, err := r.Run(ctx, Charge.With(ChargeArgs{Order: order, Amount: 4200}),
		retrier.WithID("charge-"+order),
		retrier.WithOnComplete(jetflow.Call{Name: Charged.Name(), Args: ChargedContext{Order: order}}))
	if errors.Is(err, producer.ErrAlreadyExists) {
		fmt.Printf("retrier %s exists already (a previous run of this program); waiting for it\n", id)
	} else if err != nil {
		return err
	}
	fmt.Printf("retrier %s started\n", id)

	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := r.Wait(wctx, id)
	if err != nil {
		return fmt.Errorf("retrier %s: %w", id, err)
	}
	// The callback is its own run: wait until it has run, exactly once.
	if done, err := p.Wait(wctx, jetflow.CompletionID(id)); err != nil || done.State != jetflow.Success {
		return fmt.Errorf("on-complete of %s: %v %v", id, done, err)
	}

	// The schedule the retrier kept: each attempt is its own run.
	fmt.Printf("retrier %s: %s, %d attempts\n", id, st.State, st.Attempts)
	var prev *jetflow.Run
	for n := 1; n <= st.Attempts; n++ {
		a, err := p.Get(ctx, retrier.AttemptID(id, n))
		if err != nil {
			return err
		}
		wait := ""
		if prev != nil {
			wait = fmt.Sprintf(", due %s after attempt %d ended", a.ScheduledTime.Sub(prev.CompletedTime).Round(time.Millisecond), n-1)
		}
		fmt.Printf("  %s: %s%s\n", a.ID, a.State, wait)
		prev = a
	}
	if st.State != jetflow.Success {
		return fmt.Errorf("retrier %s ended %s: %s", id, st.State, st.Error)
	}
	return nil
}
