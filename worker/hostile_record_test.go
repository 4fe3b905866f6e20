package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
)

// What other clients can put where jetflow reads: times past what a record
// holds, records that are no records, entries of the delayed bucket that
// name no run, and messages whose record would not fit the server's max
// payload. Each ends (run, or recorded failed with the reason), none is
// redelivered or retried for ever, and every reader keeps working.

var hostileRec = jetflow.Define[echoArgs]("hostile.rec")

// publishRaw publishes a run as a client in another language would.
func publishRaw(t *testing.T, e *env, id string, hdr map[string]string, body []byte) {
	t.Helper()
	h := nats.Header{}
	h.Set(streams.HeaderMsgID, id)
	for k, v := range hdr {
		h.Set(k, v)
	}
	subject := streams.Config{}.WithDefaults().FunctionSubject(hostileRec.Name(), id)
	if _, err := e.JS.PublishMsg(context.Background(), &nats.Msg{Subject: subject, Header: h, Data: body}); err != nil {
		t.Fatal(err)
	}
}

// hostileEnv starts a worker serving hostileRec with a handler that counts
// its runs, and a scheduler.
func hostileEnv(t *testing.T) (*env, *calls) {
	t.Helper()
	e := setup(t, worker.Config{})
	ran := new(calls)
	worker.Handle(e.W, hostileRec, func(ctx context.Context, j *worker.Job[echoArgs]) error { ran.add(j.ID()); return nil })
	e.start(t)
	return e, ran
}

// waitQueueEmpty waits until the function stream holds no message: every
// delivery was acknowledged or terminated, none is redelivered for ever.
func waitQueueEmpty(t *testing.T, e *env) {
	t.Helper()
	testserver.Eventually(t, 30*time.Second, "the function stream emptied", func() bool { return queuedMsgs(t, e) == 0 })
}

// A time header whose offset carries it past year 9999 (or before year 0)
// in UTC parses as RFC 3339 but no record can hold it: the message is a bad
// header, recorded failed with its name, and the handler never runs.
// Before, the run ran and its record could not be read back: Get failed,
// and every List with it.
func TestTimeHeaderPastWhatARecordHolds(t *testing.T) {
	t.Parallel()
	e, ran := hostileEnv(t)
	ctx := context.Background()
	good, err := e.P.Enqueue(ctx, hostileRec.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	e.wait(t, good)
	cases := map[string][2]string{
		"y10k-created":   {streams.HeaderCreated, "9999-12-31T23:59:59-23:59"},
		"y10k-scheduled": {streams.HeaderScheduled, "9999-12-31T23:59:59-23:59"},
		"yneg-scheduled": {streams.HeaderScheduled, "0000-01-01T00:00:00+01:00"},
	}
	for id, h := range cases {
		publishRaw(t, e, id, map[string]string{h[0]: h[1]}, []byte(`{"n":2}`))
	}
	for id, h := range cases {
		r := e.waitState(t, id, jetflow.Failed)
		if !r.Permanent || !strings.Contains(r.Error, jetflow.ErrBadMessage.Error()) || !strings.Contains(r.Error, h[0]) {
			t.Errorf("%s: error %q, permanent %v: want a bad message naming %s", id, r.Error, r.Permanent, h[0])
		}
		if n := ran.of(id); n != 0 {
			t.Errorf("%s: the handler ran %d times", id, n)
		}
	}
	waitQueueEmpty(t, e)
	for _, f := range []producer.Filter{{}, {State: jetflow.Failed}, {Function: hostileRec.Name()}} {
		page, err := e.P.List(ctx, f)
		if err != nil {
			t.Fatalf("List %+v: %v", f, err)
		}
		if f.State == "" && len(page.Runs) != 1+len(cases) || f.State == jetflow.Failed && len(page.Runs) != len(cases) {
			t.Errorf("List %+v: %d runs", f, len(page.Runs))
		}
	}
	// The Go producer refuses such a time up front.
	if _, err := e.P.RunAt(ctx, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), hostileRec.With(echoArgs{})); !errors.Is(err, jetflow.ErrBadArgs) {
		t.Errorf("RunAt in year 10000: %v, want ErrBadArgs", err)
	}
}

// Records written into the runs bucket by hand: JSON that does not parse,
// bytes that are no JSON, a state jetflow does not know. Reading one is
// jetflow.ErrBadRecord; a message of its run is dead-lettered (a record
// under dlq-..., naming the run and why) instead of being redelivered every
// second for ever; a page of every run shows a row saying so; Wait returns
// the error instead of waiting for its context.
func TestUnreadableRecordsAreNamedNotRetried(t *testing.T) {
	t.Parallel()
	e, ran := hostileEnv(t)
	ctx := context.Background()
	scfg := streams.Config{}.WithDefaults()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	records := map[string]string{
		"garbled":  `{"id":"garbled","name":`,
		"notjson":  "\xff\xfe",
		"badstate": `{"id":"badstate","name":"hostile.rec","state":"weird","scheduledTime":"` + now + `","creationTime":"` + now + `","attempts":0}`,
	}
	for id, body := range records {
		m := nats.NewMsg(streams.KVSubject(scfg.RunsBucket(), id))
		m.Header.Set("Jetflow-State", "pending")
		m.Header.Set("Jetflow-Function", hostileRec.Name())
		m.Data = []byte(body)
		if _, err := e.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		if _, err := e.P.Get(ctx, id); !errors.Is(err, jetflow.ErrBadRecord) {
			t.Errorf("Get %s: %v, want ErrBadRecord", id, err)
		}
		publishRaw(t, e, id, nil, []byte(`{"n":1}`))
	}
	waitQueueEmpty(t, e)
	page, err := e.P.List(ctx, producer.Filter{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	rows, letters := map[string]string{}, 0
	for _, r := range page.Runs {
		rows[r.ID] = r.Error
		if strings.HasPrefix(r.ID, "dlq-") && r.State == jetflow.Failed {
			letters++
			if !strings.Contains(r.Error, jetflow.ErrBadRecord.Error()) {
				t.Errorf("dead letter %s: %q does not say the record is unreadable", r.ID, r.Error)
			}
		}
	}
	if letters != len(records) {
		t.Errorf("%d dead letters, want %d: %v", letters, len(records), rows)
	}
	for id := range records {
		if !strings.Contains(rows[id], jetflow.ErrBadRecord.Error()) {
			t.Errorf("List: row of %s: %q", id, rows[id])
		}
		if n := ran.of(id); n != 0 {
			t.Errorf("%s: the handler ran %d times", id, n)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := e.P.Wait(wctx, "garbled"); !errors.Is(err, jetflow.ErrBadRecord) {
		t.Errorf("Wait: %v, want ErrBadRecord", err)
	}
	// A readable record whose function header is no subject token: the
	// run index (which makes a subject of it) skips it and goes on. Before,
	// its entry could not be published and the indexer stopped there.
	m := nats.NewMsg(streams.KVSubject(scfg.RunsBucket(), "wildfn"))
	m.Header.Set("Jetflow-State", "success")
	m.Header.Set("Jetflow-Function", "hostile rec..")
	m.Data = []byte(`{"id":"wildfn","name":"hostile rec..","state":"success","scheduledTime":"` + now + `","creationTime":"` + now + `","attempts":1}`)
	if _, err := e.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	after, err := e.P.Enqueue(ctx, hostileRec.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	e.wait(t, after)
	testserver.Eventually(t, 20*time.Second, "the index counting the run after the record", func() bool {
		c, err := e.P.Counts(ctx, hostileRec.Name())
		return err == nil && c.Source == "index" && c.Success == 1
	})
}

// Args at their documented limit (the server's max payload less 4 KB) with
// what else a record keeps: a Jetflow-Parent that is no run id is a bad
// header; a trace context too long to be one is ignored (the run runs); a
// panic's stack and a long error are recorded, cut to fit, and the handler
// runs once. Before, each was redelivered every second for ever, or its
// outcome retried for two minutes and the handler run again.
func TestRecordsNearThePayloadLimitEnd(t *testing.T) {
	t.Parallel()
	// nats-server's default max payload (1 MB), not the embedded 8 MB: the
	// same limits, at a size the test sends quickly.
	e := setupOn(t, testserver.StartMaxPayload(t, 1<<20), worker.Config{})
	var ran calls
	worker.Handle(e.W, hostileRec, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		ran.add(j.ID())
		switch j.Args.N {
		case 3:
			panic(strings.Repeat("boom ", 2000))
		case 4:
			return jetflow.Permanent(errors.New(strings.Repeat("e", 50_000)))
		case 5:
			return errors.New(strings.Repeat("r", 3000)) // retried, then fails
		}
		return nil
	}, worker.Options{MaxAttempts: 3, Backoff: jetflow.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	e.start(t)
	limit := int(e.NC.MaxPayload()) - 4096
	body := func(n int) []byte {
		pre := fmt.Sprintf(`{"n":%d,"p":"`, n)
		return []byte(pre + strings.Repeat("a", limit-len(pre)-2) + `"}`)
	}
	cases := []struct {
		id    string
		n     int
		hdr   map[string]string
		state jetflow.State
		ran   int32
		want  string
	}{
		{"near-parent", 1, map[string]string{streams.HeaderParent: strings.Repeat("p", 3900)}, jetflow.Failed, 0, streams.HeaderParent},
		{"near-trace", 1, map[string]string{"traceparent": strings.Repeat("t", 3900)}, jetflow.Success, 1, ""},
		{"near-panic", 3, nil, jetflow.Failed, 1, jetflow.ErrPanic.Error()},
		{"near-error", 4, nil, jetflow.Failed, 1, "eeee"},
		{"near-retried", 5, nil, jetflow.Failed, 3, "rrrr"},
	}
	for _, c := range cases {
		publishRaw(t, e, c.id, c.hdr, body(c.n))
	}
	for _, c := range cases {
		r := e.waitState(t, c.id, c.state)
		if !strings.Contains(r.Error, c.want) {
			t.Errorf("%s: error %.200q, want it to name %q", c.id, r.Error, c.want)
		}
		if n := ran.of(c.id); n != c.ran {
			t.Errorf("%s: the handler ran %d times, want %d", c.id, n, c.ran)
		}
	}
	waitQueueEmpty(t, e)
}

// Entries written into the delayed bucket by another client (the wire
// format documents them) that name no valid function or run, or another
// run than their key, or are no JSON: each is recorded as a failed run with
// the reason and removed, once its second comes, and nothing is published
// for it. Before, they were retried every 250 ms for ever, or published on
// a subject no worker reads.
func TestBadDelayedEntriesAreDeadLettered(t *testing.T) {
	t.Parallel()
	e, ran := hostileEnv(t)
	ctx := context.Background()
	scfg := streams.Config{}.WithDefaults()
	due := time.Now().Add(500 * time.Millisecond).UTC()
	d := due.Format(time.RFC3339Nano)
	entries := map[string]string{
		"wild":    `{"fn":"hostile.>","id":"wild","new":true,"due":"` + d + `","args":{"n":1}}`,
		"nofn":    `{"fn":"","id":"nofn","new":true,"due":"` + d + `","args":{"n":1}}`,
		"badid":   `{"fn":"hostile.rec","id":"bad id!","new":true,"due":"` + d + `","args":{"n":1}}`,
		"other":   `{"fn":"hostile.rec","id":"someone-else","new":true,"due":"` + d + `","args":{"n":1}}`,
		"garbage": `{"fn":`,
		"good":    `{"fn":"hostile.rec","id":"good","new":true,"due":"` + d + `","args":{"n":1}}`,
	}
	for key, body := range entries {
		m := nats.NewMsg(streams.KVSubject(scfg.DelayedBucket(), fmt.Sprintf("%d.%s", due.Unix(), key)))
		m.Data = []byte(body)
		if _, err := e.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	e.wait(t, "good")
	dkv, err := e.JS.KeyValue(ctx, scfg.DelayedBucket())
	if err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 20*time.Second, "every delayed entry removed", func() bool {
		keys, err := dkv.ListKeys(ctx)
		if err != nil {
			return false
		}
		n := 0
		for range keys.Keys() {
			n++
		}
		return n == 0
	})
	page, err := e.P.List(ctx, producer.Filter{State: jetflow.Failed})
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]string{}
	for _, r := range page.Runs {
		failed[r.ID] = r.Error
	}
	// Entries naming a valid run of their key take its id; the others a
	// dead-letter id.
	for _, id := range []string{"wild", "nofn"} {
		if !strings.Contains(failed[id], jetflow.ErrInvalidName.Error()) {
			t.Errorf("%s: %q, want a failed run naming the invalid function", id, failed[id])
		}
	}
	letters := 0
	for id, why := range failed {
		if strings.HasPrefix(id, "dlq-") {
			letters++
			if !strings.Contains(why, jetflow.ErrBadMessage.Error()) {
				t.Errorf("%s: %q", id, why)
			}
		}
	}
	if letters != 3 { // badid, other, garbage
		t.Errorf("%d dead letters under dlq ids, want 3: %v", letters, failed)
	}
	if n := ran.of("good"); n != 1 {
		t.Errorf("the good entry's run ran %d times", n)
	}
	if n := ran.of("someone-else"); n != 0 {
		t.Errorf("an entry under another run's key ran %d times", n)
	}
	waitQueueEmpty(t, e)
}
