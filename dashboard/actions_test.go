package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/scheduler"
)

type rerunResult struct {
	Run     *jetflow.Run `json:"run"`
	RetryOf string       `json:"retryOf"`
}

type rerunsList struct {
	RetryOf string         `json:"retryOf"`
	Reruns  []*jetflow.Run `json:"reruns"`
}

func TestAPIRerun(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	e.startWorker(t)
	e.enqueue(t, failFn.With(testArgs{N: 5, Note: "again"}), "f1")
	e.enqueue(t, idleFn.With(testArgs{N: 6}), "c1")
	e.enqueue(t, idleFn.With(testArgs{N: 7}), "p1")
	e.waitState(t, "f1", jetflow.Failed)
	if err := e.P.Cancel(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}

	// A failed run is re-run: same function and args, linked to it.
	var res rerunResult
	getJSON(t, "POST", e.URL+"/api/runs/f1/rerun", http.StatusCreated, &res)
	if res.RetryOf != "f1" || res.Run.ID != "f1-rerun-1" || res.Run.Parent != "f1" || res.Run.Name != "test.fail" || string(res.Run.Args) != `{"n":5,"note":"again"}` {
		t.Fatalf("re-run of f1: %+v %+v", res, res.Run)
	}
	e.waitState(t, "f1-rerun-1", jetflow.Failed)
	getJSON(t, "POST", e.URL+"/api/runs/f1/rerun", http.StatusCreated, &res)
	if res.Run.ID != "f1-rerun-2" {
		t.Fatalf("second re-run of f1: %s", res.Run.ID)
	}
	// Both ways: the run lists its re-runs, a re-run names what it retries.
	var rl rerunsList
	getJSON(t, "GET", e.URL+"/api/runs/f1/reruns", http.StatusOK, &rl)
	if rl.RetryOf != "" || !slices.Equal(ids(rl.Reruns), []string{"f1-rerun-1", "f1-rerun-2"}) {
		t.Fatalf("re-runs of f1: %+v %v", rl, ids(rl.Reruns))
	}
	rl = rerunsList{}
	getJSON(t, "GET", e.URL+"/api/runs/f1-rerun-1/reruns", http.StatusOK, &rl)
	if rl.RetryOf != "f1" || len(rl.Reruns) != 0 {
		t.Fatalf("f1-rerun-1: %+v", rl)
	}
	page := getPage(t, e.URL+"/runs/f1-rerun-1")
	if !strings.Contains(page, `<dd id="retry-of"><a href="/runs/f1">f1</a>`) {
		t.Fatalf("the re-run's page does not link the run it retries:\n%s", page)
	}
	page = getPage(t, e.URL+"/runs/f1")
	if !strings.Contains(page, `<span class="rerun" data-id="f1-rerun-1"><a href="/runs/f1-rerun-1">`) || !strings.Contains(page, `data-id="f1-rerun-2"`) {
		t.Fatalf("the run's page does not link its re-runs:\n%s", page)
	}

	// A canceled run too.
	res = rerunResult{}
	getJSON(t, "POST", e.URL+"/api/runs/c1/rerun", http.StatusCreated, &res)
	if res.Run.ID != "c1-rerun-1" || res.Run.State != jetflow.Pending || string(res.Run.Args) != `{"n":6}` {
		t.Fatalf("re-run of c1: %+v", res.Run)
	}
	// Not a pending (or successful) run; not an unknown one.
	if msg := apiError(t, "POST", e.URL+"/api/runs/p1/rerun", http.StatusConflict); !strings.Contains(msg, "pending") {
		t.Fatalf("re-run of a pending run: %q", msg)
	}
	apiError(t, "POST", e.URL+"/api/runs/nope/rerun", http.StatusNotFound)
	apiError(t, "GET", e.URL+"/api/runs/nope/reruns", http.StatusNotFound)
	st, hdr, _ := do(t, "GET", e.URL+"/api/runs/f1/rerun", nil)
	if st != http.StatusMethodNotAllowed || hdr.Get("Allow") != "POST" {
		t.Fatalf("GET rerun: %d Allow %q", st, hdr.Get("Allow"))
	}
	// Another site cannot re-run through a visitor's browser.
	st, _, body := do(t, "POST", e.URL+"/api/runs/f1/rerun", map[string]string{"Sec-Fetch-Site": "cross-site"})
	if st != http.StatusForbidden {
		t.Fatalf("cross-site re-run: %d %s", st, body)
	}
	// A form without the script goes to the new run.
	st, hdr, _ = do(t, "POST", e.URL+"/api/runs/c1/rerun", map[string]string{"Accept": "text/html", "Sec-Fetch-Site": "same-origin"})
	if st != http.StatusSeeOther || hdr.Get("Location") != "/runs/c1-rerun-2" {
		t.Fatalf("form re-run: %d %q", st, hdr.Get("Location"))
	}
	getJSON(t, "GET", e.URL+"/api/runs/f1/reruns", http.StatusOK, &rl)
	if len(rl.Reruns) != 2 {
		t.Fatalf("re-runs of f1 after the others: %v", ids(rl.Reruns))
	}
}

// getPage fetches an HTML page that must answer 200.
func getPage(t *testing.T, url string) string {
	t.Helper()
	st, _, body := do(t, "GET", url, nil)
	if st != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", url, st, body)
	}
	return string(body)
}

type cronResult struct {
	Cron *scheduler.CronInfo `json:"cron"`
	Run  *jetflow.Run        `json:"run"`
}

func TestAPICronActions(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	crons, err := scheduler.NewCrons(ctx, ts.JS, scheduler.CronConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crons.Register(ctx, scheduler.CronDef{Name: "nightly", Schedule: scheduler.Daily(3, 0), Call: idleFn.With(testArgs{N: 9})}); err != nil {
		t.Fatal(err)
	}
	e := setupOn(t, ts, dashboard.Config{Crons: crons})

	var res cronResult
	getJSON(t, "POST", e.URL+"/api/crons/nightly/pause", http.StatusOK, &res)
	if res.Cron.Enabled || !res.Cron.Next.IsZero() {
		t.Fatalf("paused: %+v", res.Cron)
	}
	if c, err := crons.Get(ctx, "nightly"); err != nil || c.Enabled {
		t.Fatalf("cron after pause: %+v %v", c, err)
	}
	res = cronResult{}
	getJSON(t, "POST", e.URL+"/api/crons/nightly/resume", http.StatusOK, &res)
	if !res.Cron.Enabled || res.Cron.Next.IsZero() {
		t.Fatalf("resumed: %+v", res.Cron)
	}
	// Trigger now: the cron's call, now, under a derived id.
	res = cronResult{}
	getJSON(t, "POST", e.URL+"/api/crons/nightly/trigger", http.StatusOK, &res)
	if res.Run == nil || !strings.HasPrefix(res.Run.ID, "trigger-nightly-") || res.Run.Name != "test.idle" || string(res.Run.Args) != `{"n":9}` || time.Until(res.Run.ScheduledTime) > time.Second {
		t.Fatalf("triggered: %+v", res.Run)
	}
	if r := e.waitState(t, res.Run.ID, jetflow.Pending); r.Name != "test.idle" {
		t.Fatalf("triggered run: %+v", r)
	}
	apiError(t, "POST", e.URL+"/api/crons/nobody/pause", http.StatusNotFound)
	apiError(t, "POST", e.URL+"/api/crons/nobody/trigger", http.StatusNotFound)
	st, _, body := do(t, "POST", e.URL+"/api/crons/nightly/pause", map[string]string{"Sec-Fetch-Site": "cross-site"})
	if st != http.StatusForbidden {
		t.Fatalf("cross-site pause: %d %s", st, body)
	}
	if c, _ := crons.Get(ctx, "nightly"); !c.Enabled {
		t.Fatal("a cross-site POST paused the cron")
	}
	page := getPage(t, e.URL+"/crons")
	for _, want := range []string{`action="/api/crons/nightly/pause"`, `action="/api/crons/nightly/trigger"`} {
		if !strings.Contains(page, want) {
			t.Fatalf("crons page lacks %s:\n%s", want, page)
		}
	}

	// A dashboard that can only list crons (CronsOf) triggers them but
	// says it cannot pause them.
	ro := httptest.NewServer(dashboard.New(e.P, dashboard.Config{Crons: dashboard.CronsOf(e.P)}))
	t.Cleanup(ro.Close)
	if msg := apiError(t, "POST", ro.URL+"/api/crons/nightly/pause", http.StatusNotImplemented); !strings.Contains(msg, "scheduler.Crons") {
		t.Fatalf("pause without a controller: %q", msg)
	}
	res = cronResult{}
	getJSON(t, "POST", ro.URL+"/api/crons/nightly/trigger", http.StatusOK, &res)
	if res.Run == nil || res.Run.Name != "test.idle" {
		t.Fatalf("trigger through CronsOf: %+v", res)
	}
	page = getPage(t, ro.URL+"/crons")
	if strings.Contains(page, `/pause"`) || !strings.Contains(page, `id="crons-readonly"`) {
		t.Fatalf("read-only crons page:\n%s", page)
	}
}

// TestAPICreatedOrder: newest first is by creation time, not by scheduled
// time: a run scheduled an hour out but created first comes last, and
// pages follow that order both ways.
func TestAPICreatedOrder(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	ctx := context.Background()
	late, err := e.P.RunAfter(ctx, time.Hour, idleFn.With(testArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	n1 := e.enqueue(t, idleFn.With(testArgs{N: 2}), "")
	n2 := e.enqueue(t, idleFn.With(testArgs{N: 3}), "n2")
	var all listPage
	getJSON(t, "GET", e.URL+"/api/runs?sort=created", http.StatusOK, &all)
	if got, want := ids(all.Runs), []string{n2, n1, late}; !slices.Equal(got, want) {
		t.Fatalf("created order %v, want %v", got, want)
	}
	all = listPage{}
	getJSON(t, "GET", e.URL+"/api/runs?sort=scheduled", http.StatusOK, &all)
	// n1 and n2 are both due "now", a few microseconds apart, and n1's
	// scheduled time is read from its queued message (it has no record):
	// only the run due in an hour must come first.
	if got := ids(all.Runs); len(got) != 3 || got[0] != late || !slices.Contains(got, n1) || !slices.Contains(got, n2) {
		t.Fatalf("scheduled order %v, want %s first, then %s and %s", got, late, n2, n1)
	}
	var seen []string
	var p listPage
	getJSON(t, "GET", e.URL+"/api/runs?sort=created&limit=1", http.StatusOK, &p)
	for p.Next != "" {
		seen = append(seen, ids(p.Runs)...)
		next := p.Next
		p = listPage{}
		getJSON(t, "GET", e.URL+"/api/runs?sort=created&limit=1&after="+next, http.StatusOK, &p)
	}
	seen = append(seen, ids(p.Runs)...)
	if !slices.Equal(seen, []string{n2, n1, late}) {
		t.Fatalf("pages of 1: %v", seen)
	}
	prev := p.Prev
	p = listPage{}
	getJSON(t, "GET", e.URL+"/api/runs?sort=created&limit=1&before="+prev, http.StatusOK, &p)
	if !slices.Equal(ids(p.Runs), []string{n1}) || p.Prev == "" || p.Next == "" {
		t.Fatalf("back one page: %v prev %q next %q", ids(p.Runs), p.Prev, p.Next)
	}
}

// A function paused from the dashboard is paused on every worker (its runs
// wait), the functions page says so and offers Resume; resume undoes it.
func TestAPIFunctionPauseResume(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	e.startWorker(t)
	ctx := context.Background()
	var res struct {
		Function string `json:"function"`
		Paused   bool   `json:"paused"`
	}
	getJSON(t, "POST", e.URL+"/api/functions/test.ok/pause", http.StatusOK, &res)
	if res.Function != "test.ok" || !res.Paused {
		t.Fatalf("pause answered %+v", res)
	}
	testserver.Eventually(t, 10*time.Second, "worker paused test.ok", func() bool { return e.W.Paused("test.ok") })
	testserver.Eventually(t, 20*time.Second, "functions page shows it paused", func() bool {
		_, _, body := do(t, "GET", e.URL+"/functions", nil)
		return strings.Contains(string(body), "/api/functions/test.ok/resume")
	})
	getJSON(t, "POST", e.URL+"/api/functions/test.ok/resume", http.StatusOK, &res)
	if res.Paused {
		t.Fatalf("resume answered %+v", res)
	}
	testserver.Eventually(t, 10*time.Second, "worker resumed test.ok", func() bool { return !e.W.Paused("test.ok") })
	paused, err := e.P.PausedFunctions(ctx)
	if err != nil || paused["test.ok"] {
		t.Fatalf("paused functions after resume: %v %v", paused, err)
	}
	// A cross-site POST is refused, as for every action.
	if code, _, _ := do(t, "POST", e.URL+"/api/functions/test.ok/pause", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Fatalf("cross-site pause: %d, want 403", code)
	}
}
