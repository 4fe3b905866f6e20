// Command clientpeer is the Go side of the integration tests of jetflow's
// clients in other languages (clients/typescript, clients/python): started
// as a separate process against a NATS server the test runs, it provisions
// jetflow's streams and buckets, then runs a Go worker and a Go scheduler
// serving the demo functions and workflow below, so that a client's
// producer calls end in real runs.
//
// Build and run (from the repository root):
//
//	go build -o /tmp/clientpeer ./integration/internal/clientpeer
//	/tmp/clientpeer -url nats://127.0.0.1:4222
//
// Flags:
//
//	-url URL          NATS server URLs, comma separated (default nats://127.0.0.1:4222)
//	-user, -password  the peer's NATS user (default none); it needs the worker's and the
//	                  scheduler's permissions of docs/permissions.md, and the right to
//	                  provision streams unless -provision=false
//	-creds FILE       a NATS credentials file instead of -user/-password
//	-prefix P         subject and bucket prefix (default jetflow)
//	-provision        create or update jetflow's streams and buckets first (default true)
//	-id ID            the worker's and the scheduler's id (default clientpeer-<pid>)
//	-concurrency N    the worker's concurrent handlers (default 16)
//	-quiet            no RUN lines
//
// Functions it serves (all retryable, args and results JSON):
//
//	demo.echo    returns its args as its result
//	demo.sleep   {"ms": n}: reports progress (0 %, then 50 % halfway), sleeps n ms, returns
//	             {"slept": n}; a cancel ends it at once (state canceled)
//	demo.fail    {"message": "…", "permanent": bool, "times": n}: with times > 0, attempts 1..n
//	             fail with message and the next succeeds, returning {"attempts": <attempt>};
//	             otherwise every attempt fails (permanent: at once, no retry). At most 3
//	             attempts unless the run says otherwise, backoff 100 ms to 1 s. Default
//	             message "demo.fail: failed"
//	demo.flow    a workflow: waits for the event "approve" (no deadline) and returns its
//	             payload as the workflow's result
//
// Output: one line per event on stdout; logs (slog, warnings and errors) on
// stderr.
//
//	READY prefix=<prefix> id=<id>         the worker serves, and the scheduler leads
//	RUN <function> <run id> <attempt>     a handler started (not with -quiet): the demo
//	                                      functions', and the workflow's internal ones
//	                                      (demo.flow.segment, demo.flow.wake)
//
// SIGINT or SIGTERM stops the worker and the scheduler gracefully and
// exits 0; an error at start exits 1 with the reason on stderr.
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type config struct {
	url, user, password, creds string
	prefix, id                 string
	provision, quiet           bool
	concurrency                int
}

func main() {
	c := config{}
	flag.StringVar(&c.url, "url", nats.DefaultURL, "NATS server URLs, comma separated")
	flag.StringVar(&c.user, "user", "", "NATS user")
	flag.StringVar(&c.password, "password", "", "NATS password")
	flag.StringVar(&c.creds, "creds", "", "NATS credentials file")
	flag.StringVar(&c.prefix, "prefix", "jetflow", "subject and bucket prefix")
	flag.BoolVar(&c.provision, "provision", true, "create or update jetflow's streams and buckets first")
	flag.StringVar(&c.id, "id", fmt.Sprintf("clientpeer-%d", os.Getpid()), "worker and scheduler id")
	flag.IntVar(&c.concurrency, "concurrency", 16, "concurrent handlers")
	flag.BoolVar(&c.quiet, "quiet", false, "no RUN lines")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "clientpeer:", err)
		os.Exit(1)
	}
}

// Function references of the demo functions.
var (
	Echo  = jetflow.Define[json.RawMessage]("demo.echo")
	Sleep = jetflow.Define[SleepArgs]("demo.sleep")
	Fail  = jetflow.Define[FailArgs]("demo.fail")
	// Flow waits for the event "approve" and returns its payload.
	Flow = workflow.Define("demo.flow", func(wf *workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		return workflow.AwaitEvent[json.RawMessage](wf, "approve", 0)
	})
)

// SleepArgs are demo.sleep's args.
type SleepArgs struct {
	MS int `json:"ms"`
}

// FailArgs are demo.fail's args.
type FailArgs struct {
	Message   string `json:"message,omitempty"`
	Permanent bool   `json:"permanent,omitempty"`
	Times     int    `json:"times,omitempty"`
}

var outMu sync.Mutex

// line writes one line to stdout at once.
func line(format string, a ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", a...)
}

func run(ctx context.Context, c config) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := []nats.Option{nats.Name("jetflow clientpeer"), nats.MaxReconnects(-1)}
	switch {
	case c.creds != "":
		opts = append(opts, nats.UserCredentials(c.creds))
	case c.user != "":
		opts = append(opts, nats.UserInfo(c.user, c.password))
	}
	nc, err := nats.Connect(c.url, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	scfg := streams.Config{Prefix: c.prefix}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if c.provision {
		if err := streams.Provision(sctx, js, scfg); err != nil {
			return fmt.Errorf("provision: %w", err)
		}
	}
	// Every handler, the workflow's internal ones too, says it started.
	started := func(next worker.HandlerFunc) worker.HandlerFunc {
		return func(ctx context.Context, r worker.Run) error {
			if !c.quiet {
				line("RUN %s %s %d", r.Name(), r.ID(), r.Attempt())
			}
			return next(ctx, r)
		}
	}
	w, err := worker.New(sctx, js, worker.Config{Streams: scfg, Logger: log, ID: c.id, Concurrency: c.concurrency,
		Middleware: []worker.Middleware{started}})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	worker.Handle(w, Echo, func(ctx context.Context, j *worker.Job[json.RawMessage]) error {
		return j.SetResult(j.Args)
	})
	worker.Handle(w, Sleep, sleepFor)
	worker.Handle(w, Fail, failAsAsked, worker.Options{MaxAttempts: 3, Backoff: jetflow.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	if err := workflow.Register(w, Flow); err != nil {
		return fmt.Errorf("workflow: %w", err)
	}
	// The worker's and the scheduler's lifetime is the process's (they
	// stop when ctx ends), not sctx's.
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("worker start: %w", err)
	}
	s, err := scheduler.New(sctx, js, scheduler.Config{Streams: scfg, Logger: log, ID: c.id})
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("scheduler start: %w", err)
	}
	// Delayed runs are published only by a leading scheduler: READY once
	// this one leads (another scheduler on the server may lead instead).
	for !s.IsLeader() {
		select {
		case <-sctx.Done():
			return fmt.Errorf("scheduler: not leading after 30 s (another scheduler on the same prefix?)")
		case <-time.After(20 * time.Millisecond):
		}
	}
	line("READY prefix=%s id=%s", c.prefix, strings.ReplaceAll(c.id, " ", "_"))

	<-ctx.Done()
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelStop()
	return errors.Join(s.Stop(stopCtx), w.Stop(stopCtx))
}

// sleepFor is demo.sleep: it sleeps args.MS, reporting progress at 0 % and
// 50 %; a cancel ends it with its cause.
func sleepFor(ctx context.Context, j *worker.Job[SleepArgs]) error {
	d := time.Duration(j.Args.MS) * time.Millisecond
	if err := j.Progress(ctx, jetflow.Progress{Percent: 0, Message: "sleeping"}); err != nil {
		return err
	}
	for _, part := range []time.Duration{d / 2, d - d/2} {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(part):
		}
		if part == d/2 {
			if err := j.Progress(ctx, jetflow.Progress{Percent: 50, Message: "halfway"}); err != nil {
				return err
			}
		}
	}
	return j.SetResult(map[string]int{"slept": j.Args.MS})
}

// failAsAsked is demo.fail: it fails (permanently if asked) until its
// attempt passes args.Times, then succeeds with the attempt count.
func failAsAsked(ctx context.Context, j *worker.Job[FailArgs]) error {
	a := j.Args
	if a.Times > 0 && j.Attempt() > a.Times {
		return j.SetResult(map[string]int{"attempts": j.Attempt()})
	}
	msg := a.Message
	if msg == "" {
		msg = "demo.fail: failed"
	}
	if a.Permanent {
		return jetflow.Permanent(errors.New(msg))
	}
	return errors.New(msg)
}
