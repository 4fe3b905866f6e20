package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type poolBenchArgs struct {
	I int `json:"i"`
}

// The two functions of the pool figures: one run directly, one through the
// pool; both are no-ops that count.
var (
	poolBenchDirect = jetflow.Define[poolBenchArgs]("bench.pool.direct")
	poolBenchItem   = jetflow.Define[poolBenchArgs]("bench.pool.item")
)

// poolBenchParallelism is the pool's max parallelism in the figure.
const poolBenchParallelism = 10

// RunPool measures a work pool on a fresh embedded server (default
// durability), in one process (producer, worker, pool dispatcher): N no-op
// runs through the unlimited function path (producer.Batch, a worker with
// concurrency 64), then N no-op items through a pool with max parallelism
// 10 (EnqueueBatch, the same worker), each timed from the first enqueue to
// the N-th handler's return. It prints both rates and their ratio. N is
// 5,000 (500 when quick).
//
// The pool's rate is bounded by its parallelism over the latency of one
// item's cycle: grant, run, completion, slot given back. A pool item costs
// about 15 JetStream round trips where a plain run costs 4 (record, publish,
// outcome, ack): the queue entry and its removal, the item record at start
// and at the end, the attempt's run and its on-complete run, the dispatcher's
// state write (shared by the items it starts at once).
func RunPool(ctx context.Context, out io.Writer, quick bool) error {
	n := 5_000
	if quick {
		n = 500
	}
	s, stop, err := freshServer("pool")
	if err != nil {
		return err
	}
	defer stop()
	line := func(format string, a ...any) { fmt.Fprintf(out, "pool "+format+"\n", a...) }

	scfg := streams.Config{Prefix: "benchpool"}
	jss, closeAll, err := connectEach(s.ClientURL(), "bench-pool-worker", "bench-pool-producer")
	if err != nil {
		return err
	}
	defer closeAll()
	wjs, pjs := jss[0], jss[1]

	var direct, items atomic.Int64
	stopWorker, err := startWorker(ctx, wjs, scfg, func(w *worker.Worker) error {
		worker.Handle(w, poolBenchDirect, func(context.Context, *worker.Job[poolBenchArgs]) error { direct.Add(1); return nil }, benchOptions)
		worker.Handle(w, poolBenchItem, func(context.Context, *worker.Job[poolBenchArgs]) error { items.Add(1); return nil }, benchOptions)
		return pool.Register(w)
	})
	if err != nil {
		return err
	}
	defer stopWorker()
	p, err := producer.New(ctx, pjs, producer.Config{Streams: scfg})
	if err != nil {
		return err
	}
	pl, err := pool.New(ctx, p, pool.Config{Name: "bench", MaxParallelism: poolBenchParallelism})
	if err != nil {
		return err
	}
	if err := pl.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = pl.Stop(sctx)
	}()
	if err := poolBenchWait(ctx, time.Minute, func() bool { st := pl.Stats(); return st.Leader && st.Loaded }); err != nil {
		return fmt.Errorf("pool dispatcher: %w", err)
	}

	// The unlimited function path.
	start, cpu := time.Now(), cpuTime()
	for i := 0; i < n; i += producer.MaxBatch {
		batch := make([]producer.Item, 0, producer.MaxBatch)
		for j := i; j < min(n, i+producer.MaxBatch); j++ {
			batch = append(batch, producer.Item{Call: poolBenchDirect.With(poolBenchArgs{I: j})})
		}
		if _, err := p.Batch(ctx, batch); err != nil {
			return fmt.Errorf("direct runs: %w", err)
		}
	}
	if err := poolBenchWait(ctx, 10*time.Minute, func() bool { return direct.Load() >= int64(n) }); err != nil {
		return fmt.Errorf("direct runs: %d of %d ran: %w", direct.Load(), n, err)
	}
	dDirect, cDirect := time.Since(start), cpuTime()-cpu

	// The same through the pool.
	start, cpu = time.Now(), cpuTime()
	for i := 0; i < n; i += pool.MaxBatch {
		batch := make([]pool.Entry, 0, pool.MaxBatch)
		for j := i; j < min(n, i+pool.MaxBatch); j++ {
			batch = append(batch, pool.Entry{Call: poolBenchItem.With(poolBenchArgs{I: j})})
		}
		if _, err := pl.EnqueueBatch(ctx, batch); err != nil {
			return fmt.Errorf("pool items: %w", err)
		}
	}
	if err := poolBenchWait(ctx, 10*time.Minute, func() bool { return items.Load() >= int64(n) }); err != nil {
		return fmt.Errorf("pool items: %d of %d ran: %w", items.Load(), n, err)
	}
	dPool, cPool := time.Since(start), cpuTime()-cpu

	rDirect, rPool := rate(n, dDirect), rate(n, dPool)
	line("unlimited function path     %d runs  in %s = %10s runs/s (Batch, worker concurrency 64), cpu %s/run", n, fmtDur(dDirect), fmtRate(rDirect), fmtDur(per(cDirect, n)))
	line("pool, max parallelism %2d    %d items in %s = %10s items/s (EnqueueBatch, same worker), cpu %s/item", poolBenchParallelism, n, fmtDur(dPool), fmtRate(rPool), fmtDur(per(cPool, n)))
	line("pool / unlimited            %.3f   (a pool item: about 15 round trips, a plain run: 4; at most %d in flight, so the rate is %d / item cycle latency, %s here)",
		rPool/max(rDirect, 1e-9), poolBenchParallelism, poolBenchParallelism, fmtDur(time.Duration(float64(dPool)*poolBenchParallelism/float64(n))))
	return nil
}

func poolBenchConnect(url, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func poolBenchWait(ctx context.Context, within time.Duration, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// freshServer starts an embedded server with the product's default
// durability in a new temporary directory, for one bench phase; stop stops
// it and removes the directory.
// syncEvery is the fsync interval of the servers the sections start
// (0: embedded's default, 10 ms); SetSyncEvery sets it.
var syncEvery atomic.Int64

// SetSyncEvery sets the fsync interval of the servers every section
// starts (jetflow bench --sync-every). Tests under -race set 1 s:
// nats-server v2.15.2 arms a new stream's sync timer before it stores it,
// a data race a short interval can hit.
func SetSyncEvery(d time.Duration) { syncEvery.Store(int64(d)) }

func freshServer(name string) (srv *embedded.Server, stop func(), err error) {
	dir, err := os.MkdirTemp("", "jetflow-bench-"+name+"-")
	if err != nil {
		return nil, nil, err
	}
	srv, err = embedded.Start(embedded.Options{Dir: dir, SyncEvery: time.Duration(syncEvery.Load())})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return srv, func() { srv.Stop(); os.RemoveAll(dir) }, nil
}

// connectEach opens one connection per name (one per role, as separate
// processes would have); closeAll closes them.
func connectEach(url string, names ...string) (jss []jetstream.JetStream, closeAll func(), err error) {
	var ncs []*nats.Conn
	closeAll = func() {
		for _, nc := range ncs {
			nc.Close()
		}
	}
	for _, name := range names {
		nc, js, err := poolBenchConnect(url, name)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		ncs, jss = append(ncs, nc), append(jss, js)
	}
	return jss, closeAll, nil
}

// benchOptions are the handler options of the sections' no-op functions.
var benchOptions = worker.Options{Concurrency: 64, MaxParallel: 10_000}

// startWorker starts a worker on js (Concurrency 64) with what register
// adds to it; stop stops it, within 10 s.
func startWorker(ctx context.Context, js jetstream.JetStream, scfg streams.Config, register func(w *worker.Worker) error) (stop func(), err error) {
	w, err := worker.New(ctx, js, worker.Config{Streams: scfg, Concurrency: 64})
	if err != nil {
		return nil, err
	}
	if err := register(w); err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}, nil
}
