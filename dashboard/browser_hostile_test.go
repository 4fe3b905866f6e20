package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
)

// hostile is markup, a script end tag and a right-to-left override: data
// that must reach the page as text and never run.
const hostile = `<img src=x onerror="window.pwned=1"></script><script>window.pwned=2</script>` + "\u202e"

// TestBrowserBadRecords writes records by hand with a plain NATS client,
// as an operator or another program can: run records that are not JSON or
// name no state, a run, a cron and a trigger full of markup, a cron whose
// schedule does not validate, trigger definitions that cannot be read.
// Every page renders in headless Chromium, in every sort order, with the
// bad records shown as such, no script run, no error in the console, and
// the buttons on them refused with the reason.
func TestBrowserBadRecords(t *testing.T) {
	t.Parallel()
	chromiumPath(t)
	ts := testserver.Start(t)
	ctx := context.Background()
	crons, err := scheduler.NewCrons(ctx, ts.JS, scheduler.CronConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crons.Register(ctx, scheduler.CronDef{Name: "nightly", Schedule: scheduler.Daily(3, 0), Call: idleFn.With(testArgs{Note: hostile})}); err != nil {
		t.Fatal(err)
	}
	e := setupOn(t, ts, dashboard.Config{Crons: crons})
	e.startWorker(t)
	e.enqueue(t, idleFn.With(testArgs{N: 1, Note: hostile + strings.Repeat("A", 20000)}), "good1")
	e.enqueue(t, failFn.With(testArgs{}), "f1")
	e.waitState(t, "f1", jetflow.Failed)

	cfg := streams.Config{}.WithDefaults()
	put := func(bucket, key, val string) {
		t.Helper()
		b, err := ts.JS.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("%s: %v", bucket, err)
		}
		if _, err := b.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
	}
	put(cfg.RunsBucket(), "badjson", `{not json`)
	put(cfg.RunsBucket(), "badstate", `{"id":"badstate","state":"<img src=x onerror=window.pwned=3>"}`)
	put(cfg.RunsBucket(), "evil", fmt.Sprintf(`{"id":"evil","name":%[1]q,"state":"failed","error":%[1]q,"kind":%[1]q,
		"parent":"javascript:alert(1)","children":["javascript-x"],"pool":%[1]q,"heldBy":"x",
		"progress":{"percent":10,"message":%[1]q},"attempts":2,
		"history":[{"attempt":1,"worker":%[1]q,"outcome":%[1]q,"error":%[1]q}],
		"onComplete":{"function":%[1]q,"args":{"a":%[1]q}},"trace":{"k":%[1]q},"args":{"a":%[1]q},"result":%[1]q}`, hostile))
	put(cfg.CronsBucket(), "def.garbage", `not json`)
	put(cfg.CronsBucket(), "def.evil", fmt.Sprintf(`{"name":%[1]q,"origin":%[1]q,"spec":{"kind":%[1]q,"expr":%[1]q},"function":"javascript:alert(1)","enabled":true}`, hostile))
	put(cfg.CronsBucket(), "def.badsched", `{"name":"badsched","origin":"runtime","spec":{"kind":"cron","expr":"99 99 * * *"},"function":"test.idle","enabled":false}`)
	put(cfg.FunctionsBucket(), "=trigger.badtrig", `garbage`)
	put(cfg.FunctionsBucket(), "=trigger.other", `{"name":"someone-else"}`)
	put(cfg.FunctionsBucket(), "=trigger.evil", fmt.Sprintf(`{"name":"evil","function":%[1]q,"stream":%[1]q,"subjects":[%[1]q],"origin":%[1]q,"window":1}`, hostile))

	b := startBrowser(t)
	// load opens a page, which must answer 200 and show nothing the
	// console complains of.
	load := func(path string) {
		t.Helper()
		if st, _, body := do(t, http.MethodGet, e.URL+path, nil); st != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, st, body)
		}
		b.call(b.session, "Page.navigate", map[string]any{"url": e.URL + path}, nil)
		b.waitFor(path+" to load", `document.readyState === 'complete' && location.href === `+jsString(e.URL+path)+
			` && (!document.querySelector('main[id="runs-page"], main[id="run-page"]') || document.querySelector('main').dataset.live === 'ready')`)
		expectTrue(t, b, path+": no script of the data ran, no element of it", `window.pwned === undefined && document.querySelectorAll('main img, main script').length === 0`)
		if p := b.takeProblems(); len(p) > 0 {
			t.Fatalf("%s: the page reported %q", path, p)
		}
	}
	// Every order lists the unreadable records as rows saying so.
	for _, q := range []string{"", "?sort=id", "?sort=id&order=desc", "?sort=scheduled", "?sort=state&order=asc", "?sort=created"} {
		load("/" + q)
		b.waitFor("the unreadable rows in /"+q, `(() => {
			const err = id => { const r = document.querySelector('tr[data-id="' + id + '"] .err'); return r ? r.title : ''; };
			return err('badjson').startsWith('jetflow: unreadable run record') && err('badstate').includes('<img src=x onerror=window.pwned=3>')
				&& !!document.querySelector('tr[data-id="good1"]') && !!document.querySelector('tr[data-id="f1"]');
		})()`)
	}
	load("/?state=failed")
	load("/?function=test.idle")

	// A run of markup: shown as text, its links stay on the dashboard.
	load("/runs/evil")
	var text string
	if err := b.eval(`document.querySelector('[data-field="error"]').textContent + '|' + document.getElementById('progress-text').textContent`, &text); err != nil || text != hostile+"|10% · "+hostile {
		t.Fatalf("the run's error and progress shown %q (%v)", text, err)
	}
	expectTrue(t, b, "every link of the run page is a path of the dashboard", `[...document.querySelectorAll('a')].every(a => a.getAttribute('href').startsWith('/'))`)
	click(t, b, "#rerun-btn")
	b.waitFor("re-run refused", `document.getElementById('cancel-msg').textContent.startsWith('re-run failed: jetflow: invalid function name')`)
	if err := b.eval(`window.pwned === undefined`, nil); err != nil {
		t.Fatal(err)
	}
	b.takeProblems() // the refused POST's 400
	load("/runs/good1")

	load("/functions")
	load("/crons")
	expectTrue(t, b, "the crons listed, markup as text, the unusable ones saying why", `document.querySelectorAll('tr[data-cron]').length === 4
		&& document.querySelector('tr[data-cron="badsched"] .unreadable-reason').textContent.includes('99 99 * * *')
		&& document.querySelector('tr[data-cron="garbage"] .unreadable-reason').textContent.includes('invalid character')
		&& !document.querySelector('tr[data-cron="badsched"] form')
		&& document.querySelector('tr[data-cron="evil"] .unreadable-reason').textContent.includes('it holds cron')`)
	load("/triggers")
	expectTrue(t, b, "unreadable triggers listed as such, saying why", `document.querySelector('tr[data-trigger="badtrig"]').dataset.state === 'unreadable'
		&& document.querySelector('tr[data-trigger="badtrig"] .unreadable-reason').textContent.startsWith('definition unreadable')
		&& document.querySelector('tr[data-trigger="other"]').dataset.state === 'unreadable'
		&& document.querySelector('tr[data-trigger="evil"] td:nth-child(3)').textContent === `+jsString(hostile))
}
