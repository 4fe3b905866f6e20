package dashboard_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/scheduler"
)

// rowIDs lists the ids of the runs table's rows, top to bottom.
const rowIDs = `[...document.querySelectorAll('#runs-body tr[data-id]')].map(r => r.dataset.id).join(',')`

// TestBrowserActions clicks through the dashboard in headless Chromium:
// runs newest first, next and previous pages, a new run appearing on top,
// times shown relative with the UTC time in the tooltip, re-run of a
// failed run and the link back, and pause, resume and trigger of a cron.
// Screenshots are written to a temporary directory (their paths logged).
func TestBrowserActions(t *testing.T) {
	t.Parallel()
	chromiumPath(t)
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
	e.startWorker(t)
	for _, id := range []string{"r1", "r2", "r3", "r4", "r5"} {
		e.enqueue(t, idleFn.With(testArgs{N: 1}), id)
	}
	e.enqueue(t, failFn.With(testArgs{N: 2, Note: "retry me"}), "f1")
	e.waitState(t, "f1", jetflow.Failed)

	b := startBrowser(t)
	shots := t.TempDir()
	shot := func(name string) {
		t.Helper()
		path := filepath.Join(shots, name)
		checkScreenshot(t, b, path)
		t.Logf("screenshot: %s", path)
	}
	var got string
	expectRows := func(want string) {
		t.Helper()
		b.waitFor("rows "+want, rowIDs+` === `+jsString(want))
	}
	// waitPage waits for a page whose URL contains part to be live.
	waitPage := func(part string) {
		t.Helper()
		b.waitFor("the page "+part, `location.href.includes(`+jsString(part)+`) && document.readyState === 'complete' && document.querySelector('main').dataset.live === 'ready'`)
	}

	// Newest first, three a page.
	b.navigate(e.URL + "/?limit=3")
	expectRows("f1,r5,r4")
	expectTrue(t, b, "first page: a next link, no previous one", `!document.getElementById('prev-page') && !!document.getElementById('next-page')`)
	// Times: relative, with the exact UTC time in the tooltip.
	var tm struct{ Text, Title string }
	if err := b.eval(`(() => { const t = document.querySelector('tr[data-id="f1"] .created time'); return {text: t.textContent, title: t.title}; })()`, &tm); err != nil {
		t.Fatal(err)
	}
	relative := strings.HasSuffix(tm.Text, " ago") || tm.Text == "just now"
	if !relative || !strings.HasSuffix(tm.Title, " UTC") || !strings.Contains(tm.Title, " local\n") {
		t.Fatalf("created time shown %q, tooltip %q", tm.Text, tm.Title)
	}
	// The failed run's queue wait and duration are shown.
	if err := b.eval(`document.querySelector('tr[data-id="f1"] .wait').textContent + '|' + document.querySelector('tr[data-id="f1"] .duration').textContent`, &got); err != nil || !strings.HasSuffix(strings.Split(got, "|")[0], "s") || !strings.HasSuffix(got, "s") {
		t.Fatalf("f1 queue wait|duration %q (%v)", got, err)
	}
	shot("runs-first-page.png")

	click(t, b, "#next-page")
	waitPage("after=")
	expectRows("r3,r2,r1")
	shot("runs-second-page.png")
	expectTrue(t, b, "last page: a previous link, no next one", `!!document.getElementById('prev-page') && !document.getElementById('next-page')`)
	click(t, b, "#prev-page")
	waitPage("before=")
	expectRows("f1,r5,r4")

	// A new run shows up on top of the first page without a reload.
	b.navigate(e.URL + "/?limit=3")
	if err := b.eval(`window.jetflowMarker = 7`, nil); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, idleFn.With(testArgs{N: 3}), "n1")
	b.waitFor("n1 on top", rowIDs+` === 'n1,f1,r5' && window.jetflowMarker === 7 && document.querySelector('[data-count="total"]').textContent === '7'`)

	// Re-run the failed run; the new run links back to it.
	b.navigate(e.URL + "/runs/f1")
	expectTrue(t, b, "failed run page: no progress bar, no cancel, re-run shown, attempt listed",
		`document.getElementById('progress').hidden && document.getElementById('cancel-form').hidden && !document.getElementById('rerun-form').hidden && document.querySelector('#attempts tr[data-attempt="1"]') !== null`)
	click(t, b, "#rerun-btn")
	b.waitFor("the link to the re-run", `!!document.getElementById('rerun-link') && document.querySelector('#reruns [data-id="f1-rerun-1"]') !== null`)
	shot("run-rerun.png")
	click(t, b, "#rerun-link")
	waitPage("/runs/f1-rerun-1")
	b.waitFor("the retry-of link and the re-run's failure", `document.querySelector('#retry-of a').getAttribute('href') === '/runs/f1' && document.getElementById('run-state').textContent === 'failed'`)
	if r := e.waitState(t, "f1-rerun-1", jetflow.Failed); r.Parent != "f1" || string(r.Args) != `{"n":2,"note":"retry me"}` {
		t.Fatalf("re-run: %+v", r)
	}

	// Crons: pause, resume, trigger now.
	b.navigate(e.URL + "/crons")
	shot("crons.png")
	click(t, b, `tr[data-cron="nightly"] form[data-action="pause"] button`)
	b.waitFor("the cron paused", `document.querySelector('tr[data-cron="nightly"]').dataset.enabled === 'false' && !!document.querySelector('tr[data-cron="nightly"] form[data-action="resume"]')`)
	if c, err := crons.Get(ctx, "nightly"); err != nil || c.Enabled {
		t.Fatalf("cron after Pause: %+v %v", c, err)
	}
	shot("crons-paused.png")
	click(t, b, `tr[data-cron="nightly"] form[data-action="resume"] button`)
	b.waitFor("the cron resumed", `document.querySelector('tr[data-cron="nightly"]').dataset.enabled === 'true'`)
	if c, err := crons.Get(ctx, "nightly"); err != nil || !c.Enabled {
		t.Fatalf("cron after Resume: %+v %v", c, err)
	}
	click(t, b, `tr[data-cron="nightly"] form[data-action="trigger"] button`)
	b.waitFor("the triggered run's link", `!!document.getElementById('triggered-link')`)
	if err := b.eval(`document.getElementById('triggered-link').textContent`, &got); err != nil || !strings.HasPrefix(got, "trigger-nightly-") {
		t.Fatalf("triggered run %q (%v)", got, err)
	}
	if r := e.waitState(t, got, jetflow.Pending); r.Name != "test.idle" || string(r.Args) != `{"n":9}` {
		t.Fatalf("triggered run: %+v", r)
	}
}

// expectTrue fails the test unless the JavaScript expression is true now.
func expectTrue(t *testing.T, b *browser, what, expr string) {
	t.Helper()
	var ok bool
	if err := b.eval(expr, &ok); err != nil || !ok {
		t.Fatalf("%s: %v (%v)", what, ok, err)
	}
}
