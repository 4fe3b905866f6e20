package runindex_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
)

// writesPerTick: 100 record writes every 10 ms, 10,000/s.
const writesPerTick = 100

// BenchmarkPageWhileWriting: pages of the failed runs (1 run in 100) read
// every 50 ms while records are written at a steady 10,000/s and an indexer
// follows them: what a page costs while the index is live. The writes not
// indexed yet are read from the runs stream's tail, so whatever makes the
// index lag makes pages read more (docs/runindex.md, "Costs"). b.N pages.
//
//	go test -run '^$' -bench PageWhileWriting -benchtime 40x ./internal/runindex
func BenchmarkPageWhileWriting(b *testing.B) {
	e := setupWith(b, streams.Config{})
	ix := runindex.New(e.ts.JS, e.cfg)
	ix.Name = "bench"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ix.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testserver.Eventually(b, 30*time.Second, "the indexer's term", func() bool { return ix.Stats().CaughtUp })
	var writes atomic.Int64
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			if i%writesPerTick == 0 {
				<-tick.C // a steady rate the indexer keeps up with
			}
			s, step := jetflow.Pending, engine.Schedule
			if i%100 == 0 {
				s, step = jetflow.Failed, engine.Fail
			}
			now := time.Now().UTC()
			r := &jetflow.Run{ID: fmt.Sprintf("w%08d", i), Name: "x", State: s, ScheduledTime: now, CreationTime: now, CompletedTime: now}
			m, err := e.runs.WriteMsg(step, engine.None, r, 0)
			if err != nil {
				return
			}
			if _, err := e.ts.JS.PublishMsgAsync(m); err != nil {
				return
			}
			writes.Add(1)
		}
	}()
	defer func() { cancel(); <-wdone }()
	testserver.Eventually(b, 30*time.Second, "10,000 writes, indexed", func() bool { return writes.Load() >= 10_000 && ix.Stats().Seq >= 10_000 })
	rd := runindex.NewReader(e.st)
	w0, r0, t0 := writes.Load(), runindex.MessagesRead(), time.Now()
	var spent time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		p, err := rd.List(context.Background(), runindex.Query{State: jetflow.Failed, Limit: 10})
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Runs) != 10 {
			b.Fatalf("page of %d runs", len(p.Runs))
		}
		spent += time.Since(start)
		time.Sleep(50 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(spent.Microseconds())/float64(b.N), "µs/page")
	b.ReportMetric(float64(runindex.MessagesRead()-r0)/float64(b.N), "msgs/page")
	b.ReportMetric(float64(writes.Load()-w0)/time.Since(t0).Seconds(), "writes/s")
}

// BenchmarkPageOverATail: a page of 10 failed runs (1 write in 100) when
// the index lags 5,000 writes (its indexer stopped): every filtered page
// reads those writes from the runs stream's tail. b.N pages.
func BenchmarkPageOverATail(b *testing.B) {
	e := setupWith(b, streams.Config{})
	_, stop := e.startIndexer("before")
	e.write("x", jetflow.Failed, 20)
	e.caughtUp()
	stop()
	for range 50 {
		e.write("x", jetflow.Pending, 99)
		e.write("x", jetflow.Failed, 1)
	}
	rd := runindex.NewReader(e.st)
	r0 := runindex.MessagesRead()
	b.ResetTimer()
	for range b.N {
		p, err := rd.List(context.Background(), runindex.Query{State: jetflow.Failed, Limit: 10})
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Runs) != 10 {
			b.Fatalf("page of %d runs", len(p.Runs))
		}
	}
	b.ReportMetric(float64(runindex.MessagesRead()-r0)/float64(b.N), "msgs/page")
}

// BenchmarkUnfilteredPage: the first page of every run (50 rows, no
// filter: the dashboard's first page, `jetflow runs list`) over a runs
// bucket of 10,000 and 100,000 records, an indexer caught up. The page
// reads the newest records, so its cost should not grow with the bucket
// (docs/scaling.md has the figure at 1M: JETFLOW_PAGE_SIZES=1000000).
//
//	go test -run '^$' -bench UnfilteredPage -benchtime 20x ./internal/runindex
func BenchmarkUnfilteredPage(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if v := os.Getenv("JETFLOW_PAGE_SIZES"); v != "" {
		sizes = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			sizes = append(sizes, n)
		}
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("records=%d", size), func(b *testing.B) {
			e := setupWith(b, streams.Config{})
			e.startIndexer("bench") // follows the writes
			for e.n < size {
				e.write(fmt.Sprintf("f%d", e.n/1000%10), jetflow.InProgress, min(10_000, size-e.n))
			}
			// The last 1,000 runs' first of ten written again: the stream
			// has gaps, as a deployment's does (a write removes the run's
			// revision before).
			for i := size - 9999; i <= size; i += 10 {
				e.change(fmt.Sprintf("r%06d", i), engine.Fail, jetflow.Failed)
			}
			e.caughtUp()
			rd := runindex.NewReader(e.st)
			r0 := runindex.MessagesRead()
			b.ResetTimer()
			t0 := time.Now()
			for range b.N {
				p, err := rd.List(context.Background(), runindex.Query{Limit: 50})
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Runs) != 50 || p.Runs[0].ID != fmt.Sprintf("r%06d", size-(size-1)%10) {
					b.Fatalf("page of %d runs, first %v", len(p.Runs), ids(p.Runs[:1]))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(time.Since(t0).Microseconds())/1000/float64(b.N), "ms/page")
			b.ReportMetric(float64(runindex.MessagesRead()-r0)/float64(b.N), "msgs/page")
		})
	}
}
