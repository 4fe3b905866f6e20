package dashboard_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/scheduler"
)

// With a scheduler running, its run index serves the default page and the
// counts (one read, not a scan); they agree with a scan.
func TestAPIFromTheRunIndex(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	e.startWorker(t)
	ctx := context.Background()
	s, err := scheduler.New(ctx, e.JS, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	for _, id := range []string{"s1", "s2", "s3"} {
		e.enqueue(t, okFn.With(testArgs{N: 1}), id)
	}
	e.enqueue(t, failFn.With(testArgs{}), "f1")
	e.enqueue(t, failFn.With(testArgs{}), "f2")
	e.enqueue(t, idleFn.With(testArgs{}), "p1")
	e.waitState(t, "f1", jetflow.Failed)
	e.waitState(t, "f2", jetflow.Failed)
	e.waitState(t, "s3", jetflow.Success)
	want := counts{Pending: 1, Success: 3, Failed: 2, Total: 6}
	testserver.Eventually(t, 30*time.Second, "counts from the index", func() bool {
		var c counts
		getJSON(t, "GET", e.URL+"/api/counts", http.StatusOK, &c)
		return c.Source == "index" && c.numbers() == want
	})
	var page listPage
	getJSON(t, "GET", e.URL+"/api/runs?state=failed&limit=1", http.StatusOK, &page)
	if !page.Indexed || len(page.Runs) != 1 || page.Next == "" || page.Counts.numbers() != want {
		t.Fatalf("first page of failed runs: %v indexed %v next %q counts %+v", ids(page.Runs), page.Indexed, page.Next, page.Counts)
	}
	first := ids(page.Runs)
	next := page.Next
	page = listPage{}
	getJSON(t, "GET", e.URL+"/api/runs?state=failed&limit=1&after="+next, http.StatusOK, &page)
	if got := append(first, ids(page.Runs)...); !page.Indexed || !slices.Contains(got, "f1") || !slices.Contains(got, "f2") || page.Next != "" || page.Prev == "" {
		t.Fatalf("failed runs over two pages: %v next %q prev %q", got, page.Next, page.Prev)
	}
	prev := page.Prev
	page = listPage{}
	getJSON(t, "GET", e.URL+"/api/runs?state=failed&limit=1&before="+prev, http.StatusOK, &page)
	if !slices.Equal(ids(page.Runs), first) {
		t.Fatalf("back to the first page: %v, want %v", ids(page.Runs), first)
	}
}
