package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// The pool role (-role pool): a worker serving PoolWork and the pools' done
// function and, with -dispatch, a dispatcher of pool -pool with per-key
// limit -key-limit. Each PoolWork handler appends "S <key> <item> <pid>"
// to -pool-ledger when it starts and "E <key> <item> <pid>" before it
// returns (O_APPEND, fsynced), so that a test can measure, across
// processes, how many items of one key ran at once. It prints
//
//	LEADER pool <id>    this process's dispatcher holds the pool's lease
//	STANDBY pool <id>   it does not
var (
	poolName     = flag.String("pool", "keys", "pool role: the pool's name")
	poolKeyLimit = flag.Int("key-limit", 2, "pool role: the pool's per-key limit")
	poolMax      = flag.Int("max-parallelism", 8, "pool role: the pool's max parallelism")
	poolDispatch = flag.Bool("dispatch", false, "pool role: also run the pool's dispatcher")
	poolLedger   = flag.String("pool-ledger", "", "pool role: the start/end ledger")
)

// PoolArgs are the args of PoolWork.
type PoolArgs struct {
	Key    string `json:"key"`
	Item   string `json:"item"`
	WorkMs int    `json:"workMs,omitempty"`
}

// PoolWork is the function the pool role serves.
var PoolWork = jetflow.Define[PoolArgs]("it.pool.work")

// poolConfig is the pool the role dispatches (and the test enqueues to).
func poolConfig(name string, max, keyLimit int) pool.Config {
	return pool.Config{
		Name: name, MaxParallelism: max, KeyLimit: keyLimit,
		Key:      pool.KeyOf(func(a PoolArgs) string { return a.Key }),
		LeaseTTL: time.Second, PollInterval: 100 * time.Millisecond,
		ReconcileInterval: 500 * time.Millisecond, ReconcileGrace: 2 * time.Second,
	}
}

type eventLedger struct {
	mu sync.Mutex
	f  *os.File
}

func (l *eventLedger) note(kind, key, item string) {
	line := fmt.Sprintf("%s %s %s %d\n", kind, key, item, os.Getpid())
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.WriteString(line); err != nil {
		os.Exit(3)
	}
	if err := l.f.Sync(); err != nil {
		os.Exit(3)
	}
}

func runPool(ctx context.Context, c config, js jetstream.JetStream, scfg streams.Config, log *slog.Logger, setup func(func(context.Context) error) error) error {
	if *poolLedger == "" {
		return fmt.Errorf("pool role: -pool-ledger is required")
	}
	f, err := os.OpenFile(*poolLedger, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer closeLedger(f)
	led := &eventLedger{f: f}
	var w *worker.Worker
	if err := setup(func(ctx context.Context) error {
		var err error
		w, err = worker.New(ctx, js, worker.Config{Streams: scfg, Logger: log, ID: c.id, AckWait: c.ackWait, Concurrency: c.concurrency})
		return err
	}); err != nil {
		return err
	}
	worker.Handle(w, PoolWork, func(ctx context.Context, j *worker.Job[PoolArgs]) error {
		led.note("S", j.Args.Key, j.Args.Item)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Duration(j.Args.WorkMs) * time.Millisecond):
		}
		led.note("E", j.Args.Key, j.Args.Item)
		return nil
	})
	if err := pool.Register(w); err != nil {
		return err
	}
	if err := setup(func(context.Context) error { return w.Start(ctx) }); err != nil {
		return err
	}
	var pl *pool.Pool
	if *poolDispatch {
		var p *producer.Producer
		if err := setup(func(sctx context.Context) error {
			var err error
			if p, err = producer.New(sctx, js, producer.Config{Streams: scfg}); err != nil {
				return err
			}
			cfg := poolConfig(*poolName, *poolMax, *poolKeyLimit)
			cfg.ID, cfg.Logger = c.id, log
			pl, err = pool.New(sctx, p, cfg)
			return err
		}); err != nil {
			return err
		}
		if err := pl.Start(ctx); err != nil {
			return err
		}
	}
	marker("READY pool %s", c.id)
	leader := false
	marker("STANDBY pool %s", c.id)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if pl != nil {
				_ = pl.Stop(sctx)
			}
			return w.Stop(sctx)
		case <-t.C:
			if pl == nil {
				continue
			}
			if l := pl.Stats().Leader; l != leader {
				leader = l
				if l {
					marker("LEADER pool %s", c.id)
				} else {
					marker("STANDBY pool %s", c.id)
				}
			}
		}
	}
}
