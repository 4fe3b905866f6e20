package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
)

// BenchmarkRunsPage measures GET /api/runs (a page of 50 and the counts)
// on a bucket of 20,000 pending runs with records (1,000 of them delayed
// by an hour), in each order: each costs one header-only scan of the
// bucket plus the records it reads.
func BenchmarkRunsPage(b *testing.B) {
	ts := testserver.Start(b)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		b.Fatal(err)
	}
	const n = 20000
	for i := 0; i < n; i += 1000 {
		items := make([]producer.Item, 1000)
		for j := range items {
			items[j] = producer.Item{Call: idleFn.With(testArgs{N: i + j}), Options: []producer.Option{producer.WithID(fmt.Sprintf("r%05d", i+j))}}
			if i == n/2 {
				items[j].At = time.Now().Add(time.Hour)
			}
		}
		if _, err := p.Batch(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
	srv := httptest.NewServer(dashboard.New(p, dashboard.Config{}))
	b.Cleanup(srv.Close)
	for _, q := range []string{"", "sort=scheduled", "sort=state&order=asc", "sort=id&order=asc"} {
		b.Run(fmt.Sprintf("first/%s", q), func(b *testing.B) {
			for b.Loop() {
				var page listPage
				getJSON(b, "GET", srv.URL+"/api/runs?limit=50&"+q, http.StatusOK, &page)
				if len(page.Runs) != 50 || page.Counts.Total != n {
					b.Fatalf("%d runs, counts %+v", len(page.Runs), page.Counts)
				}
			}
		})
	}
}
