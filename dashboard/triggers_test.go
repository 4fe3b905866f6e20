package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/nats-io/nats.go/jetstream"
)

// triggerEnv adds a run-time trigger "orders" (stream ORDERS -> okFn) and
// a runner that runs it, and stores three messages: three runs.
func triggerEnv(t *testing.T) *env {
	t.Helper()
	e := setup(t, dashboard.Config{})
	e.startWorker(t)
	ctx := context.Background()
	if _, err := e.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := trigger.Add(ctx, e.P, trigger.Def{Name: "orders", Function: okFn.Name(), Stream: "ORDERS"}); err != nil {
		t.Fatal(err)
	}
	if _, err := trigger.Add(ctx, e.P, trigger.Def{Name: "idle", Function: idleFn.Name(), Subjects: []string{"idle.events"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := trigger.Pause(ctx, e.P, "idle"); err != nil {
		t.Fatal(err)
	}
	r := trigger.New(e.P, trigger.Config{ID: "r1", StatsEvery: 50 * time.Millisecond})
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	for i := 0; i < 3; i++ {
		if _, err := e.JS.Publish(ctx, "orders.created", []byte(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// The triggers API lists each trigger with its state and its runners'
// counters.
func TestTriggersAPI(t *testing.T) {
	t.Parallel()
	e := triggerEnv(t)
	var got struct {
		Triggers []kv.TriggerInfo `json:"triggers"`
	}
	testserver.Eventually(t, 30*time.Second, "three runs counted", func() bool {
		resp, err := http.Get(e.URL + "/api/triggers")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /api/triggers: %s", resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		return len(got.Triggers) == 2 && got.Triggers[1].Totals.Runs == 3
	})
	idle, orders := got.Triggers[0], got.Triggers[1]
	if orders.Name != "orders" || orders.Function != okFn.Name() || orders.Paused || len(orders.Runners) != 1 || orders.Runners[0].Runner != "r1" || orders.Totals.Messages != 3 {
		t.Fatalf("orders: %+v", orders)
	}
	if idle.Name != "idle" || !idle.Paused || idle.Stream != "" || idle.Subjects[0] != "idle.events" {
		t.Fatalf("idle: %+v", idle)
	}
	// The page: a request under load may time out; the rows must come.
	var body string
	wants := []string{`data-trigger="orders" data-state="running"`, `data-trigger="idle" data-state="paused"`, `<code>idle.events</code>`}
	has := func() bool {
		for _, w := range wants {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(20 * time.Second); !has(); {
		if time.Now().After(deadline) {
			t.Fatalf("triggers page lacks one of %q:\n%s", wants, body)
		}
		resp, err := http.Get(e.URL + "/triggers")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		if !has() {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// In a browser, the Triggers page lists the triggers with their state and
// counters, and the nav links to it.
func TestBrowserTriggers(t *testing.T) {
	t.Parallel()
	chromiumPath(t)
	e := triggerEnv(t)
	testserver.Eventually(t, 30*time.Second, "three runs counted", func() bool {
		tis, err := trigger.List(context.Background(), e.P)
		return err == nil && len(tis) == 2 && tis[1].Totals.Runs == 3
	})
	b := startBrowser(t)
	b.navigate(e.URL + "/")
	click(t, b, `nav a[href$="/triggers"]`)
	b.waitFor("the triggers list", `!!document.querySelector('#triggers-page tr[data-trigger="orders"]')`)
	// Pages with nothing live to load say they are ready too, so a test
	// (or a user's script) can load them directly and wait the same way.
	b.navigate(e.URL + "/functions")
	b.navigate(e.URL + "/triggers")
	var rows []struct {
		Name  string `json:"name"`
		State string `json:"state"`
		Runs  string `json:"runs"`
	}
	// A page rendered while a loaded machine was slow once lacked the
	// runner's counters (CI: orders "no runner", 0 runs, a second after
	// the API showed them): the page is loaded again until its rows come.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := b.eval(`[...document.querySelectorAll('#triggers-page tr[data-trigger]')].map(r => ({name: r.dataset.trigger,
			state: r.dataset.state, runs: r.querySelector('[data-counter="runs"]').textContent}))`, &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) == 2 && rows[0].Name == "idle" && rows[0].State == "paused" && rows[1].Name == "orders" && rows[1].State == "running" && rows[1].Runs == "3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows %+v", rows)
		}
		b.navigate(e.URL + "/triggers")
		b.waitFor("the triggers list", `!!document.querySelector('#triggers-page tr[data-trigger="orders"]')`)
	}
	var active string
	if err := b.eval(`document.querySelector('nav a.active').textContent`, &active); err != nil || active != "Triggers" {
		t.Fatalf("active nav entry %q (%v)", active, err)
	}
}
