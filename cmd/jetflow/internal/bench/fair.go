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
	line := func(format string, a ...any) { fmt.Fprintf(out, "fairness "+format+"\n", a...) }

	scfg := streams.Config{Prefix: "benchfair"}
	jss, closeAll, err := connectEach(s.ClientURL(), "bench-fair-worker", "bench-fair-producer", "bench-fair-tenant-b")
	if err != nil {
		return err
	}
	defer closeAll()
	wjs, pjs, bjs := jss[0], jss[1], jss[2]

	var plainDone, itemsDone atomic.Int64
	var mu sync.Mutex
	bStarted := map[[2]int]time.Time{}
	stopWorker, err := startWorker(ctx, wjs, scfg, func(w *worker.Worker) error {
		worker.Handle(w, fairPlain, func(context.Context, *worker.Job[fairArgs]) error { plainDone.Add(1); return nil }, benchOptions)
		worker.Handle(w, fairItem, func(_ context.Context, j *worker.Job[fairArgs]) error {
			if j.Args.Key == "B" {
				t := time.Now()
				mu.Lock()
				bStarted[[2]int{j.Args.Round, j.Args.I}] = t
				mu.Unlock()
			}
			itemsDone.Add(1)
			return nil
		}, benchOptions)
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
	bp, err := producer.New(ctx, bjs, producer.Config{Streams: scfg})
	if err != nil {
		return err
	}
	keyOf := pool.KeyOf(func(a fairArgs) string { return a.Key })
	open := func(pp *producer.Producer, name string, keyed, start bool) (*pool.Pool, error) {
		cfg := pool.Config{Name: name, MaxParallelism: fairParallelism}
		if keyed {
			cfg.Key = keyOf
		}
		pl, err := pool.New(ctx, pp, cfg)
		if err != nil || !start {
			return pl, err
		}
		if err := pl.Start(ctx); err != nil {
			return nil, err
		}
		if err := poolBenchWait(ctx, time.Minute, func() bool { st := pl.Stats(); return st.Leader && st.Loaded }); err != nil {
			return nil, fmt.Errorf("pool %s dispatcher: %w", name, err)
		}
		return pl, nil
	}
	stopPool := func(pl *pool.Pool) {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = pl.Stop(sctx)
	}
	plain, err := open(p, "plain", false, true)
	if err != nil {
		return err
	}
	defer stopPool(plain)
	keyed, err := open(p, "keyed", true, true)
	if err != nil {
		return err
	}
	defer stopPool(keyed)
	// Tenant B's client of the keyed pool: its own connection.
	bPool, err := open(bp, "keyed", true, false)
	if err != nil {
		return err
	}

	enqueue := func(pl *pool.Pool, fn jetflow.Function[fairArgs], count int, args func(i int) fairArgs) error {
		for i := 0; i < count; i += pool.MaxBatch {
			batch := make([]pool.Entry, 0, pool.MaxBatch)
			for j := i; j < min(count, i+pool.MaxBatch); j++ {
				batch = append(batch, pool.Entry{Call: fn.With(args(j))})
			}
			if _, err := pl.EnqueueBatch(ctx, batch); err != nil {
				return err
			}
		}
		return nil
	}
	through := func(pl *pool.Pool, fn jetflow.Function[fairArgs], done *atomic.Int64, args func(i int) fairArgs) (time.Duration, error) {
		base := done.Load()
		t0 := time.Now()
		if err := enqueue(pl, fn, n, args); err != nil {
			return 0, err
		}
		if err := poolBenchWait(ctx, 10*time.Minute, func() bool { return done.Load()-base >= int64(n) }); err != nil {
			return 0, fmt.Errorf("%d of %d ran: %w", done.Load()-base, n, err)
		}
		return time.Since(t0), nil
	}

	// Throughput.
	dPlain, err := through(plain, fairPlain, &plainDone, func(i int) fairArgs { return fairArgs{I: i} })
	if err != nil {
		return fmt.Errorf("unkeyed items: %w", err)
	}
	keyArgs := func(i int) fairArgs { return fairArgs{Key: fmt.Sprintf("k%d", i%fairKeys), I: i} }
	dKeyed, err := through(keyed, fairItem, &itemsDone, keyArgs)
	if err != nil {
		return fmt.Errorf("keyed items: %w", err)
	}
	if err := keyed.SetKeyLimit(ctx, 2, pool.Queue); err != nil {
		return err
	}
	dLimited, err := through(keyed, fairItem, &itemsDone, keyArgs)
	if err != nil {
		return fmt.Errorf("keyed items with a key limit: %w", err)
	}
	if err := keyed.SetKeyLimit(ctx, 0, pool.Queue); err != nil {
		return err
	}
	rPlain, rKeyed, rLimited := rate(n, dPlain), rate(n, dKeyed), rate(n, dLimited)
	line("pool without keys                  %d items in %s = %10s items/s (max parallelism %d)", n, fmtDur(dPlain), fmtRate(rPlain), fairParallelism)
	line("pool with keys (%d keys)          %d items in %s = %10s items/s (%.2fx)", fairKeys, n, fmtDur(dKeyed), fmtRate(rKeyed), rKeyed/max(rPlain, 1e-9))
	line("pool with keys, key limit 2        %d items in %s = %10s items/s (%.2fx)", n, fmtDur(dLimited), fmtRate(rLimited), rLimited/max(rPlain, 1e-9))

	// B's rounds: 10 items at once, latency from the enqueue call to each
	// handler start; the next round once all have started.
	bRounds := func(first, count int) ([]time.Duration, error) {
		var lat []time.Duration
		for r := first; r < first+count; r++ {
			t0 := time.Now()
			if err := enqueue(bPool, fairItem, fairBItems, func(i int) fairArgs { return fairArgs{Key: "B", Round: r, I: i} }); err != nil {
				return nil, err
			}
			all := func() bool {
				mu.Lock()
				defer mu.Unlock()
				for i := range fairBItems {
					if _, ok := bStarted[[2]int{r, i}]; !ok {
						return false
					}
				}
				return true
			}
			if err := poolBenchWait(ctx, 5*time.Minute, all); err != nil {
				return nil, fmt.Errorf("round %d of B: %w", r, err)
			}
			mu.Lock()
			for i := range fairBItems {
				lat = append(lat, bStarted[[2]int{r, i}].Sub(t0))
			}
			mu.Unlock()
		}
		return lat, nil
	}
	if _, err := bRounds(0, 1); err != nil { // warm-up, not counted
		return err
	}
	alone, err := bRounds(1, rounds)
	if err != nil {
		return err
	}
	// A's items: queued all at once, then B's rounds while A's queue drains.
	t0 := time.Now()
	base := itemsDone.Load()
	if err := enqueue(keyed, fairItem, aItems, func(i int) fairArgs { return fairArgs{Key: "A", I: i} }); err != nil {
		return fmt.Errorf("tenant A: %w", err)
	}
	dEnqA := time.Since(t0)
	// The dispatcher holds A's whole queue (less what ran, and the items
	// in flight) before B's rounds begin.
	loaded := func() bool {
		return int64(keyed.Stats().Queued)+itemsDone.Load()-base >= int64(aItems-2*fairParallelism)
	}
	if err := poolBenchWait(ctx, 5*time.Minute, loaded); err != nil {
		return fmt.Errorf("tenant A's queue loaded: %w", err)
	}
	queuedBefore := keyed.Stats().Queued
	withA, err := bRounds(1+rounds, rounds)
	if err != nil {
		return err
	}
	queuedAfter := keyed.Stats().Queued
	pa, pw := percentiles(alone), percentiles(withA)
	line("tenant A: %d items enqueued in %s; %d still queued when B's rounds began, %d after", aItems, fmtDur(dEnqA), queuedBefore, queuedAfter)
	line("tenant B, %d rounds of %d items, start latency  without A: p50 %s p99 %s   with A queued: p50 %s p99 %s",
		rounds, fairBItems, fmtDur(pa.P50), fmtDur(pa.P99), fmtDur(pw.P50), fmtDur(pw.P99))
	line("tenant B p99 with A / without A   %.2f   (p50 %.2f; goal: p99 within 2x. One worker, max parallelism %d: without A, B's 10 items take the 10 free slots at once; with A every slot is busy, and B, a key back from a pause, takes the next slots freed)",
		float64(pw.P99)/float64(max(pa.P99, 1)), float64(pw.P50)/float64(max(pa.P50, 1)), fairParallelism)
	return nil
}
