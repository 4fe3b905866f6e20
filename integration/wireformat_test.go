package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The tests below prove docs/wire-format.md: a service in another language
// enqueues a run with a plain NATS client, headers set by hand, and a Go
// worker runs it and records it.

type wireEmail struct {
	To string `json:"to"`
}

var wireSend = jetflow.Define[wireEmail]("emails.send")

// wireSetup starts a server, a worker serving emails.send and a producer to
// read records with; the handler records what it saw per run id.
type wireEnv struct {
	nc   *nats.Conn
	p    *producer.Producer
	seen chan wireSeen
}

type wireSeen struct {
	id, parent       string
	attempt, maxAtt  int
	args             wireEmail
	scheduled, creat time.Time
}

// wireServer starts an embedded server (fsync every 1 s, not 10 ms: see
// exampleServer) and connects to it; both end with the test.
func wireServer(t *testing.T) (*embedded.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{Dir: t.TempDir(), SyncEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return srv, nc, js
}

func wireSetup(t *testing.T) *wireEnv {
	t.Helper()
	ctx := context.Background()
	_, nc, js := wireServer(t)
	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, js, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := &wireEnv{nc: nc, p: p, seen: make(chan wireSeen, 100)}
	worker.Handle(w, wireSend, func(ctx context.Context, j *worker.Job[wireEmail]) error {
		e.seen <- wireSeen{id: j.ID(), parent: j.Parent(), attempt: j.Attempt(), maxAtt: j.MaxAttempts(),
			args: j.Args, scheduled: j.ScheduledTime(), creat: j.CreationTime()}
		return j.SetResult("sent to " + j.Args.To)
	})
	startWithScheduler(t, w, js)
	return e
}

// startWithScheduler starts w and a scheduler (on sjs), both stopped when
// the test ends.
func startWithScheduler(t *testing.T, w *worker.Worker, sjs jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	s, err := scheduler.New(ctx, sjs, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
}

// publish is what any NATS client does: a core NATS publish of a subject,
// headers and a body.
func (e *wireEnv) publish(t *testing.T, subject string, headers map[string]string, body string) {
	t.Helper()
	m := nats.NewMsg(subject)
	for k, v := range headers {
		m.Header.Set(k, v)
	}
	m.Data = []byte(body)
	if err := e.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// request is a JetStream publish done by hand, as clients without a
// JetStream API do it: a request whose reply is the stream's ack.
func (e *wireEnv) request(t *testing.T, subject string, headers map[string]string, body string) wirePubAck {
	t.Helper()
	m := nats.NewMsg(subject)
	for k, v := range headers {
		m.Header.Set(k, v)
	}
	m.Data = []byte(body)
	resp, err := e.nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ack wirePubAck
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		t.Fatalf("ack %s: %v", resp.Data, err)
	}
	return ack
}

type wirePubAck struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

func (e *wireEnv) wait(t *testing.T, id string) *jetflow.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := e.p.Wait(ctx, id)
	if err != nil {
		t.Fatalf("run %s did not end: %v (last %+v)", id, err, r)
	}
	return r
}

func TestWireFormatMinimalPublish(t *testing.T) {
	t.Parallel()
	e := wireSetup(t)
	// nats pub jetflow.fn.emails.send.order-42 '{"to":"a@b.c"}' -H Nats-Msg-Id:order-42
	e.publish(t, "jetflow.fn.emails.send.order-42", map[string]string{"Nats-Msg-Id": "order-42"}, `{"to":"a@b.c"}`)

	r := e.wait(t, "order-42")
	if r.State != jetflow.Success || r.Name != "emails.send" || r.Kind != jetflow.Retryable || r.Attempts != 1 {
		t.Fatalf("record %+v", r)
	}
	if string(r.Args) != `{"to":"a@b.c"}` || string(r.Result) != `"sent to a@b.c"` {
		t.Fatalf("args %s result %s", r.Args, r.Result)
	}
	if r.ScheduledTime.IsZero() || r.CreationTime.IsZero() || r.CompletedTime.Before(r.ScheduledTime) {
		t.Fatalf("times %+v", r)
	}
	s := <-e.seen
	if s.id != "order-42" || s.attempt != 1 || s.args.To != "a@b.c" {
		t.Fatalf("handler saw %+v", s)
	}
}

func TestWireFormatEveryHeader(t *testing.T) {
	t.Parallel()
	e := wireSetup(t)
	sched := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	created := sched.Add(-time.Minute)
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ack := e.request(t, "jetflow.fn.emails.send.order-43", map[string]string{
		"Nats-Msg-Id":          "order-43",
		"Jetflow-Max-Attempts": "3",
		"Jetflow-Timeout":      "45s",
		"Jetflow-Parent":       "checkout-7",
		"Jetflow-Scheduled":    sched.Format(time.RFC3339Nano),
		"Jetflow-Created":      created.Format(time.RFC3339Nano),
		"traceparent":          traceparent,
		"tracestate":           "vendor=abc",
	}, `{"to":"b@c.d"}`)
	if ack.Stream != "JETFLOW_FN" || ack.Duplicate {
		t.Fatalf("ack %+v", ack)
	}
	// The same message again, inside the duplicate window: not stored twice.
	again := e.request(t, "jetflow.fn.emails.send.order-43", map[string]string{"Nats-Msg-Id": "order-43"}, `{"to":"b@c.d"}`)
	if !again.Duplicate || again.Seq != ack.Seq {
		t.Fatalf("second publish with the same Nats-Msg-Id: %+v, first %+v", again, ack)
	}

	r := e.wait(t, "order-43")
	if r.State != jetflow.Success || r.MaxAttempts != 3 || r.Timeout != 45*time.Second || r.Parent != "checkout-7" {
		t.Fatalf("record %+v", r)
	}
	if !r.ScheduledTime.Equal(sched) || !r.CreationTime.Equal(created) {
		t.Fatalf("scheduled %v created %v, want %v %v", r.ScheduledTime, r.CreationTime, sched, created)
	}
	if r.Trace["traceparent"] != traceparent || r.Trace["tracestate"] != "vendor=abc" {
		t.Fatalf("trace %v", r.Trace)
	}
	s := <-e.seen
	if s.parent != "checkout-7" || s.maxAtt != 3 || !s.scheduled.Equal(sched) || !s.creat.Equal(created) {
		t.Fatalf("handler saw %+v", s)
	}
	select {
	case s := <-e.seen:
		t.Fatalf("handler ran again: %+v", s)
	default:
	}
}

func TestWireFormatBadMessages(t *testing.T) {
	t.Parallel()
	e := wireSetup(t)

	// A body that is not the function's JSON args: failed, reason named,
	// not retried.
	e.publish(t, "jetflow.fn.emails.send.garbage-1", map[string]string{"Nats-Msg-Id": "garbage-1"}, `not json{`)
	r := e.wait(t, "garbage-1")
	if r.State != jetflow.Failed || !strings.Contains(r.Error, jetflow.ErrBadArgs.Error()) || r.Attempts != 1 {
		t.Fatalf("garbage body: record %+v", r)
	}
	t.Logf("garbage body: %s", r.Error)
	if string(r.Args) != `"not json{"` {
		t.Fatalf("garbage body kept as %s, want it as a JSON string", r.Args)
	}

	// A header that is present but unreadable: a dead letter under the
	// subject's id.
	e.publish(t, "jetflow.fn.emails.send.badheader-1", map[string]string{
		"Nats-Msg-Id": "badheader-1", "Jetflow-Timeout": "soon",
	}, `{"to":"a@b.c"}`)
	r = e.wait(t, "badheader-1")
	if r.State != jetflow.Failed || !strings.Contains(r.Error, jetflow.ErrBadMessage.Error()) || !strings.Contains(r.Error, "Jetflow-Timeout") {
		t.Fatalf("bad header: record %+v", r)
	}

	t.Logf("bad header: %s", r.Error)

	// A Nats-Msg-Id that names another run than the subject: a dead letter
	// under dlq-<stream>-<sequence>; neither id gets a record.
	ack := e.request(t, "jetflow.fn.emails.send.mismatch-1", map[string]string{"Nats-Msg-Id": "other-1"}, `{"to":"a@b.c"}`)
	dlq := fmt.Sprintf("dlq-%s-%d", ack.Stream, ack.Seq)
	r = e.wait(t, dlq)
	if r.State != jetflow.Failed || !strings.Contains(r.Error, jetflow.ErrBadMessage.Error()) ||
		!strings.Contains(r.Error, "jetflow.fn.emails.send.mismatch-1") || r.Name != "emails.send" {
		t.Fatalf("id mismatch: record %+v", r)
	}
	t.Logf("id mismatch: %s: %s", r.ID, r.Error)

	// A run id that is not a valid id token: a dead letter too.
	ack = e.request(t, "jetflow.fn.emails.send.bad!id", nil, `{"to":"a@b.c"}`)
	r = e.wait(t, fmt.Sprintf("dlq-%s-%d", ack.Stream, ack.Seq))
	if r.State != jetflow.Failed || !strings.Contains(r.Error, jetflow.ErrInvalidRunID.Error()) {
		t.Fatalf("invalid id: record %+v", r)
	}

	t.Logf("invalid id: %s: %s", r.ID, r.Error)

	// The worker keeps running: a good message after the bad ones succeeds.
	e.publish(t, "jetflow.fn.emails.send.after-bad", map[string]string{"Nats-Msg-Id": "after-bad"}, `{"to":"c@d.e"}`)
	if r := e.wait(t, "after-bad"); r.State != jetflow.Success {
		t.Fatalf("good message after bad ones: %+v", r)
	}
	ctx := context.Background()
	for _, id := range []string{"mismatch-1", "other-1"} {
		if _, err := e.p.Get(ctx, id); err == nil {
			t.Errorf("run %s has a record; the mismatched message must only be a dead letter", id)
		}
	}
	// The handler ran for the good message only.
	var ran []string
drain:
	for {
		select {
		case s := <-e.seen:
			ran = append(ran, s.id)
		default:
			break drain
		}
	}
	if len(ran) != 1 || ran[0] != "after-bad" {
		t.Fatalf("handler ran for %v, want only after-bad", ran)
	}
}

// A run due later, scheduled from another language: the record first (its
// stream sequence is its revision), then the delayed entry that names that
// revision. The scheduler publishes it when due.
func TestWireFormatDelayedRun(t *testing.T) {
	t.Parallel()
	e := wireSetup(t)
	now := time.Now().UTC()
	due := now.Add(300 * time.Millisecond)
	record := fmt.Sprintf(`{"id":"later-1","name":"emails.send","kind":"retryable","args":{"to":"l@a.te"},`+
		`"state":"pending","scheduledTime":%q,"creationTime":%q,"attempts":0}`,
		due.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	ack := e.request(t, "$KV.jetflow_runs.later-1", map[string]string{
		"Nats-Expected-Last-Subject-Sequence": "0",
		"Jetflow-State":                       "pending",
		"Jetflow-Function":                    "emails.send",
		"Jetflow-Due":                         fmt.Sprint(due.UnixMilli()),
	}, record)
	if ack.Stream != "KV_jetflow_runs" || ack.Seq == 0 {
		t.Fatalf("record ack %+v", ack)
	}
	entry := fmt.Sprintf(`{"fn":"emails.send","id":"later-1","rev":%d,"scheduled":%q,"created":%q,"args":{"to":"l@a.te"},"due":%q}`,
		ack.Seq, due.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), due.Format(time.RFC3339Nano))
	if a := e.request(t, fmt.Sprintf("$KV.jetflow_delayed.%d.later-1", due.Unix()), nil, entry); a.Stream != "KV_jetflow_delayed" {
		t.Fatalf("delayed entry ack %+v", a)
	}
	// A read that returned before the run was due finds it pending (on a
	// loaded machine the read may come after; when it started is checked
	// below in any case).
	if r, err := e.p.Get(context.Background(), "later-1"); err != nil || time.Now().Before(due) && r.State != jetflow.Pending {
		t.Fatalf("before it is due: %+v %v", r, err)
	}
	r := e.wait(t, "later-1")
	if r.State != jetflow.Success || string(r.Result) != `"sent to l@a.te"` || r.StartedTime.Before(due) {
		t.Fatalf("record %+v", r)
	}
}
