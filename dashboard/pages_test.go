package dashboard_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
)

// page fetches an HTML page and checks its status and type.
func page(t *testing.T, url string, want int) string {
	t.Helper()
	st, hdr, body := do(t, "GET", url, nil)
	if st != want {
		t.Fatalf("GET %s: status %d, want %d:\n%s", url, st, want, body)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("GET %s: Content-Type %q", url, ct)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Fatalf("GET %s: Content-Security-Policy %q", url, csp)
	}
	return string(body)
}

// countOf reads the state count shown above the runs table.
func countOf(t *testing.T, html, key string) string {
	t.Helper()
	m := regexp.MustCompile(`data-count="` + key + `">(\d+)<`).FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no count for %s in the page", key)
	}
	return m[1]
}

func TestPages(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	e.startWorker(t)
	e.enqueue(t, idleFn.With(testArgs{N: 7, Note: "<b>bold</b>"}), "p1")
	e.enqueue(t, okFn.With(testArgs{N: 1}), "s1")
	e.enqueue(t, failFn.With(testArgs{}), "f1")
	e.waitState(t, "s1", jetflow.Success)
	e.waitState(t, "f1", jetflow.Failed)

	index := page(t, e.URL+"/", http.StatusOK)
	for _, id := range []string{"p1", "s1", "f1"} {
		if !strings.Contains(index, `<tr data-id="`+id+`"`) {
			t.Fatalf("index has no row for %s:\n%s", id, index)
		}
	}
	for key, want := range map[string]string{"total": "3", "pending": "1", "success": "1", "failed": "1", "canceled": "0", "inProgress": "0"} {
		if got := countOf(t, index, key); got != want {
			t.Fatalf("count %s = %s, want %s", key, got, want)
		}
	}
	// Run data is text, never markup.
	if strings.Contains(index, "<script>window.pwned") || strings.Contains(index, "<img src=x") {
		t.Fatalf("the failed run's error reached the page unescaped:\n%s", index)
	}
	if !strings.Contains(index, "boom &lt;script&gt;window.pwned=1&lt;/script&gt;") {
		t.Fatalf("the failed run's error is not shown escaped:\n%s", index)
	}

	filtered := page(t, e.URL+"/?state=failed", http.StatusOK)
	if !strings.Contains(filtered, `data-id="f1"`) || strings.Contains(filtered, `data-id="p1"`) {
		t.Fatalf("state=failed shows the wrong rows:\n%s", filtered)
	}
	// Newest first (by creation: s1 and f1 end in either order), a page
	// at a time, with links both ways.
	paged := page(t, e.URL+"/?sort=created&limit=2", http.StatusOK)
	next := regexp.MustCompile(`<a id="next-page" href="\?(after=[^"]+)">`).FindStringSubmatch(paged)
	if next == nil || strings.Contains(paged, `data-id="p1"`) || strings.Index(paged, `data-id="f1"`) > strings.Index(paged, `data-id="s1"`) || strings.Contains(paged, `id="prev-page"`) {
		t.Fatalf("limit=2: want f1 then s1, a link to the next page and none to a previous one:\n%s", paged)
	}
	second := page(t, e.URL+"/?"+strings.ReplaceAll(next[1], "&amp;", "&"), http.StatusOK)
	if !strings.Contains(second, `data-id="p1"`) || strings.Contains(second, `data-id="s1"`) || !strings.Contains(second, `id="prev-page"`) || !strings.Contains(second, `id="first-page"`) || strings.Contains(second, `id="next-page"`) {
		t.Fatalf("second page: want p1 alone, links to the previous and first pages:\n%s", second)
	}
	// Times carry the exact UTC time in their tooltip; a run that has not
	// reported progress has no progress bar.
	if !regexp.MustCompile(`<time datetime="[^"]+" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC">`).MatchString(index) {
		t.Fatalf("no time element with its UTC time in the title:\n%s", index)
	}

	run := page(t, e.URL+"/runs/p1", http.StatusOK)
	for _, want := range []string{
		`data-run="p1"`,
		"&#34;n&#34;: 7", // indented args
		"&lt;b&gt;bold&lt;/b&gt;",
		`<form id="cancel-form" method="post" action="/api/runs/p1/cancel">`,
	} {
		if !strings.Contains(run, want) {
			t.Fatalf("run page lacks %q:\n%s", want, run)
		}
	}
	if strings.Contains(run, "<b>bold</b>") {
		t.Fatal("args reached the run page unescaped")
	}
	if !strings.Contains(run, `<section id="progress" class="progress" hidden>`) {
		t.Fatalf("a run without progress shows a progress bar:\n%s", run)
	}
	done := page(t, e.URL+"/runs/s1", http.StatusOK)
	if !strings.Contains(done, `action="/api/runs/s1/cancel" hidden>`) || !strings.Contains(done, "&#34;doubled&#34;: 2") {
		t.Fatalf("ended run page: cancel form not hidden or result missing:\n%s", done)
	}
	failed := page(t, e.URL+"/runs/f1", http.StatusOK)
	if strings.Contains(failed, "<script>window.pwned") || !strings.Contains(failed, "&lt;script&gt;") {
		t.Fatalf("failed run page: error not escaped:\n%s", failed)
	}
	// A failed run can be re-run; its attempt is listed with its worker.
	if !strings.Contains(failed, `<form id="rerun-form" method="post" action="/api/runs/f1/rerun">`) || strings.Contains(done, `action="/api/runs/s1/rerun">`) {
		t.Fatalf("re-run form: want it on the failed run only:\n%s", failed)
	}
	if !regexp.MustCompile(`<tr data-attempt="1">\s*<td class="num">1`).MatchString(failed) {
		t.Fatalf("failed run page: no attempt row:\n%s", failed)
	}
	// The favicon.
	st, hdr, icon := do(t, "GET", e.URL+"/favicon.ico", nil)
	if st != http.StatusOK || hdr.Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(string(icon), "<svg") {
		t.Fatalf("favicon: %d %q %s", st, hdr.Get("Content-Type"), icon)
	}
	if !strings.Contains(index, `<link rel="icon" href="/favicon.ico"`) {
		t.Fatal("the pages do not link the favicon")
	}

	fns := page(t, e.URL+"/functions", http.StatusOK)
	for _, fn := range []string{"test.ok", "test.fail", "test.block"} {
		if !strings.Contains(fns, ">"+fn+"</a>") {
			t.Fatalf("functions page lacks %s:\n%s", fn, fns)
		}
	}
	if strings.Contains(index, `href="/crons"`) {
		t.Fatal("the nav links to crons on a dashboard without them")
	}

	page(t, e.URL+"/runs/nope", http.StatusNotFound)
	page(t, e.URL+"/runs/a.b", http.StatusBadRequest)
	page(t, e.URL+"/?state=bogus", http.StatusBadRequest)
	page(t, e.URL+"/nowhere", http.StatusNotFound)

	st, hdr, js := do(t, "GET", e.URL+"/assets/app.js", nil)
	if st != http.StatusOK || !strings.Contains(hdr.Get("Content-Type"), "javascript") || !strings.Contains(string(js), "EventSource") {
		t.Fatalf("app.js: %d %q", st, hdr.Get("Content-Type"))
	}
	if strings.Contains(string(js), "innerHTML") {
		t.Fatal("app.js uses innerHTML; run data must go through textContent")
	}
}

func TestBasePath(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{BasePath: "/jetflow/"})
	e.enqueue(t, idleFn.With(testArgs{}), "p1")
	index := page(t, e.URL+"/jetflow/", http.StatusOK)
	for _, want := range []string{`href="/jetflow/runs/p1"`, `src="/jetflow/assets/app.js"`, `data-base="/jetflow"`, `action="/jetflow/"`} {
		if !strings.Contains(index, want) {
			t.Fatalf("index under /jetflow lacks %q:\n%s", want, index)
		}
	}
	st, hdr, _ := do(t, "GET", e.URL+"/jetflow", nil)
	if st != http.StatusMovedPermanently || hdr.Get("Location") != "/jetflow/" {
		t.Fatalf("GET /jetflow: %d %q", st, hdr.Get("Location"))
	}
	var r jetflow.Run
	getJSON(t, "GET", e.URL+"/jetflow/api/runs/p1", http.StatusOK, &r)
	if r.ID != "p1" {
		t.Fatalf("run %+v", r)
	}
	page(t, e.URL+"/jetflow/runs/p1", http.StatusOK)
	if st, _, _ := do(t, "GET", e.URL+"/api/runs/p1", nil); st != http.StatusNotFound {
		t.Fatalf("outside the base path: status %d, want 404", st)
	}
	st, hdr, _ = do(t, "POST", e.URL+"/jetflow/api/runs/p1/cancel", map[string]string{"Accept": "text/html"})
	if st != http.StatusSeeOther || hdr.Get("Location") != "/jetflow/runs/p1" {
		t.Fatalf("form cancel under /jetflow: %d %q", st, hdr.Get("Location"))
	}
}
