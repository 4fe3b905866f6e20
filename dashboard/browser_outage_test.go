package dashboard_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/internal/testserver"
)

// statusRecorder keeps the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int)        { s.status = code; s.ResponseWriter.WriteHeader(code) }
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// TestBrowserEventsAcrossNATSOutage stops the NATS server under an open
// runs page: the page stops saying it is live, keeps trying while the
// dashboard cannot reach NATS (its events stream answers 503), and once
// the server is back shows the runs made since, live, without a reload.
func TestBrowserEventsAcrossNATSOutage(t *testing.T) {
	t.Parallel()
	chromiumPath(t)
	ts := testserver.Start(t)
	var refused atomic.Int32 // events requests answered 503
	e := setupOn(t, ts, dashboard.Config{Middleware: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w}
			next.ServeHTTP(rec, r)
			if strings.HasSuffix(r.URL.Path, "/api/events") && rec.status == http.StatusServiceUnavailable {
				refused.Add(1)
			}
		})
	}})
	e.enqueue(t, idleFn.With(testArgs{N: 1}), "a1")
	b := startBrowser(t)
	b.navigate(e.URL + "/")
	b.waitFor("a1 live", rowIDs+` === 'a1' && document.getElementById('live').textContent === 'live'`)
	if err := b.eval(`window.jetflowMarker = 3`, nil); err != nil {
		t.Fatal(err)
	}

	ts.S.Stop()
	b.waitFor("the page to say it is not live", `document.getElementById('live').textContent === 'reconnecting\u2026'`)
	testserver.Eventually(t, 20*time.Second, "the page to retry while NATS is down", func() bool { return refused.Load() >= 2 })
	s, err := embedded.Start(embedded.Options{Dir: ts.Dir, Port: ts.Port, SyncEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ts.S = s // stopped at cleanup
	testserver.Eventually(t, 20*time.Second, "the producer to reconnect", func() bool { return ts.NC.IsConnected() })
	e.enqueue(t, idleFn.With(testArgs{N: 2}), "a2")
	b.waitFor("a2 shown live without a reload", rowIDs+` === 'a2,a1' && document.getElementById('live').textContent === 'live' && window.jetflowMarker === 3`)
	e.enqueue(t, idleFn.With(testArgs{N: 3}), "a3")
	b.waitFor("a3 shown", rowIDs+` === 'a3,a2,a1' && document.querySelector('[data-count="total"]').textContent === '3'`)
	for _, p := range b.takeProblems() {
		if !strings.Contains(p, "status of 503") {
			t.Errorf("the page reported %q", p)
		}
	}
}
