// Command jfproc runs one jetflow role (worker, scheduler or producer) as its
// own OS process, so that integration tests can SIGKILL, SIGSTOP and restart
// it. It reports what it does as marker lines on stdout, one per event:
//
//	READY <role> <id>                 the role has started
//	STARTED <run id> <attempt>        a handler began
//	SUCCESS <run id> <attempt>        a handler is about to return nil
//	LEADER <id>                       the scheduler holds the lease
//	STANDBY <id>                      the scheduler lost (or waits for) the lease
//	ENQUEUED <run id>                 the producer scheduled a run
//	DONE                              the producer has scheduled every run
//
// Logs (slog, text) go to stderr. SIGINT and SIGTERM stop the role
// gracefully; the test decides whether a process dies any other way.
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
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Args are the arguments of every function jfproc serves.
type Args struct {
	N int `json:"n"`
}

// Result is what a handler stores on success: which process ran it.
type Result struct {
	Worker  string `json:"worker"`
	Attempt int    `json:"attempt"`
}

type config struct {
	url         string
	role        string
	id          string
	function    string
	kind        string
	replicas    int
	ackWait     time.Duration
	lostAfter   time.Duration
	claimAfter  time.Duration
	concurrency int
	blockFirst  bool
	releaseFile string
	work        time.Duration

	leaseTTL       time.Duration
	repairInterval time.Duration
	repairGrace    time.Duration

	count  int
	spread time.Duration
	after  time.Duration
	idPfx  string
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", nats.DefaultURL, "NATS URLs, comma separated")
	flag.StringVar(&c.role, "role", "worker", "worker, scheduler or producer")
	flag.StringVar(&c.id, "id", "", "worker or scheduler id (default: generated)")
	flag.StringVar(&c.function, "function", "it.work", "function name")
	flag.StringVar(&c.kind, "kind", "retryable", "retryable or atmostonce")
	flag.IntVar(&c.replicas, "replicas", 1, "replicas of streams and buckets")
	flag.DurationVar(&c.ackWait, "ack-wait", 2*time.Second, "worker AckWait")
	flag.DurationVar(&c.lostAfter, "lost-after", 0, "worker LostAfter (0: the default)")
	flag.DurationVar(&c.claimAfter, "claim-after", 0, "worker Options.ClaimAfter (0: the default, negative: claim first)")
	flag.IntVar(&c.concurrency, "concurrency", 10, "worker concurrency")
	flag.BoolVar(&c.blockFirst, "block-first", false, "handler blocks forever on attempt 1")
	flag.StringVar(&c.releaseFile, "release-file", "", "handler waits until this file exists")
	flag.DurationVar(&c.work, "work", 0, "handler sleeps this long before returning")
	flag.DurationVar(&c.leaseTTL, "lease-ttl", 2*time.Second, "scheduler lease TTL")
	flag.DurationVar(&c.repairInterval, "repair-interval", 500*time.Millisecond, "scheduler repair interval")
	flag.DurationVar(&c.repairGrace, "repair-grace", 500*time.Millisecond, "scheduler repair grace")
	flag.IntVar(&c.count, "count", 1, "producer: runs to schedule")
	flag.DurationVar(&c.after, "after", 0, "producer: delay of the first run")
	flag.DurationVar(&c.spread, "spread", 0, "producer: due times spread over this span")
	flag.StringVar(&c.idPfx, "id-prefix", "run", "producer: run ids are <prefix>-<i>")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "jfproc:", err)
		os.Exit(1)
	}
}

// out serializes marker lines; each is one write, so a SIGKILL never leaves
// half a line.
var outMu sync.Mutex

func marker(format string, a ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", a...)
}

func run(ctx context.Context, c config) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	nc, err := nats.Connect(c.url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.Name("jfproc-"+c.role+"-"+c.id))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	scfg := streams.Config{Replicas: c.replicas}
	kind := jetflow.Retryable
	switch c.kind {
	case "retryable":
	case "atmostonce":
		kind = jetflow.AtMostOnce
	default:
		return fmt.Errorf("unknown kind %q", c.kind)
	}
	fn, err := jetflow.NewFunction[Args](c.function, jetflow.WithKind(kind))
	if err != nil {
		return err
	}
	// Provisioning needs a JetStream leader; on a cluster just formed it may
	// take a moment.
	setup := func(f func(ctx context.Context) error) error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := f(sctx)
			cancel()
			if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				return err
			}
			log.Info("setup retry", "error", err)
			time.Sleep(100 * time.Millisecond)
		}
	}
	switch c.role {
	case "worker":
		return runWorker(ctx, c, js, scfg, fn, log, setup)
	case "scheduler":
		return runScheduler(ctx, c, js, scfg, log, setup)
	case "producer":
		return runProducer(ctx, c, js, scfg, fn, setup)
	}
	return fmt.Errorf("unknown role %q", c.role)
}

func runWorker(ctx context.Context, c config, js jetstream.JetStream, scfg streams.Config, fn jetflow.Function[Args], log *slog.Logger, setup func(func(context.Context) error) error) error {
	var w *worker.Worker
	err := setup(func(ctx context.Context) error {
		var err error
		w, err = worker.New(ctx, js, worker.Config{Streams: scfg, Logger: log, ID: c.id, AckWait: c.ackWait, LostAfter: c.lostAfter, Concurrency: c.concurrency})
		return err
	})
	if err != nil {
		return err
	}
	id := c.id
	worker.Handle(w, fn, func(ctx context.Context, j *worker.Job[Args]) error {
		marker("STARTED %s %d", j.ID(), j.Attempt())
		if c.blockFirst && j.Attempt() == 1 {
			select {} // until the test kills this process
		}
		if c.releaseFile != "" {
			for {
				if _, err := os.Stat(c.releaseFile); err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		if c.work > 0 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(c.work):
			}
		}
		if err := j.SetResult(Result{Worker: id, Attempt: j.Attempt()}); err != nil {
			return err
		}
		marker("SUCCESS %s %d", j.ID(), j.Attempt())
		return nil
	}, worker.Options{ClaimAfter: c.claimAfter})
	if err := setup(w.Start); err != nil {
		return err
	}
	marker("READY worker %s", id)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.Stop(sctx)
}

func runScheduler(ctx context.Context, c config, js jetstream.JetStream, scfg streams.Config, log *slog.Logger, setup func(func(context.Context) error) error) error {
	var s *scheduler.Scheduler
	err := setup(func(ctx context.Context) error {
		var err error
		s, err = scheduler.New(ctx, js, scheduler.Config{
			Streams: scfg, Logger: log, ID: c.id, LeaseTTL: c.leaseTTL,
			RepairInterval: c.repairInterval, RepairGrace: c.repairGrace,
		})
		return err
	})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	marker("READY scheduler %s", c.id)
	leader := false
	marker("STANDBY %s", c.id)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return s.Stop(sctx)
		case <-t.C:
			if l := s.IsLeader(); l != leader {
				leader = l
				if l {
					marker("LEADER %s", c.id)
				} else {
					marker("STANDBY %s", c.id)
				}
			}
		}
	}
}

func runProducer(ctx context.Context, c config, js jetstream.JetStream, scfg streams.Config, fn jetflow.Function[Args], setup func(func(context.Context) error) error) error {
	var p *producer.Producer
	err := setup(func(ctx context.Context) error {
		var err error
		p, err = producer.New(ctx, js, producer.Config{Streams: scfg})
		return err
	})
	if err != nil {
		return err
	}
	marker("READY producer %s", c.id)
	start := time.Now().Add(c.after)
	for i := range c.count {
		at := start
		if c.count > 1 {
			at = start.Add(c.spread * time.Duration(i) / time.Duration(c.count-1))
		}
		rid := fmt.Sprintf("%s-%d", c.idPfx, i)
		// A producer retries until its call returns an id: ErrAlreadyExists
		// means an earlier try was written.
		err := setup(func(ctx context.Context) error {
			_, err := p.RunAt(ctx, at, fn.With(Args{N: i}), producer.WithID(rid))
			if errors.Is(err, producer.ErrAlreadyExists) {
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("schedule %s: %w", rid, err)
		}
		marker("ENQUEUED %s", rid)
	}
	marker("DONE")
	return nil
}
