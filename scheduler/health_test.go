package scheduler_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/scheduler"
)

func probe(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: %v: %q", path, err, rec.Body.String())
	}
	return rec.Code, rec.Body.String()
}

// Liveness stays up through a server outage; readiness (the lease known)
// goes down with the server and comes back with it, for the leader and a
// standby alike; Stop takes readiness down.
func TestHealthAcrossAServerRestart(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	newS := func(id string) *scheduler.Scheduler {
		_, js := ts.Connect()
		s, err := scheduler.New(context.Background(), js, scheduler.Config{ID: id, LeaseTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := newS("a"), newS("b")
	if code, _ := probe(t, a.Health(), "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("ready before Start: %d", code)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 10*time.Second, "a leads", a.IsLeader)
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = a.Stop(context.Background())
		_ = b.Stop(context.Background())
	})
	ready := func(s *scheduler.Scheduler, want int) func() bool {
		return func() bool { code, _ := probe(t, s.Health(), "/readyz"); return code == want }
	}
	testserver.Eventually(t, 10*time.Second, "a ready", ready(a, http.StatusOK))
	testserver.Eventually(t, 10*time.Second, "b ready", ready(b, http.StatusOK))
	if _, body := probe(t, a.Health(), "/readyz"); !strings.Contains(body, "leader") {
		t.Fatalf("leader's readiness: %s", body)
	}
	if _, body := probe(t, b.Health(), "/readyz"); !strings.Contains(body, "standby") {
		t.Fatalf("standby's readiness: %s", body)
	}

	ts.Down()
	testserver.Eventually(t, 10*time.Second, "a unready", ready(a, http.StatusServiceUnavailable))
	testserver.Eventually(t, 10*time.Second, "b unready", ready(b, http.StatusServiceUnavailable))
	for range 4 {
		for _, s := range []*scheduler.Scheduler{a, b} {
			if code, body := probe(t, s.Health(), "/livez"); code != http.StatusOK {
				t.Fatalf("not live with the server down: %d %s", code, body)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	ts.Up()
	testserver.Eventually(t, 20*time.Second, "a ready again", ready(a, http.StatusOK))
	testserver.Eventually(t, 20*time.Second, "b ready again", ready(b, http.StatusOK))

	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Ready(); err == nil {
		t.Fatal("ready after Stop")
	}
	if err := b.Live(); err == nil {
		t.Fatal("live after Stop")
	}
	if err := a.Live(); err != nil {
		t.Fatal(err)
	}
}
