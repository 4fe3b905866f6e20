package dashboard

import (
	"context"
	"slices"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
)

// TestPageQueuedBeyondReads: runs known only by their waiting message
// (published without a record, no worker) are listed and counted also
// beyond the number of messages a page reads to place them; those are read
// when they are on the page.
func TestPageQueuedBeyondReads(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fn := jetflow.Define[int]("queued.only")
	var want []string
	for i := range 5 {
		id, err := p.Enqueue(ctx, fn.With(i)) // a generated id: no record
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	h := New(p, Config{}).(*handler)
	h.queuedReads = 2
	for _, lq := range []listQuery{
		{Limit: 2, Sort: sortCreated},
		{Limit: 2, Sort: sortScheduled},
		{Limit: 2, Sort: sortID, Asc: true},
	} {
		var got []string
		for range 5 {
			page, err := h.page(ctx, lq)
			if err != nil {
				t.Fatal(err)
			}
			if page.Counts.Pending != 5 || page.Counts.Total != 5 {
				t.Fatalf("%s: counts %+v", lq.Sort, page.Counts)
			}
			for _, r := range page.Runs {
				if r.Name != "queued.only" || r.State != jetflow.Pending || len(r.Args) == 0 {
					t.Fatalf("%s: run %+v", lq.Sort, r)
				}
				got = append(got, r.ID)
			}
			if page.Next == "" {
				break
			}
			lq.After, err = parseCursor(page.Next)
			if err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(got)
		w := slices.Sorted(slices.Values(want))
		if !slices.Equal(got, w) {
			t.Fatalf("%s: listed %v, want each of %v once", lq.Sort, got, w)
		}
	}
}
