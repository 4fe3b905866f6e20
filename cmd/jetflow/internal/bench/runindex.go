package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// IndexSizes are the runs bucket sizes RunIndex fills by default.
var IndexSizes = []int{100_000, 1_000_000}

// Shape of the records RunIndex writes: indexFunctions functions in turn,
// one run in indexFailedEvery failed, one in indexPendingEvery pending (due
// in an hour, so that the repair sweep looks at it and leaves it), the
// rest succeeded.
const (
	indexFunctions    = 10
	indexFailedEvery  = 1000
	indexPendingEvery = 10_000
	indexPage         = 50
)

// RunIndex fills the runs bucket of a fresh embedded server (default
// durability) with records written through the engine (create-only
// writes, published asynchronously), up to each size in turn, with a
// scheduler leading (its indexer keeps the run index). First it times the
// same number of writes without a scheduler and with one following them
// (what the indexer costs the writers). At each size it
// prints how long the indexer took to catch up, then the time and the
// messages read of one List page (50 runs) without a filter, filtered by
// state, by function and by both, of the counts, and of the repair sweep over the index's
// candidates, and beside them the same page, counts and sweep reading
// every record: the indexed figures stay flat, the others grow with the
// bucket.
func RunIndex(ctx context.Context, out io.Writer, sizes []int) error {
	if len(sizes) == 0 {
		sizes = IndexSizes
	}
	srv, stop, err := freshServer("index")
	if err != nil {
		return err
	}
	defer stop()
	jss, closeAll, err := connectEach(srv.ClientURL(), "bench-index-writer", "bench-index-scheduler", "bench-index-reader")
	if err != nil {
		return err
	}
	defer closeAll()
	b, err := newIndexBench(ctx, out, jss[0], jss[2])
	if err != nil {
		return err
	}
	// What the indexer costs the writers: the same number of record
	// writes without a scheduler, then with one following them.
	k := min(20_000, sizes[0]/4)
	without, err := b.timedFill(k)
	if err != nil {
		return err
	}
	stopScheduler, err := b.startScheduler(jss[1])
	if err != nil {
		return err
	}
	defer stopScheduler()
	if err := b.writesWithIndexer(k, without); err != nil {
		return err
	}
	for _, size := range sizes {
		if err := b.atSize(size); err != nil {
			return err
		}
	}
	return nil
}

// indexBench is what RunIndex's phases share: the record writer (its own
// connection, a wide window of asynchronous publishes), the producer and
// the index reader (another connection), the scheduler once started, and
// how many records are written so far.
type indexBench struct {
	ctx     context.Context
	out     io.Writer
	scfg    streams.Config
	wjs     jetstream.JetStream
	runs    *engine.Runs
	p       *producer.Producer
	rd      *runindex.Reader
	s       *scheduler.Scheduler // nil until startScheduler
	written int
}

// newIndexBench provisions the streams and opens the writer (on wconn's
// connection), the producer and the index reader (on rjs).
func newIndexBench(ctx context.Context, out io.Writer, wconn, rjs jetstream.JetStream) (*indexBench, error) {
	b := &indexBench{ctx: ctx, out: out, scfg: streams.Config{Prefix: "benchidx"}}
	// The writer keeps a wide window of asynchronous publishes.
	wjs, err := jetstream.New(wconn.Conn(), jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		return nil, err
	}
	b.wjs = wjs
	if err := streams.Provision(ctx, wjs, b.scfg); err != nil {
		return nil, err
	}
	st, err := kv.Open(ctx, wjs, b.scfg)
	if err != nil {
		return nil, err
	}
	b.runs = engine.New(st)
	b.p, err = producer.New(ctx, rjs, producer.Config{Streams: b.scfg})
	if err != nil {
		return nil, err
	}
	b.rd = runindex.NewReader(engine.Of(b.p).Store())
	return b, nil
}

// line prints one figure, after "index ".
func (b *indexBench) line(format string, a ...any) {
	fmt.Fprintf(b.out, "index "+format+"\n", a...)
}

// indexFn is the function of run i: indexFunctions functions in turn.
func indexFn(i int) string { return fmt.Sprintf("bench.idx.f%d", i%indexFunctions) }

// fill writes records up to size.
func (b *indexBench) fill(size int) error {
	for ; b.written < size; b.written++ {
		i := b.written
		now := time.Now().UTC()
		r := &jetflow.Run{ID: fmt.Sprintf("b%09d", i), Name: indexFn(i), State: jetflow.Success,
			ScheduledTime: now, CreationTime: now, CompletedTime: now}
		step := engine.Succeed
		switch {
		case i%indexPendingEvery == indexPendingEvery-1:
			r.State, r.CompletedTime, r.ScheduledTime, step = jetflow.Pending, time.Time{}, now.Add(time.Hour), engine.Schedule
		case i%indexFailedEvery == indexFailedEvery/2:
			r.State, r.Error, step = jetflow.Failed, "bench: failed", engine.Fail
		}
		m, err := b.runs.WriteMsg(step, engine.None, r, 0)
		if err != nil {
			return err
		}
		if _, err := b.wjs.PublishMsgAsync(m); err != nil {
			return err
		}
		if i%(1<<15) == 1<<15-1 {
			select {
			case <-b.wjs.PublishAsyncComplete():
			case <-b.ctx.Done():
				return b.ctx.Err()
			}
		}
	}
	select {
	case <-b.wjs.PublishAsyncComplete():
	case <-b.ctx.Done():
		return b.ctx.Err()
	}
	return nil
}

// timedFill is fill, timed.
func (b *indexBench) timedFill(size int) (time.Duration, error) {
	start := time.Now()
	err := b.fill(size)
	return time.Since(start), err
}

// startScheduler starts a scheduler on sjs (its repair sweep an hour
// apart: the figures run the sweeps themselves); stop stops it.
func (b *indexBench) startScheduler(sjs jetstream.JetStream) (stop func(), err error) {
	s, err := scheduler.New(b.ctx, sjs, scheduler.Config{Streams: b.scfg, LeaseTTL: time.Second, RepairInterval: time.Hour})
	if err != nil {
		return nil, err
	}
	if err := s.Start(b.ctx); err != nil {
		return nil, err
	}
	b.s = s
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(sctx)
	}, nil
}

// caughtUp waits until the index covers the last record written.
func (b *indexBench) caughtUp() error {
	info, err := b.wjs.Stream(b.ctx, streams.KVStream(b.scfg.RunsBucket()))
	if err != nil {
		return fmt.Errorf("bench index: the indexer did not catch up: %w", err)
	}
	last := info.CachedInfo().State.LastSeq
	if err := poolBenchWait(b.ctx, 30*time.Minute, func() bool {
		cp, err := b.rd.Checkpoint(b.ctx)
		return err == nil && !cp.Rebuilding && cp.Seq >= last
	}); err != nil {
		return fmt.Errorf("bench index: the indexer did not catch up: %w", err)
	}
	return nil
}

// writesWithIndexer times k more record writes with the scheduler's
// indexer following them, once it has caught up, and prints them beside
// the k writes without (taken without).
func (b *indexBench) writesWithIndexer(k int, without time.Duration) error {
	if err := b.caughtUp(); err != nil {
		return err
	}
	with, err := b.timedFill(2 * k)
	if err != nil {
		return err
	}
	b.line("record writes (async, create-only): %.0f/s without an indexer, %.0f/s with one following them (ratio %.2f; %d each)",
		float64(k)/without.Seconds(), float64(k)/with.Seconds(), without.Seconds()/with.Seconds(), k)
	return nil
}

// atSize fills the runs bucket up to size, waits for the indexer to catch
// up, and prints both times, then measures each of indexQueries.
func (b *indexBench) atSize(size int) error {
	from := b.written
	filled, err := b.timedFill(size)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := b.caughtUp(); err != nil {
		return err
	}
	caught := time.Since(start)
	b.line("%s records: filled in %s (%.0f records/s); indexer caught up %s later",
		count(size), filled.Round(time.Millisecond), float64(size-from)/filled.Seconds(), caught.Round(time.Millisecond))
	for _, q := range b.queries(size) {
		if err := b.measure(size, q.name, q.f); err != nil {
			return err
		}
	}
	return nil
}

// indexQuery is one measured read: it returns the runs it found.
type indexQuery struct {
	name string
	f    func() (int, error)
}

// queries are the reads measured at each size: List pages, counts and
// the repair sweep through the index, then the same reading every record.
func (b *indexBench) queries(size int) []indexQuery {
	ctx, p, rd, s := b.ctx, b.p, b.rd, b.s
	return []indexQuery{
		{"list page, no filter (the dashboard's first page)", b.page(producer.Filter{Limit: indexPage})},
		{"list page, state=failed", b.page(producer.Filter{State: jetflow.Failed, Limit: indexPage})},
		{"list page, function", b.page(producer.Filter{Function: indexFn(3), Limit: indexPage})},
		{"list page, function+state=failed", b.page(producer.Filter{Function: indexFn(indexFailedEvery / 2), State: jetflow.Failed, Limit: indexPage})},
		{"list page, state=pending", b.page(producer.Filter{State: jetflow.Pending, Limit: indexPage})},
		{"counts (all functions)", func() (int, error) {
			c, err := p.Counts(ctx, "")
			if err == nil && c.Source != "index" {
				err = fmt.Errorf("counts from %s", c.Source)
			}
			if err == nil && int(c.Total) != size {
				err = fmt.Errorf("counts total %d, want %d", c.Total, size)
			}
			return int(c.Total), err
		}},
		{"repair sweep (index candidates)", func() (int, error) { return s.RepairIndexed(ctx) }},
		{"scan: list page, state=failed", func() (int, error) {
			pg, err := rd.ListScan(ctx, runindex.Query{State: jetflow.Failed, Limit: indexPage})
			return len(pg.Runs), err
		}},
		{"scan: counts", func() (int, error) {
			c, err := rd.CountsScan(ctx, "")
			return int(c.Total), err
		}},
		{"scan: repair sweep (every record)", func() (int, error) { return s.Repair(ctx) }},
	}
}

// page is a query of one List page of f, which must come from the index.
func (b *indexBench) page(f producer.Filter) func() (int, error) {
	return func() (int, error) {
		pg, err := b.p.List(b.ctx, f)
		if err == nil && !pg.Indexed {
			err = fmt.Errorf("the page did not come from the index")
		}
		return len(pg.Runs), err
	}
}

// measure times f after a GC and prints its time, the messages the index
// reader read and the short-lived consumers it made meanwhile, and the
// runs f found.
func (b *indexBench) measure(size int, name string, f func() (int, error)) error {
	runtime.GC()
	before, consumers := runindex.MessagesRead(), runindex.ConsumersMade()
	t0 := time.Now()
	n, err := f()
	if err != nil {
		return fmt.Errorf("bench index: %s: %w", name, err)
	}
	b.line("%s  %-34s %9s  %7d read by the index reader, %d short-lived consumers  (%d runs)", count(size), name, time.Since(t0).Round(10*time.Microsecond),
		runindex.MessagesRead()-before, runindex.ConsumersMade()-consumers, n)
	return nil
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
