package dashboard_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/retrier"
	"github.com/jetflow-dev/jetflow/worker"
)

// The retrier's internal functions, which the worker never fails for want
// of attempts, read "unlimited" in the functions page's max attempts, not
// 2147483647; a function with a limit reads its number. /api/functions
// keeps the number (kv.UnlimitedAttempts).
func TestFunctionsPageShowsUnlimitedAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	ctx := context.Background()
	w, err := worker.New(ctx, e.JS, worker.Config{ID: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, okFn, func(ctx context.Context, j *worker.Job[testArgs]) error { return nil }, worker.Options{MaxAttempts: 3})
	if err := retrier.New(e.P, retrier.Options{}).Register(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	var fns string
	testserver.Eventually(t, 20*time.Second, "the functions page lists the retrier's functions", func() bool {
		fns = page(t, e.URL+"/functions", http.StatusOK)
		return strings.Contains(fns, ">"+retrier.StepFunction+"</a>") && strings.Contains(fns, ">test.ok</a>")
	})
	cell := regexp.MustCompile(`<td class="num">([^<]*)</td>\s*<td>[^<]*</td>\s*<td class="time">`)
	for fn, want := range map[string]string{retrier.StartFunction: "unlimited", retrier.StepFunction: "unlimited", "test.ok": "3"} {
		row := pageRow(fns, ">"+fn+"</a>")
		m := cell.FindStringSubmatch(row)
		if m == nil || m[1] != want {
			t.Errorf("%s: max attempts %q, want %q, in row:\n%s", fn, m, want, row)
		}
	}
	if strings.Contains(fns, "2147483647") {
		t.Errorf("the functions page shows 2147483647:\n%s", fns)
	}
	var api struct{ Functions []kv.FunctionInfo }
	getJSON(t, "GET", e.URL+"/api/functions", http.StatusOK, &api)
	for _, fi := range api.Functions {
		if fi.Name == retrier.StepFunction && fi.MaxAttempts != kv.UnlimitedAttempts {
			t.Errorf("/api/functions: %s maxAttempts %d, want kv.UnlimitedAttempts", fi.Name, fi.MaxAttempts)
		}
	}
}
