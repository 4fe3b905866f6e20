package worker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
)

// probe GETs path from h and returns the status code and the report.
func probe(t *testing.T, h http.Handler, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: %v: %q", path, err, rec.Body.String())
	}
	return rec.Code, body
}

// Liveness never depends on NATS: it stays up while the server is down;
// readiness goes down with the server and comes back with it, and goes
// down first when the worker stops.
func TestHealthAcrossAServerRestart(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	w, err := worker.New(context.Background(), ts.JS, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fn := jetflow.Define[struct{}]("health.noop")
	worker.Handle(w, fn, func(context.Context, *worker.Job[struct{}]) error { return nil })
	slow := jetflow.Define[struct{}]("health.slow")
	running, release := make(chan struct{}), make(chan struct{})
	worker.Handle(w, slow, func(context.Context, *worker.Job[struct{}]) error {
		close(running)
		<-release
		return nil
	})
	h := w.Health()

	if code, _ := probe(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("ready before Start: %d", code)
	}
	if code, _ := probe(t, h, "/livez"); code != http.StatusOK {
		t.Fatalf("not live before Start: %d", code)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ready := func(want int) func() bool {
		return func() bool { code, _ := probe(t, h, "/readyz"); return code == want }
	}
	testserver.Eventually(t, 10*time.Second, "ready after Start", ready(http.StatusOK))

	ts.Down()
	testserver.Eventually(t, 10*time.Second, "unready with the server down", ready(http.StatusServiceUnavailable))
	// Down for longer than a few upkeep rounds: liveness stays up.
	for range 3 {
		if code, body := probe(t, h, "/livez"); code != http.StatusOK {
			t.Fatalf("not live with the server down: %d %v", code, body)
		}
		time.Sleep(500 * time.Millisecond)
	}
	_, body := probe(t, h, "/readyz")
	if body["status"] != "unavailable" {
		t.Fatalf("ready body: %v", body)
	}
	ts.Up()
	testserver.Eventually(t, 20*time.Second, "ready again after the server came back", ready(http.StatusOK))
	if err := w.Ready(); err != nil {
		t.Fatal(err)
	}

	// Stop: readiness goes down first, while the worker drains its
	// running handler, and liveness stays up until it has stopped.
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(context.Background(), slow.With(struct{}{})); err != nil {
		t.Fatal(err)
	}
	<-running
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(context.Background()) }()
	testserver.Eventually(t, 10*time.Second, "unready while draining", ready(http.StatusServiceUnavailable))
	if code, body := probe(t, h, "/livez"); code != http.StatusOK {
		t.Fatalf("not live while draining: %d %v", code, body)
	}
	close(release)
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Stop did not return")
	}
	if code, _ := probe(t, h, "/livez"); code != http.StatusServiceUnavailable {
		t.Fatalf("live after Stop: %d", code)
	}
	if err := w.Live(); err == nil {
		t.Fatal("Live() nil after Stop")
	}
}
