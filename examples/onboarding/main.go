// Command onboarding is a durable onboarding workflow on jetflow: create
// the user's account, send a welcome email, wait three days, and send a
// follow-up email unless the user activated the account meanwhile.
//
//	go run ./examples/onboarding                  # waits the full 3 days
//	go run ./examples/onboarding --wait 2s        # the same story in seconds
//	go run ./examples/onboarding --url nats://127.0.0.1:4222
//
// Two users show both paths: alice activates her account during the wait
// (an event sent to her workflow), bob does not and gets the follow-up.
// While a workflow waits, nothing of it is in memory: its journal and a
// timer in the delayed store are all there is; any worker resumes it, and
// a restart of every process in between loses nothing.
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
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// EmailArgs are the arguments of emails.send.
type EmailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// SendEmail is an ordinary jetflow function, called from the workflow as
// a child run on the worker fleet (with its own retries).
var SendEmail = jetflow.Define[EmailArgs]("emails.send")

// Signup is the workflow's input.
type Signup struct {
	Email string        `json:"email"`
	Wait  time.Duration `json:"wait"`
}

// Activation is the payload of the "activated" event.
type Activation struct {
	Via string `json:"via"`
}

// outbox records the emails sent, to show who got what.
type outbox struct {
	mu   sync.Mutex
	sent []string
}

func (o *outbox) send(_ context.Context, j *worker.Job[EmailArgs]) error {
	o.mu.Lock()
	o.sent = append(o.sent, j.Args.To+": "+j.Args.Subject)
	o.mu.Unlock()
	fmt.Printf("emails.send to %s: %q\n", j.Args.To, j.Args.Subject)
	return j.SetResult("queued")
}

// Onboard is the workflow. Every step is journaled: replayed after a
// restart or a wait, the steps already done return their results without
// running again.
var Onboard = workflow.Define("users.onboard", func(wf *workflow.Context, in Signup) (string, error) {
	account, err := workflow.Step(wf, "create-account", func(ctx context.Context) (string, error) {
		return "acct-" + in.Email, nil // an insert into the users table
	})
	if err != nil {
		return "", err
	}
	if _, err := workflow.Call[string](wf, SendEmail.With(EmailArgs{To: in.Email, Subject: "Welcome!"})); err != nil {
		return "", err
	}
	wf.Sleep(in.Wait) // durable: no goroutine, no memory while it waits
	// Events sent during the sleep are kept: a negative timeout takes one
	// that came, without waiting.
	act, err := workflow.AwaitEvent[Activation](wf, "activated", -1)
	if err == nil {
		return fmt.Sprintf("%s activated via %s; no follow-up", account, act.Via), nil
	}
	if !errors.Is(err, workflow.ErrEventTimeout) {
		return "", err
	}
	if _, err := workflow.Call[string](wf, SendEmail.With(EmailArgs{To: in.Email, Subject: "Need a hand getting started?"})); err != nil {
		return "", err
	}
	return account + " not activated; follow-up sent", nil
})

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	wait := flag.Duration("wait", 72*time.Hour, "how long the workflow waits before the follow-up")
	verbose := flag.Bool("v", false, "log jetflow's info messages to stderr")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *wait, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "onboarding:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, wait time.Duration, verbose bool) error {
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
	out := &outbox{}
	w, err := worker.New(ctx, js, worker.Config{Logger: logger})
	if err != nil {
		return err
	}
	worker.Handle(w, SendEmail, out.send)
	if err := workflow.Register(w, Onboard); err != nil {
		return err
	}
	// The scheduler wakes sleeping workflows (the delayed store).
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

	run := fmt.Sprint(time.Now().UnixNano()) // fresh ids against a shared server
	ids := map[string]string{}
	for _, user := range []string{"alice", "bob"} {
		id, err := workflow.Start(ctx, p, Onboard, Signup{Email: user + "@example.com", Wait: wait},
			workflow.WithID("onboard-"+user+"-"+run))
		if err != nil {
			return err
		}
		ids[user] = id
		fmt.Printf("onboarding %s started (waits %s before the follow-up)\n", user, wait)
	}
	// The workflow id is an idempotency key.
	_, err = workflow.Start(ctx, p, Onboard, Signup{Email: "alice@example.com", Wait: wait}, workflow.WithID(ids["alice"]))
	fmt.Printf("start alice again: errors.Is ErrAlreadyExists: %t\n", errors.Is(err, producer.ErrAlreadyExists))

	// Alice activates her account while her workflow sleeps.
	if err := waitFor(ctx, p, ids["alice"], "sleep"); err != nil {
		return err
	}
	if err := workflow.SendEvent(ctx, p, ids["alice"], "activated", Activation{Via: "email link"}); err != nil {
		return err
	}
	fmt.Println("alice activated her account")

	wctx, cancel := context.WithTimeout(ctx, wait+time.Minute)
	defer cancel()
	for _, user := range []string{"alice", "bob"} {
		res, err := workflow.Result(wctx, p, Onboard, ids[user])
		if err != nil {
			return fmt.Errorf("%s: %w", user, err)
		}
		fmt.Printf("%s: %s\n", user, res)
	}
	st, err := workflow.Get(ctx, p, ids["bob"])
	if err != nil {
		return err
	}
	fmt.Printf("bob's workflow: %s in %d segments\n", st.Run.State, st.Segment)
	for _, step := range st.Steps {
		fmt.Printf("  step %s %-6s %-28s %s\n", step.Step, step.Kind, step.Name, step.State)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	fmt.Printf("emails sent: %d\n", len(out.sent))
	return nil
}

// waitFor polls workflow id until it waits at a step of kind kind.
func waitFor(ctx context.Context, p *producer.Producer, id string, kind workflow.StepKind) error {
	for {
		st, err := workflow.Get(ctx, p, id)
		if err != nil {
			return err
		}
		if st.Waiting {
			for _, s := range st.Steps {
				if s.Kind == kind && s.State == workflow.StepWaiting {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
