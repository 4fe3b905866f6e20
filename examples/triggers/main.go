// Command triggers turns events already on NATS into runs, without a glue
// service: every order on the ORDERS stream (the application's own) is one
// run of orders.ship, and every message on the plain subject
// events.signup (captured by jetflow into a stream of its own) one run of
// users.welcome.
//
//	go run ./examples/triggers                          # embedded server in a temp dir
//	go run ./examples/triggers --url nats://127.0.0.1:4222
//
// The story: orders A-1, B-2 and A-1 again (the same Order-Id: one run), an
// order that is not JSON (a failed run with the reason) and a test order
// the filter skips; the trigger's runner stops, C-3 is published while
// none runs, and a new runner (a restarted worker, say) takes it up where
// the trigger was. Then two signups on a plain subject. The program exits
// when every run has ended.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Order is what the application publishes on orders.created.
type Order struct {
	Item  string `json:"item"`
	Count int    `json:"count"`
}

// Signup is what the application publishes on events.signup.
type Signup struct {
	Email string `json:"email"`
}

var (
	ShipOrder = jetflow.Define[Order]("orders.ship")
	Welcome   = jetflow.Define[Signup]("users.welcome")
)

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	verbose := flag.Bool("v", false, "log jetflow's messages to stderr")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "triggers:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, verbose bool) error {
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
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	// The application's own stream, with its events.
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		return err
	}

	// A worker serving both functions.
	var mu sync.Mutex
	var done []string
	w, err := worker.New(ctx, js, worker.Config{Logger: logger})
	if err != nil {
		return err
	}
	worker.Handle(w, ShipOrder, func(ctx context.Context, j *worker.Job[Order]) error {
		mu.Lock()
		done = append(done, fmt.Sprintf("orders.ship: %d x %s", j.Args.Count, j.Args.Item))
		mu.Unlock()
		return nil
	})
	worker.Handle(w, Welcome, func(ctx context.Context, j *worker.Job[Signup]) error {
		mu.Lock()
		done = append(done, "users.welcome: "+j.Args.Email)
		mu.Unlock()
		return nil
	})
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer stopLogged(w.Stop)
	p := w.Producer()

	// The triggers, declared in code. A runner runs them; any number of
	// processes may run one (they share each trigger's durable consumer).
	bind := func(r *trigger.Runner) error {
		err := trigger.Bind(r, trigger.Func(ShipOrder), trigger.Spec[Order]{
			Name: "ship", Stream: "ORDERS", Subjects: []string{"orders.created"},
			IDHeader: "Order-Id", // one run per order, however often it is published
			Filter:   func(m jetstream.Msg) bool { return m.Headers().Get("Test") == "" },
		})
		if err != nil {
			return err
		}
		return trigger.Bind(r, trigger.Func(Welcome), trigger.Spec[Signup]{Name: "welcome", Subjects: []string{"events.signup"}})
	}
	r2, err := shipOrders(ctx, js, p, bind, logger)
	if r2 != nil {
		defer stopLogged(r2.Stop)
	}
	if err != nil {
		return err
	}

	// Plain subjects: core NATS publishes, captured by the trigger's stream.
	for _, e := range []string{"ann@example.com", "bob@example.com"} {
		data, _ := json.Marshal(Signup{Email: e})
		if err := nc.Publish("events.signup", data); err != nil {
			return err
		}
	}
	ran5 := func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(done) >= 5, nil
	}
	if err := waitFor("5 runs to run", ran5); err != nil {
		return err
	}
	mu.Lock()
	sort.Strings(done)
	for _, d := range done {
		fmt.Println(d)
	}
	mu.Unlock()
	tis, err := trigger.List(ctx, p)
	if err != nil {
		return err
	}
	for _, ti := range tis {
		fmt.Printf("trigger %s -> %s, origin %s, stream %s\n", ti.Name, ti.Function, ti.Origin, ti.SourceStream(streams.Config{}))
	}
	return nil
}

// shipOrders publishes orders (one twice, one not JSON, one a test the
// filter skips) to a runner's trigger, reports what it made of them, then
// stops the runner, publishes one more and starts another, which ships
// it: the runner left running.
func shipOrders(ctx context.Context, js jetstream.JetStream, p *producer.Producer, bind func(*trigger.Runner) error, logger *slog.Logger) (*trigger.Runner, error) {
	r1 := trigger.New(p, trigger.Config{Logger: logger})
	if err := bind(r1); err != nil {
		return nil, err
	}
	if err := r1.Start(ctx); err != nil {
		return nil, err
	}

	publish := func(id string, data string, h nats.Header) error {
		if h == nil {
			h = nats.Header{}
		}
		h.Set("Order-Id", id)
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: "orders.created", Data: []byte(data), Header: h})
		return err
	}
	for _, o := range []struct{ id, data string }{
		{"A-1", `{"item":"book","count":1}`}, {"B-2", `{"item":"lamp","count":2}`},
		{"A-1", `{"item":"book","count":1}`}, {"X-9", `not json`},
	} {
		if err := publish(o.id, o.data, nil); err != nil {
			return nil, err
		}
	}
	if err := publish("T-0", `{"item":"test","count":0}`, nats.Header{"Test": {"yes"}}); err != nil {
		return nil, err
	}
	if err := waitRuns(ctx, p, []string{"A-1", "B-2", "X-9"}); err != nil {
		return nil, err
	}
	// The five messages handled (the runs ended above; the duplicate and
	// the skipped one are counted when they are acked).
	if err := waitFor("trigger ship to handle 5 messages", func() (bool, error) { return r1.Stats("ship").Messages >= 5, nil }); err != nil {
		return nil, err
	}
	st := r1.Stats("ship")
	fmt.Printf("trigger ship: %d messages, %d runs, %d found existing, %d skipped, %d failed\n",
		st.Messages, st.Runs, st.Existing, st.Skipped, st.Failed)
	bad, err := p.Get(ctx, trigger.HeaderRunID("ship", "X-9"))
	if err != nil {
		return nil, err
	}
	fmt.Printf("order X-9: %s, not JSON: %v\n", bad.State, strings.Contains(bad.Error, "not the JSON of main.Order"))

	// The runner stops (a deploy); an order comes meanwhile; a new runner
	// takes it up where the trigger was.
	if err := r1.Stop(ctx); err != nil {
		return nil, err
	}
	if err := publish("C-3", `{"item":"pen","count":3}`, nil); err != nil {
		return nil, err
	}
	r2 := trigger.New(p, trigger.Config{Logger: logger})
	if err := bind(r2); err != nil {
		return nil, err
	}
	if err := r2.Start(ctx); err != nil {
		return nil, err
	}
	if err := waitRuns(ctx, p, []string{"C-3"}); err != nil {
		return r2, err
	}
	fmt.Println("order C-3 published while no runner ran: shipped after the restart")
	return r2, nil
}

// waitRuns waits until the runs of the orders ids have ended.
func waitRuns(ctx context.Context, p *producer.Producer, ids []string) error {
	for _, id := range ids {
		ended := func() (bool, error) {
			r, err := p.Get(ctx, trigger.HeaderRunID("ship", id))
			if errors.Is(err, jetflow.ErrNotFound) {
				return false, nil // not made yet
			}
			return err == nil && r.State.Terminal(), err
		}
		if err := waitFor("order "+id+"'s run to end", ended); err != nil {
			return err
		}
	}
	return nil
}

// waitFor is the example's one way to wait: cond until it holds, fails,
// or 30 s pass.
func waitFor(what string, cond func() (bool, error)) error {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ok, err := cond()
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("waited 30 s for %s", what)
		}
	}
}

// stopLogged stops what stop stops, saying so if it fails (a deferred
// stop has nobody else to tell).
func stopLogged(stop func(context.Context) error) {
	if err := stop(context.Background()); err != nil {
		log.Print(err)
	}
}
