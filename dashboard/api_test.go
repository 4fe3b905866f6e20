package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/scheduler"
)

func TestAPIListFiltersAndPages(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	for _, id := range []string{"a1", "a2", "a3", "a4", "a5"} {
		e.enqueue(t, idleFn.With(testArgs{N: 1}), id)
	}
	e.enqueue(t, otherFn.With(testArgs{}), "b1")
	e.enqueue(t, otherFn.With(testArgs{}), "b2")
	if err := e.P.Cancel(context.Background(), "a2"); err != nil {
		t.Fatal(err)
	}

	var all listPage
	getJSON(t, "GET", e.URL+"/api/runs?sort=created", http.StatusOK, &all)
	// Newest first, with the counts of the page's function filter.
	if got, want := ids(all.Runs), []string{"b2", "b1", "a5", "a4", "a3", "a2", "a1"}; !slices.Equal(got, want) || all.Next != "" || all.Prev != "" {
		t.Fatalf("all runs: %v next %q prev %q, want %v and no other page", got, all.Next, all.Prev, want)
	}
	if all.Sort != "created" || all.Order != "desc" || all.Counts.numbers() != (counts{Pending: 6, Canceled: 1, Total: 7}) {
		t.Fatalf("sort %q order %q counts %+v", all.Sort, all.Order, all.Counts)
	}
	// The default order: newest activity first (a2's cancel is the last
	// write), with the same counts.
	all = listPage{}
	getJSON(t, "GET", e.URL+"/api/runs", http.StatusOK, &all)
	if got, want := ids(all.Runs), []string{"a2", "b2", "b1", "a5", "a4", "a3", "a1"}; !slices.Equal(got, want) || all.Next != "" || all.Prev != "" {
		t.Fatalf("all runs by last write: %v next %q prev %q, want %v and no other page", got, all.Next, all.Prev, want)
	}
	if all.Sort != "updated" || all.Order != "desc" || all.Counts.numbers() != (counts{Pending: 6, Canceled: 1, Total: 7}) || all.Counts.Source != "scan" {
		t.Fatalf("sort %q order %q counts %+v", all.Sort, all.Order, all.Counts)
	}
	// The API's runs have the record's JSON field names.
	_, _, raw := do(t, "GET", e.URL+"/api/runs?sort=created&limit=1", nil)
	for _, f := range []string{`"id":"b2"`, `"name":"other.fn"`, `"state":"pending"`, `"scheduledTime":`, `"creationTime":`, `"attempts":0`} {
		if !strings.Contains(string(raw), f) {
			t.Fatalf("GET /api/runs lacks %s: %s", f, raw)
		}
	}
	if r := all.Runs[6]; r.Name != "test.idle" || r.State != jetflow.Pending || string(r.Args) != `{"n":1}` || r.ScheduledTime.IsZero() {
		t.Fatalf("run a1 as listed: %+v", r)
	}

	var page listPage
	getJSON(t, "GET", e.URL+"/api/runs?function=other.fn", http.StatusOK, &page)
	if got := ids(page.Runs); !slices.Equal(got, []string{"b2", "b1"}) {
		t.Fatalf("function=other.fn: %v", got)
	}
	getJSON(t, "GET", e.URL+"/api/runs?state=canceled", http.StatusOK, &page)
	if got := ids(page.Runs); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("state=canceled: %v", got)
	}
	// States are accepted case-insensitively, as by the CLI.
	getJSON(t, "GET", e.URL+"/api/runs?state=PENDING&function=test.idle", http.StatusOK, &page)
	if got := ids(page.Runs); !slices.Equal(got, []string{"a5", "a4", "a3", "a1"}) {
		t.Fatalf("state=PENDING&function=test.idle: %v", got)
	}
	// The other orders: by id, by state (pending first), by scheduled time.
	getJSON(t, "GET", e.URL+"/api/runs?sort=id&order=asc", http.StatusOK, &page)
	if got := ids(page.Runs); !slices.Equal(got, []string{"a1", "a2", "a3", "a4", "a5", "b1", "b2"}) {
		t.Fatalf("sort=id&order=asc: %v", got)
	}
	getJSON(t, "GET", e.URL+"/api/runs?sort=state&order=asc&limit=6", http.StatusOK, &page)
	if got := ids(page.Runs); len(got) != 6 || got[5] == "a2" || page.Next == "" {
		t.Fatalf("sort=state&order=asc: %v (next %q), want the 6 pending runs first", got, page.Next)
	}
	after6 := page.Next
	page = listPage{}
	getJSON(t, "GET", e.URL+"/api/runs?sort=state&order=asc&limit=6&after="+after6, http.StatusOK, &page)
	if got := ids(page.Runs); !slices.Equal(got, []string{"a2"}) || page.Next != "" || page.Prev == "" {
		t.Fatalf("sort=state, second page: %v next %q prev %q", got, page.Next, page.Prev)
	}

	// Pages of 3 follow the cursor to the end, each run once, in every
	// order, and the prev cursors lead back to the first page.
	for _, order := range []string{"", "sort=scheduled", "sort=scheduled&order=asc", "sort=state", "sort=id&order=asc", "sort=id"} {
		var want listPage
		getJSON(t, "GET", e.URL+"/api/runs?"+order, http.StatusOK, &want)
		var seen []string
		var pages []listPage
		after := ""
		for range 10 {
			page = listPage{}
			getJSON(t, "GET", e.URL+"/api/runs?limit=3&"+order+"&after="+after, http.StatusOK, &page)
			seen = append(seen, ids(page.Runs)...)
			pages = append(pages, page)
			if (after == "") != (page.Prev == "") {
				t.Fatalf("%s: page after %q has prev %q", order, after, page.Prev)
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		if !slices.Equal(seen, ids(want.Runs)) || len(pages) != 3 {
			t.Fatalf("%s: paged %v in %d pages, want %v", order, seen, len(pages), ids(want.Runs))
		}
		// Back from the last page.
		back := pages[len(pages)-1].Prev
		for i := len(pages) - 2; i >= 0; i-- {
			page = listPage{}
			getJSON(t, "GET", e.URL+"/api/runs?limit=3&"+order+"&before="+back, http.StatusOK, &page)
			if !slices.Equal(ids(page.Runs), ids(pages[i].Runs)) || page.Next == "" {
				t.Fatalf("%s: previous page %v (next %q), want %v", order, ids(page.Runs), page.Next, ids(pages[i].Runs))
			}
			back = page.Prev
		}
		if back != "" {
			t.Fatalf("%s: the first page reached backwards has prev %q", order, back)
		}
	}

	var empty listPage
	getJSON(t, "GET", e.URL+"/api/runs?function=nobody.here", http.StatusOK, &empty)
	if empty.Runs == nil || len(empty.Runs) != 0 {
		t.Fatalf("no match: runs %v, want an empty list", empty.Runs)
	}

	for _, q := range []string{"state=done", "limit=0", "limit=1001", "limit=x", "function=a..b", "after=a.b", "before=a.b", "sort=name", "order=up", "sort=created&order=asc", "after=a1&before=a2",
		"function=" + strings.Repeat("a.", 50_000) + "b"} {
		msg := apiError(t, "GET", e.URL+"/api/runs?"+q, http.StatusBadRequest)
		if len(msg) > 1100 {
			t.Fatalf("%.40s…: an error of %d bytes echoes the request", q, len(msg))
		}
		t.Logf("%.80s: %.200s", q, msg)
	}

	var c counts
	getJSON(t, "GET", e.URL+"/api/counts", http.StatusOK, &c)
	if want := (counts{Pending: 6, Canceled: 1, Total: 7}); c.numbers() != want {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
	getJSON(t, "GET", e.URL+"/api/counts?function=test.idle", http.StatusOK, &c)
	if want := (counts{Pending: 4, Canceled: 1, Total: 5}); c.numbers() != want {
		t.Fatalf("counts of test.idle %+v, want %+v", c, want)
	}
}

func TestAPIGetCancelAndErrors(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	e.startWorker(t)
	pending := e.enqueue(t, idleFn.With(testArgs{N: 7, Note: "hi"}), "p1")
	running := e.enqueue(t, blockFn.With(testArgs{}), "r1")
	done := e.enqueue(t, okFn.With(testArgs{N: 21}), "d1")
	e.waitState(t, running, jetflow.InProgress)
	e.waitState(t, done, jetflow.Success)

	var r jetflow.Run
	getJSON(t, "GET", e.URL+"/api/runs/"+pending, http.StatusOK, &r)
	if r.ID != pending || r.Name != "test.idle" || r.State != jetflow.Pending || string(r.Args) != `{"n":7,"note":"hi"}` {
		t.Fatalf("GET %s: %+v", pending, r)
	}
	getJSON(t, "GET", e.URL+"/api/runs/"+done, http.StatusOK, &r)
	if r.State != jetflow.Success || string(r.Result) != `{"doubled":42,"note":""}` || r.CompletedTime.IsZero() {
		t.Fatalf("GET %s: %+v", done, r)
	}

	// 404 for an unknown run, 400 for an id that cannot be one.
	if msg := apiError(t, "GET", e.URL+"/api/runs/nope", http.StatusNotFound); !strings.Contains(msg, "not found") {
		t.Fatalf("unknown run: %q", msg)
	}
	apiError(t, "GET", e.URL+"/api/runs/a.b", http.StatusBadRequest)
	apiError(t, "POST", e.URL+"/api/runs/nope/cancel", http.StatusNotFound)

	type cancelResult struct {
		Canceled bool         `json:"canceled"`
		Run      *jetflow.Run `json:"run"`
	}
	for _, id := range []string{pending, running} {
		var res cancelResult
		getJSON(t, "POST", e.URL+"/api/runs/"+id+"/cancel", http.StatusOK, &res)
		if !res.Canceled || res.Run.State != jetflow.Canceled || res.Run.ID != id {
			t.Fatalf("cancel %s: %+v %+v", id, res, res.Run)
		}
		if got := e.waitState(t, id, jetflow.Canceled); got.Error == "" {
			t.Fatalf("canceled run %s has no error", id)
		}
	}
	// Canceling a run that has ended changes nothing and says so.
	var res cancelResult
	getJSON(t, "POST", e.URL+"/api/runs/"+done+"/cancel", http.StatusOK, &res)
	if res.Canceled || res.Run.State != jetflow.Success {
		t.Fatalf("cancel of an ended run: %+v %+v", res, res.Run)
	}
	if got := e.waitState(t, done, jetflow.Success); string(got.Result) != `{"doubled":42,"note":""}` {
		t.Fatalf("ended run changed: %+v", got)
	}

	// A browser form without the page's script is sent back to the run.
	st, hdr, _ := do(t, "POST", e.URL+"/api/runs/"+done+"/cancel", map[string]string{"Accept": "text/html", "Sec-Fetch-Site": "same-origin"})
	if st != http.StatusSeeOther || hdr.Get("Location") != "/runs/"+done {
		t.Fatalf("form post: status %d Location %q", st, hdr.Get("Location"))
	}
	// Another site cannot cancel through a visitor's browser.
	st, _, body := do(t, "POST", e.URL+"/api/runs/"+done+"/cancel", map[string]string{"Sec-Fetch-Site": "cross-site"})
	if st != http.StatusForbidden || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("cross-site post: status %d %s", st, body)
	}

	// Wrong methods are 405 with Allow; unknown endpoints 404, as JSON.
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/api/runs/" + pending + "/cancel", "POST"},
		{"DELETE", "/api/runs/" + pending, "GET, HEAD"},
		{"POST", "/api/runs", "GET, HEAD"},
		{"PUT", "/api/events", "GET, HEAD"},
	} {
		st, hdr, body := do(t, c.method, e.URL+c.path, nil)
		if st != http.StatusMethodNotAllowed || hdr.Get("Allow") != c.allow || !json.Valid(body) {
			t.Fatalf("%s %s: status %d Allow %q body %s", c.method, c.path, st, hdr.Get("Allow"), body)
		}
	}
	apiError(t, "GET", e.URL+"/api/nothing", http.StatusNotFound)
	if st, _, _ := do(t, "POST", e.URL+"/", nil); st != http.StatusMethodNotAllowed {
		t.Fatalf("POST /: status %d", st)
	}
}

func TestAPIFunctions(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	e.startWorker(t)
	var got struct {
		Functions []struct {
			Name        string       `json:"name"`
			Kind        jetflow.Kind `json:"kind"`
			Worker      string       `json:"worker"`
			Concurrency int          `json:"concurrency"`
		} `json:"functions"`
	}
	getJSON(t, "GET", e.URL+"/api/functions", http.StatusOK, &got)
	var names []string
	for _, f := range got.Functions {
		names = append(names, f.Name)
		if f.Worker != "w1" || f.Kind != jetflow.Retryable {
			t.Fatalf("function %+v: want worker w1, retryable", f)
		}
		if f.Name == "test.block" && f.Concurrency != 4 {
			t.Fatalf("test.block concurrency %d, want 4", f.Concurrency)
		}
	}
	if want := []string{"test.block", "test.fail", "test.ok"}; !slices.Equal(names, want) {
		t.Fatalf("functions %v, want %v", names, want)
	}
}

func TestAPICrons(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	crons, err := scheduler.NewCrons(ctx, ts.JS, scheduler.CronConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crons.Register(ctx, scheduler.CronDef{Name: "nightly", Schedule: scheduler.Daily(3, 0), Call: idleFn.With(testArgs{N: 1})}); err != nil {
		t.Fatal(err)
	}
	e := setupOn(t, ts, dashboard.Config{Crons: crons})
	with := e.URL
	bare := httptest.NewServer(dashboard.New(e.P, dashboard.Config{}))
	t.Cleanup(bare.Close)
	var got struct {
		Crons []*scheduler.CronInfo `json:"crons"`
	}
	getJSON(t, "GET", with+"/api/crons", http.StatusOK, &got)
	if len(got.Crons) != 1 || got.Crons[0].Name != "nightly" || got.Crons[0].Function != "test.idle" || !got.Crons[0].Enabled {
		t.Fatalf("crons: %+v", got.Crons)
	}
	st, _, body := do(t, "GET", with+"/crons", nil)
	if st != http.StatusOK || !strings.Contains(string(body), "nightly") || !strings.Contains(string(body), "daily 03:00 (UTC)") {
		t.Fatalf("crons page: %d\n%s", st, body)
	}
	// Without Config.Crons there is no crons page.
	apiError(t, "GET", bare.URL+"/api/crons", http.StatusNotFound)
	if st, _, _ := do(t, "GET", bare.URL+"/crons", nil); st != http.StatusNotFound {
		t.Fatalf("crons page without crons: %d", st)
	}
}
