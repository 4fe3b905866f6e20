package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
)

func decodeRun(t *testing.T, data string) *jetflow.Run {
	t.Helper()
	var r jetflow.Run
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		t.Fatalf("run event %s: %v", data, err)
	}
	return &r
}

func decodeCounts(t *testing.T, data string) counts {
	t.Helper()
	var c counts
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		t.Fatalf("counts event %s: %v", data, err)
	}
	return c
}

func TestEventsDeliverRunChanges(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	e.enqueue(t, idleFn.With(testArgs{}), "old")
	ch := subscribe(t, e.URL+"/api/events")
	// "ready" comes once the watch is in place, with the counts so far.
	if c := decodeCounts(t, next(t, ch, "ready", nil)); c.numbers() != (counts{Pending: 1, Total: 1}) {
		t.Fatalf("ready counts %+v", c)
	}

	id := e.enqueue(t, idleFn.With(testArgs{N: 3}), "new")
	r := decodeRun(t, next(t, ch, "run", nil))
	if r.ID != id || r.State != jetflow.Pending || r.Name != "test.idle" {
		t.Fatalf("first run event: %+v", r)
	}
	if r.Args != nil {
		t.Fatalf("run event carries args %s; events leave them out", r.Args)
	}
	if err := e.P.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	r = decodeRun(t, next(t, ch, "run", nil))
	if r.ID != id || r.State != jetflow.Canceled || r.CompletedTime.IsZero() {
		t.Fatalf("run event after cancel: %+v", r)
	}
	// Counts follow, without a reload.
	next(t, ch, "counts", func(data string) bool {
		return decodeCounts(t, data).numbers() == counts{Pending: 1, Canceled: 1, Total: 2}
	})
}

func TestEventsProgressFromAWorker(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	e.startWorker(t)
	ch := subscribe(t, e.URL+"/api/events?function=test.block")
	next(t, ch, "ready", nil)
	e.enqueue(t, okFn.With(testArgs{}), "ok1")
	id := e.enqueue(t, blockFn.With(testArgs{}), "blk")
	r := decodeRun(t, next(t, ch, "run", func(data string) bool {
		return decodeRun(t, data).Progress != nil
	}))
	if r.ID != id || r.State != jetflow.InProgress || r.Progress.Percent != 40 || r.Progress.Message != "halfway" {
		t.Fatalf("progress event: %+v %+v", r, r.Progress)
	}
	if err := e.P.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "run", func(data string) bool { return decodeRun(t, data).State == jetflow.Canceled })
	// ok1 ended meanwhile, but this stream is for test.block only.
	e.waitState(t, "ok1", jetflow.Success)
	next(t, ch, "counts", func(data string) bool {
		return decodeCounts(t, data).numbers() == counts{Canceled: 1, Total: 1}
	})
}

func TestEventsFilters(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	byFn := subscribe(t, e.URL+"/api/events?function=other.fn")
	byRun := subscribe(t, e.URL+"/api/events?run=target")
	next(t, byFn, "ready", nil)
	if data := next(t, byRun, "ready", nil); data != "{}" {
		t.Fatalf("ready of a run stream: %s", data)
	}
	e.enqueue(t, idleFn.With(testArgs{}), "i1")
	e.enqueue(t, otherFn.With(testArgs{}), "o1")
	e.enqueue(t, idleFn.With(testArgs{}), "target")
	// Events come in the order of the writes: a filter that let i1 through
	// would show it first.
	if r := decodeRun(t, next(t, byFn, "run", nil)); r.ID != "o1" {
		t.Fatalf("function filter: first event for %s, want o1", r.ID)
	}
	if r := decodeRun(t, next(t, byRun, "run", nil)); r.ID != "target" {
		t.Fatalf("run filter: first event for %s, want target", r.ID)
	}

	for _, q := range []string{"run=a.b", "function=a..b"} {
		st, _, body := do(t, "GET", e.URL+"/api/events?"+q, nil)
		if st != http.StatusBadRequest || !strings.Contains(string(body), `"error"`) {
			t.Fatalf("events?%s: status %d %s", q, st, body)
		}
	}
}
