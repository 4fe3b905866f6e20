// Command webhook is a GitHub webhook receiver built on jetflow's durable
// event buffer (package webhook).
//
//	go run ./examples/webhook                     # embedded server in a temp dir
//	go run ./examples/webhook --url nats://127.0.0.1:4222
//
// The receiver listens on a random local port. It checks GitHub's
// X-Hub-Signature-256 in constant time, stores the raw event as a run of
// github.event (durable before it answers), and answers 200 with the run id
// without waiting for the processing, which a worker does next, with retries
// (5 attempts, exponential backoff capped at one hour). A badly signed
// request gets 401 and nothing is stored; a redelivery with the same
// X-GitHub-Delivery is stored once.
//
// To show it, the program plays GitHub itself: it sends a correctly signed
// push event, the same delivery again, and a badly signed one, prints the
// answers and the processed event, then exits.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/webhook"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// OnGitHub processes GitHub events; its args are the stored webhook.Event.
var OnGitHub = jetflow.Define[webhook.Event]("github.event")

// PushEvent is the part of GitHub's push payload the example reads.
type PushEvent struct {
	Ref        string `json:"ref"`
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Pusher struct {
		Name string `json:"name"`
	} `json:"pusher"`
	Commits []struct {
		Message string `json:"message"`
	} `json:"commits"`
}

// secret is the webhook's secret, shared with GitHub. A real receiver reads
// it from the environment; webhook.GitHub refuses an empty or short one
// (webhook.ErrWeakSecret), so an unset variable stops the program at start.
const secret = "example-secret-0123456789abcdef"

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	verbose := flag.Bool("v", false, "log jetflow's info messages to stderr")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "webhook:", err)
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
	p, err := producer.New(ctx, js, producer.Config{Logger: logger})
	if err != nil {
		return err
	}
	verifier, err := webhook.GitHub(secret)
	if err != nil {
		return err
	}
	cfg := webhook.Config{
		Function: OnGitHub,
		Verifier: verifier,
		EventID:  "X-GitHub-Delivery",
		Logger:   logger,
		OnError: func(r *http.Request, err error) {
			fmt.Printf("receiver: rejected %s %s: %v\n", r.Method, r.URL.Path, err)
		},
	}

	// Processing: a worker serves github.event with the Config's retries.
	w, err := worker.New(ctx, js, worker.Config{Logger: logger})
	if err != nil {
		return err
	}
	err = webhook.Register(w, cfg, func(ctx context.Context, j *worker.Job[webhook.Event]) error {
		ev := j.Args
		if ev.Header("X-GitHub-Event") != "push" {
			fmt.Printf("github.event: ignoring a %q event\n", ev.Header("X-GitHub-Event"))
			return nil
		}
		var push PushEvent
		if err := ev.Decode(&push); err != nil {
			return jetflow.Permanent(err) // a body that is not a push: retrying will not help
		}
		last := ""
		if n := len(push.Commits); n > 0 {
			last = push.Commits[n-1].Message
		}
		fmt.Printf("github.event: delivery %s: push to %s of %s by %s, %d commit(s), last %q\n",
			ev.ID, push.Ref, push.Repository.FullName, push.Pusher.Name, len(push.Commits), last)
		return nil
	})
	if err != nil {
		return err
	}
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

	// Receiving: the handler mounted on an HTTP server, on a random port.
	h, err := webhook.New(p, cfg)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/webhooks/github", h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	endpoint := "http://" + ln.Addr().String() + "/webhooks/github"
	fmt.Println("receiver listening on", endpoint)

	// Playing GitHub: a signed push, its redelivery, and a forged one.
	body := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"octo-org/hello-world"},` +
		`"pusher":{"name":"octocat"},"commits":[{"message":"Fix the flaky test"}]}`)
	delivery := newDelivery() // GitHub's delivery ids are UUIDs
	sign := verifier.Sign

	code, res, err := send(ctx, endpoint, body, delivery, sign(body))
	if err != nil {
		return err
	}
	fmt.Printf("signed request: %d %s, stored as run %s\n", code, http.StatusText(code), res.ID)
	if code != http.StatusOK {
		return fmt.Errorf("signed request answered %d", code)
	}
	code, again, err := send(ctx, endpoint, body, delivery, sign(body))
	if err != nil {
		return err
	}
	fmt.Printf("same delivery again: %d %s, same run: %t, duplicate: %t\n", code, http.StatusText(code), again.ID == res.ID, again.Duplicate)

	forged := bytes.Replace(body, []byte("octocat"), []byte("mallory"), 1)
	code, _, err = send(ctx, endpoint, forged, newDelivery(), sign(body))
	if err != nil {
		return err
	}
	fmt.Printf("badly signed request: %d %s\n", code, http.StatusText(code))
	if code != http.StatusUnauthorized {
		return fmt.Errorf("badly signed request answered %d", code)
	}

	// The event is durable and processed in the background; wait for it.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := p.Wait(wctx, res.ID)
	if err != nil {
		return fmt.Errorf("event run %s: %w", res.ID, err)
	}
	ev, err := webhook.EventOf(r)
	if err != nil {
		return err
	}
	page, err := p.List(ctx, producer.Filter{Function: OnGitHub.Name()})
	if err != nil {
		return err
	}
	fmt.Printf("event run %s: %s after %d attempt(s); %d event(s) stored; body %d bytes, received %s\n",
		r.ID, r.State, r.Attempts, len(page.Runs), len(ev.Body), ev.Received.Format(time.RFC3339))
	if r.State != jetflow.Success {
		return fmt.Errorf("event run ended %s: %s", r.State, r.Error)
	}
	return nil
}

// newDelivery returns a random UUID (version 4), as GitHub's delivery ids.
func newDelivery() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// send posts body as GitHub does and returns the status and the answer.
func send(ctx context.Context, endpoint string, body []byte, delivery, signature string) (int, webhook.Response, error) {
	var out webhook.Response
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, out, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/example")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-Hub-Signature-256", signature)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, out, err
	}
	defer func() {
		if err := res.Body.Close(); err != nil {
			log.Print(err)
		}
	}()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, out, err
	}
	if res.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, &out); err != nil {
			return 0, out, fmt.Errorf("answer %q: %w", strings.TrimSpace(string(data)), err)
		}
		if out.ID == "" {
			return 0, out, errors.New("200 without a run id")
		}
	}
	return res.StatusCode, out, nil
}
