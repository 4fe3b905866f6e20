package backlog_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/backlog"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// TestScrapeCostWithRunsWaiting measures one backlog read (a scrape of
// the gauges) with 10,000 and with JETFLOW_SCRAPE_RUNS (e.g. 1000000) runs
// waiting in the delayed store, due an hour or more from now,
// beside 100 runs due within a minute and 500 within ten: the figures
// docs/operations.md gives. It checks that each read counts the runs due
// soon exactly, and logs the median and slowest of 21 reads. Skipped
// unless JETFLOW_SCRAPE_RUNS is set: filling the store takes minutes.
func TestScrapeCostWithRunsWaiting(t *testing.T) {
	big, _ := strconv.Atoi(os.Getenv("JETFLOW_SCRAPE_RUNS"))
	if big <= 0 {
		t.Skip("set JETFLOW_SCRAPE_RUNS (e.g. 1000000) to measure")
	}
	ts := testserver.Start(t)
	ctx := context.Background()
	if _, err := producer.New(ctx, ts.JS, producer.Config{}); err != nil {
		t.Fatal(err)
	}
	cfg := streams.Config{}.WithDefaults()
	bucket := cfg.DelayedBucket()
	now := time.Now().Unix()
	put := func(from, n int, due func(i int) int64) {
		for i := from; i < from+n; i++ {
			subj := streams.KVSubject(bucket, fmt.Sprintf("%d.run%09d", due(i), i))
			if _, err := ts.JS.PublishAsync(subj, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if i%2000 == 1999 {
				select {
				case <-ts.JS.PublishAsyncComplete():
				case <-time.After(time.Minute):
					t.Fatal("publishes not acknowledged within a minute")
				}
			}
		}
		<-ts.JS.PublishAsyncComplete()
	}
	// Due soon, planted before each measurement and removed after it: 100
	// within the minute, 400 more within ten.
	st, err := ts.JS.Stream(ctx, streams.KVStream(bucket))
	if err != nil {
		t.Fatal(err)
	}
	soon := func() (remove func()) {
		at := time.Now().Unix()
		var subjects []string
		for i := range 500 {
			due := at + 5 + int64(i%40)
			if i >= 100 {
				due = at + 120 + int64(i%400)
			}
			subj := streams.KVSubject(bucket, fmt.Sprintf("%d.soon%d", due, i))
			if _, err := ts.JS.PublishAsync(subj, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			subjects = append(subjects, subj)
		}
		<-ts.JS.PublishAsyncComplete()
		return func() {
			for _, subj := range subjects {
				if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// The later runs are spread over JETFLOW_SCRAPE_SECONDS distinct due
	// seconds (default 10,000, from an hour on): the server counts the due
	// keys by walking its subject tree, pruned at each whole token, so a
	// read's cost follows the distinct due seconds in the store (at most
	// 86,400 per day of horizon), not the runs due in each.
	seconds, _ := strconv.Atoi(os.Getenv("JETFLOW_SCRAPE_SECONDS"))
	if seconds <= 0 {
		seconds = 10000
	}
	later := func(i int) int64 { return now + 3600 + int64(i%seconds) }
	r := backlog.New(ts.JS, streams.Config{})
	measure := func(waiting int) {
		defer soon()()
		var ds []time.Duration
		for range 21 {
			start := time.Now()
			f, err := r.Read(ctx)
			ds = append(ds, time.Since(start))
			if err != nil {
				t.Fatal(err)
			}
			if f.Due1m != 100 || f.Due10m != 500 {
				t.Fatalf("with %d waiting: due %d in 1m, %d in 10m; want 100 and 500", waiting, f.Due1m, f.Due10m)
			}
		}
		slices.Sort(ds)
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d runs waiting later over %d due seconds (%d messages, %d MB in the delayed store): one read median %s, slowest %s",
			waiting, min(waiting, seconds), info.State.Msgs, info.State.Bytes>>20, ds[len(ds)/2], ds[len(ds)-1])
	}
	put(0, 10000, later)
	measure(10000)
	fillStart := time.Now()
	put(10000, big-10000, later)
	t.Logf("filled %d more in %s", big-10000, time.Since(fillStart).Round(time.Second))
	measure(big)
}
