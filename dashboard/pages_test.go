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
	paged := page(t, e.URL+"/?limit=2", http.StatusOK)
	if !strings.Contains(paged, `href="?after=p1&amp;limit=2"`) || strings.Contains(paged, `data-id="s1"`) {
		t.Fatalf("limit=2 has no link to the next page, or too many rows:\n%s", paged)
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
	done := page(t, e.URL+"/runs/s1", http.StatusOK)
	if !strings.Contains(done, `action="/api/runs/s1/cancel" hidden>`) || !strings.Contains(done, "&#34;doubled&#34;: 2") {
		t.Fatalf("ended run page: cancel form not hidden or result missing:\n%s", done)
	}
	failed := page(t, e.URL+"/runs/f1", http.StatusOK)
	if strings.Contains(failed, "<script>window.pwned") || !strings.Contains(failed, "&lt;script&gt;") {
		t.Fatalf("failed run page: error not escaped:\n%s", failed)
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
