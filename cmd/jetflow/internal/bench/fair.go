package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

type fairArgs struct {
	Key   string `json:"key,omitempty"`
	Round int    `json:"r,omitempty"`
	I     int    `json:"i"`
}

// The functions of the fairness figures: no-ops that count, and note when
// each of tenant B's items starts.
var (
	fairPlain = jetflow.Define[fairArgs]("bench.fair.plain")
	fairItem  = jetflow.Define[fairArgs]("bench.fair.item")
)

const (
	fairParallelism = 10 // each pool's max parallelism
	fairBItems      = 10 // tenant B's items per round
	fairKeys        = 100
)

// RunFairness measures per-key fairness of a work pool on a fresh embedded
// server (default durability), one process (producer, one worker, the pool
// dispatchers), max parallelism 10:
//
//   - throughput: N no-op items through a pool without keys, then through a
//     pool with a key function (100 keys, round robin), then the same with a
//     per-key limit of 2; N is 5,000 (500 when quick);
//   - fairness: tenant B enqueues 10 items at once, in rounds, first into the
//     idle keyed pool, then while tenant A holds 100,000 queued items (10,000
//     when quick) and saturates it. B's start latency (from the enqueue call
//     to the handler's start) is printed with and without A, p50 and p99,
//     and their ratio; the goal is within 2x. With A, B cannot start before
//     A's running items give slots back (no preemption): its floor is the
//     latency without A plus the time for 10 slots to free.
func RunFairness(ctx context.Context, out io.Writer, quick bool) error {
	n, aItems, rounds := 5_000, 100_000, 20
	if quick {
		n, aItems, rounds = 500, 10_000, 10
	}
	s, stop, err := freshServer("fair")
	if err != nil {
		return err
	}
	defer stop()

	scfg := streams.Config{Prefix: "benchfair"}
	jss, closeAll, err := connectEach(s.ClientURL(), "bench-fair-worker", "bench-fair-producer", "bench-fair-tenant-b")
	if err != nil {
		return err
	}
	defer closeAll()
	wjs, pjs, bjs := jss[0], jss[1], jss[2]

	b := &fairBench{ctx: ctx, out: out, n: n, bStarted: map[[2]int]time.Time{}}
	stopWorker, err := startWorker(ctx, wjs, scfg, b.register)
	if err != nil {
		return err
	}
	defer stopWorker()
	p, err := producer.New(ctx, pjs, producer.Config{Streams: scfg})
	if err != nil {
		return err
	}
	bp, err := producer.New(ctx, bjs, producer.Config{Streams: scfg})
	if err != nil {
		return err
	}
	if b.plain, err = b.open(p, "plain", false, true); err != nil {
		return err
	}
	defer stopPool(b.plain)
	if b.keyed, err = b.open(p, "keyed", true, true); err != nil {
		return err
	}
	defer stopPool(b.keyed)
	// Tenant B's client of the keyed pool: its own connection.
	if b.bPool, err = b.open(bp, "keyed", true, false); err != nil {
		return err
	}

	if err := b.throughput(); err != nil {
		return err
	}
	return b.tenants(aItems, rounds)
}

// fairBench is what RunFairness's phases share: the pools, the items
// their handlers ran, and when each of tenant B's items started.
type fairBench struct {
	ctx context.Context
	out io.Writer
	n   int // items of each throughput figure

	plainDone, itemsDone atomic.Int64

	mu       sync.Mutex
	bStarted map[[2]int]time.Time // by round and item

	plain, keyed *pool.Pool // the producer's pools, dispatching
	bPool        *pool.Pool // tenant B's client of the keyed pool
}

// line prints one figure, after "fairness ".
func (b *fairBench) line(format string, a ...any) {
	fmt.Fprintf(b.out, "fairness "+format+"\n", a...)
}

// register registers the handlers (no-ops that count; B's items note when
// they start) and the pools' functions on w.
func (b *fairBench) register(w *worker.Worker) error {
	worker.Handle(w, fairPlain, func(context.Context, *worker.Job[fairArgs]) error { b.plainDone.Add(1); return nil }, benchOptions)
	worker.Handle(w, fairItem, func(_ context.Context, j *worker.Job[fairArgs]) error {
		if j.Args.Key == "B" {
			t := time.Now()
			b.mu.Lock()
			b.bStarted[[2]int{j.Args.Round, j.Args.I}] = t
			b.mu.Unlock()
		}
		b.itemsDone.Add(1)
		return nil
	}, benchOptions)
	return pool.Register(w)
}

// fairKeyOf is the keyed pool's key: the item's Key.
var fairKeyOf = pool.KeyOf(func(a fairArgs) string { return a.Key })

// open opens pool name through pp, with fairKeyOf when keyed; with start,
// it also starts its dispatcher and waits until it leads and has loaded
// the queue.
func (b *fairBench) open(pp *producer.Producer, name string, keyed, start bool) (*pool.Pool, error) {
	cfg := pool.Config{Name: name, MaxParallelism: fairParallelism}
	if keyed {
		cfg.Key = fairKeyOf
	}
	pl, err := pool.New(b.ctx, pp, cfg)
	if err != nil || !start {
		return pl, err
	}
	if err := pl.Start(b.ctx); err != nil {
		return nil, err
	}
	if err := poolBenchWait(b.ctx, time.Minute, func() bool { st := pl.Stats(); return st.Leader && st.Loaded }); err != nil {
		return nil, fmt.Errorf("pool %s dispatcher: %w", name, err)
	}
	return pl, nil
}

// stopPool stops pl's dispatcher.
func stopPool(pl *pool.Pool) {
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = pl.Stop(sctx)
}

// enqueue enqueues count items of fn into pl, args(i) the i-th's, in
// batches of pool.MaxBatch.
func (b *fairBench) enqueue(pl *pool.Pool, fn jetflow.Function[fairArgs], count int, args func(i int) fairArgs) error {
	for i := 0; i < count; i += pool.MaxBatch {
		batch := make([]pool.Entry, 0, pool.MaxBatch)
		for j := i; j < min(count, i+pool.MaxBatch); j++ {
			batch = append(batch, pool.Entry{Call: fn.With(args(j))})
		}
		if _, err := pl.EnqueueBatch(b.ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// through is the time N items of fn take through pl, from the first
// enqueue until done counts them all.
func (b *fairBench) through(pl *pool.Pool, fn jetflow.Function[fairArgs], done *atomic.Int64, args func(i int) fairArgs) (time.Duration, error) {
	n := b.n
	base := done.Load()
	t0 := time.Now()
	if err := b.enqueue(pl, fn, n, args); err != nil {
		return 0, err
	}
	if err := poolBenchWait(b.ctx, 10*time.Minute, func() bool { return done.Load()-base >= int64(n) }); err != nil {
		return 0, fmt.Errorf("%d of %d ran: %w", done.Load()-base, n, err)
	}
	return time.Since(t0), nil
}

// throughput measures N items through the pool without keys, through the
// keyed pool (fairKeys keys, round robin), then the same with a per-key
// limit of 2, and prints the three rates.
func (b *fairBench) throughput() error {
	n := b.n
	dPlain, err := b.through(b.plain, fairPlain, &b.plainDone, func(i int) fairArgs { return fairArgs{I: i} })
	if err != nil {
		return fmt.Errorf("unkeyed items: %w", err)
	}
	keyArgs := func(i int) fairArgs { return fairArgs{Key: fmt.Sprintf("k%d", i%fairKeys), I: i} }
	dKeyed, err := b.through(b.keyed, fairItem, &b.itemsDone, keyArgs)
	if err != nil {
		return fmt.Errorf("keyed items: %w", err)
	}
	if err := b.keyed.SetKeyLimit(b.ctx, 2, pool.Queue); err != nil {
		return err
	}
	dLimited, err := b.through(b.keyed, fairItem, &b.itemsDone, keyArgs)
	if err != nil {
		return fmt.Errorf("keyed items with a key limit: %w", err)
	}
	if err := b.keyed.SetKeyLimit(b.ctx, 0, pool.Queue); err != nil {
		return err
	}
	rPlain, rKeyed, rLimited := rate(n, dPlain), rate(n, dKeyed), rate(n, dLimited)
	b.line("pool without keys                  %d items in %s = %10s items/s (max parallelism %d)", n, fmtDur(dPlain), fmtRate(rPlain), fairParallelism)
	b.line("pool with keys (%d keys)          %d items in %s = %10s items/s (%.2fx)", fairKeys, n, fmtDur(dKeyed), fmtRate(rKeyed), rKeyed/max(rPlain, 1e-9))
	b.line("pool with keys, key limit 2        %d items in %s = %10s items/s (%.2fx)", n, fmtDur(dLimited), fmtRate(rLimited), rLimited/max(rPlain, 1e-9))
	return nil
}

// tenants measures B's start latency in rounds (after one warm-up round),
// first alone in the idle keyed pool, then while A's aItems queued items
// saturate it, and prints both and their ratio.
func (b *fairBench) tenants(aItems, rounds int) error {
	if _, err := b.bRounds(0, 1); err != nil { // warm-up, not counted
		return err
	}
	alone, err := b.bRounds(1, rounds)
	if err != nil {
		return err
	}
	dEnqA, err := b.queueTenantA(aItems)
	if err != nil {
		return err
	}
	queuedBefore := b.keyed.Stats().Queued
	withA, err := b.bRounds(1+rounds, rounds)
	if err != nil {
		return err
	}
	queuedAfter := b.keyed.Stats().Queued
	pa, pw := percentiles(alone), percentiles(withA)
	b.line("tenant A: %d items enqueued in %s; %d still queued when B's rounds began, %d after", aItems, fmtDur(dEnqA), queuedBefore, queuedAfter)
	b.line("tenant B, %d rounds of %d items, start latency  without A: p50 %s p99 %s   with A queued: p50 %s p99 %s",
		rounds, fairBItems, fmtDur(pa.P50), fmtDur(pa.P99), fmtDur(pw.P50), fmtDur(pw.P99))
	b.line("tenant B p99 with A / without A   %.2f   (p50 %.2f; goal: p99 within 2x. One worker, max parallelism %d: without A, B's 10 items take the 10 free slots at once; with A every slot is busy, and B, a key back from a pause, takes the next slots freed)",
		float64(pw.P99)/float64(max(pa.P99, 1)), float64(pw.P50)/float64(max(pa.P50, 1)), fairParallelism)
	return nil
}

// queueTenantA enqueues A's aItems items all at once and returns how long
// that took, once the dispatcher holds A's whole queue (less what ran,
// and the items in flight), so that B's rounds begin with it loaded.
func (b *fairBench) queueTenantA(aItems int) (time.Duration, error) {
	t0 := time.Now()
	base := b.itemsDone.Load()
	if err := b.enqueue(b.keyed, fairItem, aItems, func(i int) fairArgs { return fairArgs{Key: "A", I: i} }); err != nil {
		return 0, fmt.Errorf("tenant A: %w", err)
	}
	dEnqA := time.Since(t0)
	loaded := func() bool {
		return int64(b.keyed.Stats().Queued)+b.itemsDone.Load()-base >= int64(aItems-2*fairParallelism)
	}
	if err := poolBenchWait(b.ctx, 5*time.Minute, loaded); err != nil {
		return 0, fmt.Errorf("tenant A's queue loaded: %w", err)
	}
	return dEnqA, nil
}

// bRounds runs count of B's rounds from round first: 10 items at once,
// latency from the enqueue call to each handler start; the next round once
// all have started.
func (b *fairBench) bRounds(first, count int) ([]time.Duration, error) {
	var lat []time.Duration
	for r := first; r < first+count; r++ {
		t0 := time.Now()
		if err := b.enqueue(b.bPool, fairItem, fairBItems, func(i int) fairArgs { return fairArgs{Key: "B", Round: r, I: i} }); err != nil {
			return nil, err
		}
		if err := poolBenchWait(b.ctx, 5*time.Minute, func() bool { return b.roundStarted(r) }); err != nil {
			return nil, fmt.Errorf("round %d of B: %w", r, err)
		}
		b.mu.Lock()
		for i := range fairBItems {
			lat = append(lat, b.bStarted[[2]int{r, i}].Sub(t0))
		}
		b.mu.Unlock()
	}
	return lat, nil
}

// roundStarted says whether every item of B's round r has started.
func (b *fairBench) roundStarted(r int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range fairBItems {
		if _, ok := b.bStarted[[2]int{r, i}]; !ok {
			return false
		}
	}
	return true
}
