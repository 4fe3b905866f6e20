package dashboard_test

import (
	"bytes"
	"cmp"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
)

// TestBrowser loads the dashboard in headless Chromium and checks what a
// person sees: the runs and their counts, live changes without a reload,
// a run's page with its progress, and its Cancel button.
// Set JETFLOW_DASHBOARD_SCREENSHOTS to a directory to keep the screenshots.
func TestBrowser(t *testing.T) {
	t.Parallel()
	chromiumPath(t) // fails at once, saying what to install, when it is missing
	e := setup(t, dashboard.Config{})
	e.startWorker(t)
	e.enqueue(t, idleFn.With(testArgs{N: 1}), "p1")
	e.enqueue(t, okFn.With(testArgs{N: 2}), "s1")
	e.enqueue(t, failFn.With(testArgs{}), "f1")
	e.enqueue(t, blockFn.With(testArgs{}), "r1")
	e.enqueue(t, idleFn.With(testArgs{N: 3}), "c1")
	if err := e.P.Cancel(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, "s1", jetflow.Success)
	e.waitState(t, "f1", jetflow.Failed)
	e.waitState(t, "r1", jetflow.InProgress)

	b := startBrowser(t)
	shots := t.TempDir()
	t.Logf("screenshots in %s", shots)

	// The runs page: one row per run, with its state, and the counts.
	b.navigate(e.URL + "/")
	html := b.dom()
	for id, st := range map[string]string{"p1": "pending", "s1": "success", "f1": "failed", "r1": "inProgress", "c1": "canceled"} {
		if !strings.Contains(html, `<tr data-id="`+id+`" data-state="`+st+`"`) {
			t.Fatalf("no %s row for %s in the rendered page:\n%s", st, id, html)
		}
	}
	counts := `Object.fromEntries([...document.querySelectorAll('[data-count]')].map(e => [e.dataset.count, e.textContent]))`
	var got map[string]string
	if err := b.eval(counts, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"total": "5", "pending": "1", "inProgress": "1", "success": "1", "failed": "1", "canceled": "1"}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("state counts on the page %v, want %v", got, want)
		}
	}
	var live, errText string
	var pwned bool
	if err := b.eval(`document.getElementById('live').textContent`, &live); err != nil || live != "live" {
		t.Fatalf("live indicator %q (%v), want live", live, err)
	}
	// The failed run's error is markup; it must be shown as text and never run.
	if err := b.eval(`document.querySelector('tr[data-id="f1"] .err').textContent`, &errText); err != nil || !strings.HasPrefix(errText, "boom <script>") {
		t.Fatalf("error cell %q (%v)", errText, err)
	}
	if err := b.eval(`window.pwned !== undefined || document.querySelector('tr[data-id="f1"] .err script, tr[data-id="f1"] .err img') !== null`, &pwned); err != nil || pwned {
		t.Fatalf("the failed run's error became markup (%v)", err)
	}

	// Changes show up without a reload: a marker on window survives.
	if err := b.eval(`window.jetflowMarker = 42`, nil); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, idleFn.With(testArgs{N: 4}), "p2")
	if err := e.P.Cancel(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the new run, the canceled one and the counts to show", `(() => {
		const row = id => document.querySelector('tr[data-id="' + id + '"]');
		const count = k => document.querySelector('[data-count="' + k + '"]').textContent;
		return !!row('p2') && row('p2').dataset.state === 'pending'
			&& row('p1').dataset.state === 'canceled'
			&& row('p1').querySelector('.state').textContent === 'canceled'
			&& count('total') === '6' && count('pending') === '1' && count('canceled') === '2'
			&& window.jetflowMarker === 42;
	})()`)
	var order []string
	if err := b.eval(`[...document.querySelectorAll('#runs-body tr[data-id]')].map(r => r.dataset.id)`, &order); err != nil {
		t.Fatal(err)
	}
	// Newest activity first (by each record's last write: p1's cancel is
	// the last; s1 and f1 end in either order).
	wantOrder := []string{"p1", "p2", "c1", "r1", "f1", "s1"}
	slices.SortFunc(wantOrder, func(a, b string) int {
		ra, erra := e.P.Get(context.Background(), a)
		rb, errb := e.P.Get(context.Background(), b)
		if erra != nil || errb != nil {
			t.Fatalf("get %s, %s: %v %v", a, b, erra, errb)
		}
		return cmp.Compare(rb.Revision, ra.Revision)
	})
	if !slices.Equal(order, wantOrder) || order[0] != "p1" {
		t.Fatalf("rows in order %v, want newest activity first %v", order, wantOrder)
	}
	checkScreenshot(t, b, filepath.Join(shots, "runs.png"))

	// A run's page: progress, then Cancel from the button.
	b.navigate(e.URL + "/runs/r1")
	var prog struct {
		Value  float64 `json:"value"`
		Text   string  `json:"text"`
		Hidden bool    `json:"hidden"`
		State  string  `json:"state"`
		Cancel bool    `json:"cancel"`
		Args   string  `json:"args"`
	}
	if err := b.eval(`({value: document.getElementById('progress-bar').value,
		text: document.getElementById('progress-text').textContent,
		hidden: document.getElementById('progress').hidden,
		state: document.getElementById('run-state').textContent,
		cancel: !document.getElementById('cancel-form').hidden,
		args: document.getElementById('args').textContent})`, &prog); err != nil {
		t.Fatal(err)
	}
	if prog.Value != 40 || prog.Text != "40% · 4 / 10 · halfway" || prog.Hidden || prog.State != "inProgress" || !prog.Cancel || prog.Args != `{
  "n": 0
}` {
		t.Fatalf("run page: %+v", prog)
	}
	checkScreenshot(t, b, filepath.Join(shots, "run.png"))
	// Cancel asks first; "Keep it" keeps it, "Yes" cancels.
	click(t, b, "#cancel-btn")
	b.waitFor("the cancel confirmation", `!document.getElementById('cancel-confirm').hidden && document.getElementById('cancel-btn').hidden`)
	checkScreenshot(t, b, filepath.Join(shots, "run-cancel-confirm.png"))
	click(t, b, "#cancel-no")
	b.waitFor("the confirmation to close", `document.getElementById('cancel-confirm').hidden && !document.getElementById('cancel-btn').hidden`)
	if r, err := e.P.Get(context.Background(), "r1"); err != nil || r.State != jetflow.InProgress {
		t.Fatalf("run r1 after Keep it: %v %v", r, err)
	}
	click(t, b, "#cancel-btn")
	click(t, b, "#cancel-yes")
	b.waitFor("the run page to show the run canceled", `document.getElementById('run-state').textContent === 'canceled'
		&& document.getElementById('cancel-form').hidden
		&& document.getElementById('cancel-msg').textContent === 'canceled'
		&& document.querySelector('[data-field="completedTime"]').textContent !== ''`)
	if r := e.waitState(t, "r1", jetflow.Canceled); r.Error == "" {
		t.Fatalf("canceled run: %+v", r)
	}
}

// click clicks the element selector names.
func click(t *testing.T, b *browser, selector string) {
	t.Helper()
	b.waitFor(selector+" to be there", `!!document.querySelector(`+jsString(selector)+`)`)
	if err := b.eval(`document.querySelector(`+jsString(selector)+`).click()`, nil); err != nil {
		t.Fatal(err)
	}
}

// checkScreenshot takes a screenshot, checks it is a 1280x900 PNG that is
// not blank, and keeps a copy in $JETFLOW_DASHBOARD_SCREENSHOTS if set.
func checkScreenshot(t *testing.T, b *browser, path string) {
	t.Helper()
	data := b.screenshot(path)
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	if sz := img.Bounds().Size(); sz.X != 1280 || sz.Y != 900 {
		t.Fatalf("screenshot %s is %v, want 1280x900", path, sz)
	}
	colors := map[uint32]bool{}
	for y := 0; y < 900 && len(colors) < 8; y += 7 {
		for x := 0; x < 1280; x += 7 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colors[r>>12<<8|g>>12<<4|bl>>12] = true
		}
	}
	if len(colors) < 8 {
		t.Fatalf("screenshot %s looks blank (%d colors)", path, len(colors))
	}
	if dir := os.Getenv("JETFLOW_DASHBOARD_SCREENSHOTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(path)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
