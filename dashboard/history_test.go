package dashboard_test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
)

var flakyFn = jetflow.Define[testArgs]("test.flaky")

// TestAttemptHistory: a run that took three attempts shows each on its
// page, with its worker, times, outcome and error, served and live (in
// headless Chromium).
func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	ctx := context.Background()
	w, err := worker.New(ctx, e.JS, worker.Config{ID: "w-flaky"})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, flakyFn, func(ctx context.Context, j *worker.Job[testArgs]) error {
		if j.Attempt() < 3 {
			return fmt.Errorf("attempt %d <fails>", j.Attempt())
		}
		return nil
	}, worker.Options{Backoff: jetflow.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	s, err := scheduler.New(ctx, e.JS, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })

	id := e.enqueue(t, flakyFn.With(testArgs{N: 1}), "flaky1")
	r := e.waitState(t, id, jetflow.Success)
	if len(r.History) != 3 {
		t.Fatalf("history %+v, want 3 attempts", r.History)
	}
	html := getPage(t, e.URL+"/runs/"+id)
	rows := regexp.MustCompile(`(?s)<tr data-attempt="(\d)">.*?</tr>`).FindAllStringSubmatch(html, -1)
	if len(rows) != 3 {
		t.Fatalf("%d attempt rows, want 3:\n%s", len(rows), html)
	}
	for i, row := range rows {
		want := []string{`class="id">w-flaky<`, "state-failed", "attempt " + fmt.Sprint(i+1) + " &lt;fails&gt;"}
		if i == 2 {
			want = []string{`class="id">w-flaky<`, "state-success", `<pre class="error-text"></pre>`}
		}
		for _, w := range want {
			if !strings.Contains(row[0], w) {
				t.Fatalf("attempt %d lacks %q:\n%s", i+1, w, row[0])
			}
		}
	}
	if strings.Contains(html, `id="attempts-note"`) {
		t.Fatal("a run whose history is whole says attempts are missing")
	}

	chromiumPath(t)
	b := startBrowser(t)
	b.navigate(e.URL + "/runs/" + id)
	b.waitFor("three attempts, live", `[...document.querySelectorAll('#attempts tr[data-attempt]')].map(r => r.dataset.attempt + ':' + r.querySelector('.state').textContent).join(',') === '1:failed,2:failed,3:success'`)
	path := filepath.Join(t.TempDir(), "run-attempts.png")
	checkScreenshot(t, b, path)
	t.Logf("screenshot: %s", path)
}
