package worker_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var hostileFn = jetflow.Define[echoArgs]("hostile.work")

// binary returns n bytes that are neither JSON nor UTF-8.
func binary(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range b {
		b[i] = byte(0x80 + r.IntN(0x40)) // continuation bytes: never valid UTF-8
	}
	return b
}

// Messages that cannot be runs end as failed records that name the reason,
// within the server's max payload, and leave the function stream: bodies of
// every size up to the max payload, however they escape.
func TestHostileBodiesEndAsFailedRecords(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var n calls
	worker.Handle(e.W, hostileFn, func(ctx context.Context, j *worker.Job[echoArgs]) error { n.add(j.ID()); return nil })
	e.start(t)
	ctx := context.Background()
	max := int(e.NC.MaxPayload())
	scfg := streams.Config{}.WithDefaults()
	cases := map[string][]byte{
		"bin-1":      binary(1),
		"bin-64k":    binary(64 << 10),
		"bin-512k":   binary(512 << 10),
		"bin-max":    binary(max - 1024),
		"json-max":   []byte(`"` + strings.Repeat("a", max-1024) + `"`),
		"text-big":   []byte(strings.Repeat("not json ", (256<<10)/9)),
		"bad-utf8":   []byte("{\"n\": \"\xff\xfe\"}"),
		"truncated":  []byte(`{"n": 1`),
		"wrong-type": []byte(`{"n": "one"}`),
	}
	for id, body := range cases {
		msg := &nats.Msg{Subject: scfg.FunctionSubject(hostileFn.Name(), id), Data: body, Header: nats.Header{}}
		if _, err := e.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatalf("publish %s (%d bytes): %v", id, len(body), err)
		}
	}
	for id, body := range cases {
		r := e.wait(t, id)
		if r.State != jetflow.Failed || !strings.Contains(r.Error, "jetflow:") {
			t.Errorf("%s (%d bytes): %s %q, want failed with the reason", id, len(body), r.State, r.Error)
		}
		if n.of(id) != 0 {
			t.Errorf("%s: handler ran", id)
		}
	}
	testserver.Eventually(t, 20*time.Second, "function stream empty", func() bool { return queuedMsgs(t, e) == 0 })
}

// A message on <prefix>.fn.<name> with no run id token is refused by the
// server at publish: it never sits in the stream.
func TestSubjectWithoutRunIDIsRefusedAtPublish(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	e.start(t)
	_, err := e.JS.Publish(context.Background(), "jetflow.fn.hostile", []byte(`{}`))
	if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("publish without a run id: %v, want no stream to answer", err)
	}
	if got := queuedMsgs(t, e); got != 0 {
		t.Fatalf("%d messages stored", got)
	}
}

// A retry published by another producer may carry the run id as its
// Nats-Msg-Id; an empty body is no args (null).
func TestForeignRetryAndEmptyBody(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	got := make(chan int, 2)
	worker.Handle(e.W, hostileFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		got <- j.Attempt()
		return nil
	})
	e.start(t)
	ctx := context.Background()
	scfg := streams.Config{}.WithDefaults()
	h := nats.Header{}
	h.Set(streams.HeaderAttempt, "3")
	h.Set(streams.HeaderMsgID, "foreign-3")
	if _, err := e.JS.PublishMsg(ctx, &nats.Msg{Subject: scfg.FunctionSubject(hostileFn.Name(), "foreign-3"), Header: h, Data: []byte(`{"n":3}`)}); err != nil {
		t.Fatal(err)
	}
	if r := e.wait(t, "foreign-3"); r.State != jetflow.Success || r.Attempts != 3 {
		t.Fatalf("retry with the run id as Nats-Msg-Id: %s attempts %d %q, want success at attempt 3", r.State, r.Attempts, r.Error)
	}
	if _, err := e.JS.Publish(ctx, scfg.FunctionSubject(hostileFn.Name(), "empty-body"), nil); err != nil {
		t.Fatal(err)
	}
	if r := e.wait(t, "empty-body"); r.State != jetflow.Success || string(r.Args) != "null" {
		t.Fatalf("empty body: %s args %s, want success with args null", r.State, r.Args)
	}
}

// A message whose Jetflow-Rev names a record that does not exist still
// ends with a record of its outcome: a run never ends unrecorded.
func TestRevisionWithoutRecordIsRecorded(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	worker.Handle(e.W, hostileFn, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	e.start(t)
	ctx := context.Background()
	h := nats.Header{}
	h.Set(streams.HeaderRev, "4242")
	subj := streams.Config{}.WithDefaults().FunctionSubject(hostileFn.Name(), "made-up-rev")
	if _, err := e.JS.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: h, Data: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	if r := e.wait(t, "made-up-rev"); r.State != jetflow.Success {
		t.Fatalf("run with a made-up revision: %+v, want its success recorded", r)
	}
	testserver.Eventually(t, 20*time.Second, "function stream empty", func() bool { return queuedMsgs(t, e) == 0 })
}
