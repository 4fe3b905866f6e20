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
	line := func(format string, a ...any) { fmt.Fprintf(out, "index "+format+"\n", a...) }
	scfg := streams.Config{Prefix: "benchidx"}
	jss, closeAll, err := connectEach(srv.ClientURL(), "bench-index-writer", "bench-index-scheduler", "bench-index-reader")
	if err != nil {
		return err
	}
	defer closeAll()
	sjs, rjs := jss[1], jss[2]
	// The writer keeps a wide window of asynchronous publishes.
	wjs, err := jetstream.New(jss[0].Conn(), jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		return err
	}
	if err := streams.Provision(ctx, wjs, scfg); err != nil {
		return err
	}
	st, err := kv.Open(ctx, wjs, scfg)
	if err != nil {
		return err
	}
	runs := engine.New(st)
	p, err := producer.New(ctx, rjs, producer.Config{Streams: scfg})
	if err != nil {
		return err
	}
	rd := runindex.NewReader(engine.Of(p).Store())
	fn := func(i int) string { return fmt.Sprintf("bench.idx.f%d", i%indexFunctions) }
	written := 0
	// fill writes records up to size.
	fill := func(size int) error {
		for ; written < size; written++ {
			i := written
			now := time.Now().UTC()
			r := &jetflow.Run{ID: fmt.Sprintf("b%09d", i), Name: fn(i), State: jetflow.Success,
				ScheduledTime: now, CreationTime: now, CompletedTime: now}
			step := engine.Succeed
			switch {
			case i%indexPendingEvery == indexPendingEvery-1:
				r.State, r.CompletedTime, r.ScheduledTime, step = jetflow.Pending, time.Time{}, now.Add(time.Hour), engine.Schedule
			case i%indexFailedEvery == indexFailedEvery/2:
				r.State, r.Error, step = jetflow.Failed, "bench: failed", engine.Fail
			}
			m, err := runs.WriteMsg(step, engine.None, r, 0)
			if err != nil {
				return err
			}
			if _, err := wjs.PublishMsgAsync(m); err != nil {
				return err
			}
			if i%(1<<15) == 1<<15-1 {
				select {
				case <-wjs.PublishAsyncComplete():
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		select {
		case <-wjs.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	// What the indexer costs the writers: the same number of record
	// writes without a scheduler, then with one following them.
	k := min(20_000, sizes[0]/4)
	start := time.Now()
	if err := fill(k); err != nil {
		return err
	}
	without := time.Since(start)
	s, err := scheduler.New(ctx, sjs, scheduler.Config{Streams: scfg, LeaseTTL: time.Second, RepairInterval: time.Hour})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(sctx)
	}()
	caughtUp := func() error {
		info, err := wjs.Stream(ctx, streams.KVStream(scfg.RunsBucket()))
		if err != nil {
			return err
		}
		last := info.CachedInfo().State.LastSeq
		return poolBenchWait(ctx, 30*time.Minute, func() bool {
			cp, err := rd.Checkpoint(ctx)
			return err == nil && !cp.Rebuilding && cp.Seq >= last
		})
	}
	if err := caughtUp(); err != nil {
		return fmt.Errorf("bench index: the indexer did not catch up: %w", err)
	}
	start = time.Now()
	if err := fill(2 * k); err != nil {
		return err
	}
	with := time.Since(start)
	line("record writes (async, create-only): %.0f/s without an indexer, %.0f/s with one following them (ratio %.2f; %d each)",
		float64(k)/without.Seconds(), float64(k)/with.Seconds(), without.Seconds()/with.Seconds(), k)
	for _, size := range sizes {
		from := written
		start := time.Now()
		if err := fill(size); err != nil {
			return err
		}
		filled := time.Since(start)
		start = time.Now()
		if err := caughtUp(); err != nil {
			return fmt.Errorf("bench index: the indexer did not catch up: %w", err)
		}
		caught := time.Since(start)
		line("%s records: filled in %s (%.0f records/s); indexer caught up %s later",
			count(size), filled.Round(time.Millisecond), float64(size-from)/filled.Seconds(), caught.Round(time.Millisecond))

		measure := func(name string, f func() (int, error)) error {
			runtime.GC()
			before, consumers := runindex.MessagesRead(), runindex.ConsumersMade()
			t0 := time.Now()
			n, err := f()
			if err != nil {
				return fmt.Errorf("bench index: %s: %w", name, err)
			}
			line("%s  %-34s %9s  %7d read by the index reader, %d short-lived consumers  (%d runs)", count(size), name, time.Since(t0).Round(10*time.Microsecond),
				runindex.MessagesRead()-before, runindex.ConsumersMade()-consumers, n)
			return nil
		}
		page := func(f producer.Filter) func() (int, error) {
			return func() (int, error) {
				pg, err := p.List(ctx, f)
				if err == nil && !pg.Indexed {
					err = fmt.Errorf("the page did not come from the index")
				}
				return len(pg.Runs), err
			}
		}
		for _, m := range []struct {
			name string
			f    func() (int, error)
		}{
			{"list page, no filter (the dashboard's first page)", page(producer.Filter{Limit: indexPage})},
			{"list page, state=failed", page(producer.Filter{State: jetflow.Failed, Limit: indexPage})},
			{"list page, function", page(producer.Filter{Function: fn(3), Limit: indexPage})},
			{"list page, function+state=failed", page(producer.Filter{Function: fn(indexFailedEvery / 2), State: jetflow.Failed, Limit: indexPage})},
			{"list page, state=pending", page(producer.Filter{State: jetflow.Pending, Limit: indexPage})},
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
		} {
			if err := measure(m.name, m.f); err != nil {
				return err
			}
		}
	}
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
