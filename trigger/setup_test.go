package trigger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Order is the args of the test function.
type Order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

var Ship = jetflow.Define[Order]("test.trigger.ship")

type env struct {
	t  *testing.T
	ts *testserver.Env
	nc *nats.Conn
	js jetstream.JetStream
	p  *producer.Producer

	mu    sync.Mutex
	execs map[string]int   // handler executions per run id
	args  map[string]Order // args per run id
}

func setup(t *testing.T) *env {
	t.Helper()
	ts := testserver.Start(t)
	nc, js := ts.Connect()
	ctx := testCtx(t)
	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ts: ts, nc: nc, js: js, p: p, execs: map[string]int{}, args: map[string]Order{}}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ordersStream creates the user's stream ORDERS on orders.>.
func (e *env) ordersStream() {
	e.t.Helper()
	_, err := e.js.CreateStream(testCtx(e.t), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	if err != nil {
		e.t.Fatal(err)
	}
}

// publish stores n orders on subject, ids from first, with headers h.
func (e *env) publish(subject string, first, n int, h nats.Header) {
	e.t.Helper()
	ctx := testCtx(e.t)
	for i := first; i < first+n; i++ {
		data, _ := json.Marshal(Order{ID: fmt.Sprintf("o%d", i), Amount: i})
		if _, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data, Header: h}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) publishRaw(subject string, data []byte, h nats.Header) {
	e.t.Helper()
	if _, err := e.js.PublishMsg(testCtx(e.t), &nats.Msg{Subject: subject, Data: data, Header: h}); err != nil {
		e.t.Fatal(err)
	}
}

// worker starts a worker serving Ship (and whatever more registers).
func (e *env) worker(more ...func(w *worker.Worker)) *worker.Worker {
	e.t.Helper()
	ctx := testCtx(e.t)
	w, err := worker.New(ctx, e.js, worker.Config{Concurrency: 20})
	if err != nil {
		e.t.Fatal(err)
	}
	worker.Handle(w, Ship, func(ctx context.Context, j *worker.Job[Order]) error {
		e.mu.Lock()
		e.execs[j.ID()]++
		e.args[j.ID()] = j.Args
		e.mu.Unlock()
		return nil
	})
	for _, f := range more {
		f(w)
	}
	if err := w.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w
}

// runner starts a runner after bind binds its triggers.
func (e *env) runner(cfg trigger.Config, bind func(r *trigger.Runner)) *trigger.Runner {
	e.t.Helper()
	if cfg.StatsEvery == 0 {
		cfg.StatsEvery = 100 * time.Millisecond
	}
	r := trigger.New(e.p, cfg)
	if bind != nil {
		bind(r)
	}
	if err := r.Start(testCtx(e.t)); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

// executed is the number of distinct runs the handler ran, and of
// executions.
func (e *env) executed() (runs, execs int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range e.execs {
		runs++
		execs += n
	}
	return runs, execs
}

// records reads every run record of function fn.
func (e *env) records(fn string) map[string]*jetflow.Run {
	e.t.Helper()
	ctx := testCtx(e.t)
	st := engine.Of(e.p).Store()
	out := map[string]*jetflow.Run{}
	var ids []string
	if err := st.Scan(ctx, func(h kv.Header) {
		if h.Function == fn {
			ids = append(ids, h.ID)
		}
	}); err != nil {
		e.t.Fatal(err)
	}
	for _, id := range ids {
		r, err := st.Show(ctx, id)
		if err != nil {
			e.t.Fatal(err)
		}
		out[id] = r
	}
	return out
}

// waitRecords waits until fn has n records in state st.
func (e *env) waitRecords(fn string, n int, st jetflow.State) map[string]*jetflow.Run {
	e.t.Helper()
	var recs map[string]*jetflow.Run
	testserver.Eventually(e.t, 60*time.Second, fmt.Sprintf("%d %s records of %s", n, st, fn), func() bool {
		recs = e.records(fn)
		c := 0
		for _, r := range recs {
			if r.State == st {
				c++
			}
		}
		return c >= n
	})
	return recs
}

func countState(recs map[string]*jetflow.Run, st jetflow.State) int {
	n := 0
	for _, r := range recs {
		if r.State == st {
			n++
		}
	}
	return n
}

func mustContain(t *testing.T, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%q lacks %q", s, sub)
		}
	}
}

// streamEpoch is the creation time of stream (the stream-derived run ids).
func (e *env) streamEpoch(name string) int64 {
	e.t.Helper()
	st, err := e.js.Stream(testCtx(e.t), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return trigger.StreamEpoch(st.CachedInfo().Created)
}

func (e *env) argsOf(id string) Order {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.args[id]
}
