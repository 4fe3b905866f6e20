package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// What a hostile message must become.
type hostileExpect int

const (
	// expectFailed: a failed record whose error holds want (or refused at
	// publish).
	expectFailed hostileExpect = iota
	// expectEnded: a terminal record, success or failed with an error (the
	// message is odd but usable).
	expectEnded
	// expectSuccess: a valid run.
	expectSuccess
	// expectUnserved: a subject with extra tokens names another function
	// (the function is every token up to the last dot); none is served, so
	// the documented outcome is that it waits in the stream (Get answers
	// pending from it) unless it is refused or recorded as failed.
	expectUnserved
	// expectFailedOrDiscarded: a numeric Jetflow-Rev naming no record; the
	// wire format says the worker then discards the outcome.
	expectFailedOrDiscarded
)

type hostileMsg struct {
	kind   string
	msg    *nats.Msg
	runID  string // the subject's run id, "" if the subject has none
	fn     string // the subject's function
	expect hostileExpect
	want   string // expectFailed: the error names this

	refused error
	seq     uint64
	outcome string // how it was resolved; "" while open
}

var statsLine = regexp.MustCompile(`^STATS heap=(\d+) goroutines=(\d+)$`)

// workerStats asks a worker process for a STATS line (SIGUSR1) and returns
// its heap bytes and goroutines.
func workerStats(t *testing.T, w *proc) (heap, goroutines int) {
	t.Helper()
	before := 0
	for _, l := range w.snapshot() {
		if statsLine.MatchString(l) {
			before++
		}
	}
	w.signal(syscall.SIGUSR1)
	seen := 0
	l := w.waitLine(30*time.Second, func(l string) bool {
		if !statsLine.MatchString(l) {
			return false
		}
		seen++
		return seen > before
	})
	m := statsLine.FindStringSubmatch(l)
	heap, _ = strconv.Atoi(m[1])
	goroutines, _ = strconv.Atoi(m[2])
	return heap, goroutines
}

// hostileMessages builds n messages on the function stream's subjects of
// function fn: binary and non-UTF-8 bodies of every size up to max bytes,
// subjects with tokens missing or extra, unreadable and conflicting
// headers, and valid runs mixed in.
func hostileMessages(n int, fn string, maxBody int) []*hostileMsg {
	rng := rand.New(rand.NewPCG(8, 8))
	var out []*hostileMsg
	add := func(kind, subject string, hdr nats.Header, body []byte, expect hostileExpect, want string) {
		i := len(out)
		id := fmt.Sprintf("h-%d", i)
		subject = strings.ReplaceAll(subject, "{id}", id)
		subject = strings.ReplaceAll(subject, "{i}", strconv.Itoa(i))
		m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: body}
		for k, vs := range hdr {
			for _, v := range vs {
				m.Header[k] = append(m.Header[k], strings.ReplaceAll(v, "{id}", id))
			}
		}
		scfg := streams.Config{}.WithDefaults()
		f, rid, _ := scfg.ParseFunctionSubject(subject)
		out = append(out, &hostileMsg{kind: kind, msg: m, runID: rid, fn: f, expect: expect, want: want})
	}
	subj := "jetflow.fn." + fn + ".{id}"
	msgID := nats.Header{"Nats-Msg-Id": {"{id}"}}
	binary := func(size int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		if size > 0 {
			b[0] = 0xff // never JSON, never UTF-8
		}
		return b
	}

	// Binary bodies: 1 byte to the max payload, every power of two and its
	// neighbours, 512 KB, 768 KB, about 1 MB, and random sizes below 64 KB.
	sizes := []int{}
	for p := 1; p <= maxBody; p *= 2 {
		for _, s := range []int{p - 1, p, p + 1} {
			if s >= 1 && s <= maxBody {
				sizes = append(sizes, s)
			}
		}
	}
	sizes = append(sizes, 512<<10, 768<<10, maxBody-4096, maxBody)
	for len(sizes) < 200 {
		sizes = append(sizes, 1+rng.IntN(64<<10))
	}
	for _, s := range sizes {
		// "bad arguments", or "bad message" for a body too large for a record.
		add(fmt.Sprintf("binary-%d", s), subj, msgID, binary(s), expectFailed, "jetflow: bad ")
	}
	// Invalid UTF-8: text that is not JSON, strings of the wrong type, and
	// an extra field (JSON that decodes, so the run may succeed).
	bad := []string{"\xff", "\xfe\xff", "\xc3\x28", "\xa0\xa1", "\xe2\x28\xa1", "\xe2\x82\x28", "\xf0\x28\x8c\xbc", "\xf8\xa1\xa1\xa1\xa1", "\xc0\xaf", "\xed\xa0\x80", "\xef\xbf\xbe"}
	for i := range 60 {
		s := strings.Repeat("caf"+bad[i%len(bad)]+" ", 1+rng.IntN(1000))
		add("utf8-text", subj, msgID, []byte(s), expectFailed, "bad arguments")
	}
	for i := range 30 {
		add("utf8-wrong-type", subj, msgID, []byte(`{"n":"`+bad[i%len(bad)]+`"}`), expectFailed, "bad arguments")
	}
	for i := range 30 {
		add("utf8-extra-field", subj, msgID, []byte(`{"n":1,"s":"`+bad[i%len(bad)]+`"}`), expectEnded, "")
	}
	// Subjects missing tokens: no run id and no function, or nothing after
	// fn (refused at publish or a failed record); the function's name
	// without a run id, which reads as run <last token> of a shorter
	// function nobody serves (as extra tokens below).
	for i := range 20 {
		switch i % 4 {
		case 0, 1:
			add("missing-token", "jetflow.fn."+strings.Split(fn, ".")[0], nil, []byte(`{"n":1}`), expectFailed, "bad message")
		case 2:
			add("missing-token", "jetflow.fn", nil, []byte(`{"n":1}`), expectFailed, "bad message")
		case 3:
			add("name-without-id", "jetflow.fn."+fn, nil, []byte(`{"n":1}`), expectUnserved, "")
		}
	}
	// Extra tokens.
	for i := range 40 {
		subject := subj + ".x-{i}"
		if i%4 == 3 {
			subject = subj + ".a.b.c-{i}"
		}
		add("extra-token", subject, nil, []byte(`{"n":1}`), expectUnserved, "")
	}
	// Unreadable and conflicting headers.
	type hcase struct {
		kind   string
		hdr    nats.Header
		expect hostileExpect
		want   string
	}
	with := func(kv ...string) nats.Header {
		h := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			h[kv[i]] = append(h[kv[i]], kv[i+1])
		}
		return h
	}
	cases := []hcase{
		// A retry published by another producer (the wire format accepts
		// the run id as its Nats-Msg-Id): run, or refused with a reason.
		{"attempt-3-msgid-run", with("Jetflow-Attempt", "3", "Nats-Msg-Id", "{id}"), expectEnded, ""},
		{"attempt-0", with("Jetflow-Attempt", "0", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Attempt"},
		{"attempt-negative", with("Jetflow-Attempt", "-1", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Attempt"},
		{"attempt-text", with("Jetflow-Attempt", "three", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Attempt"},
		{"attempt-overflow", with("Jetflow-Attempt", "99999999999999999999", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Attempt"},
		{"max-attempts-0", with("Jetflow-Max-Attempts", "0", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Max-Attempts"},
		{"max-attempts-text", with("Jetflow-Max-Attempts", "x", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Max-Attempts"},
		{"timeout-negative", with("Jetflow-Timeout", "-1s", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Timeout"},
		{"timeout-zero", with("Jetflow-Timeout", "0s", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Timeout"},
		{"timeout-text", with("Jetflow-Timeout", "soon", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Timeout"},
		{"rev-text", with("Jetflow-Rev", "zzz", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Rev"},
		{"rev-negative", with("Jetflow-Rev", "-1", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Rev"},
		{"rev-overflow", with("Jetflow-Rev", "18446744073709551616", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Rev"},
		{"rev-wrong", with("Jetflow-Rev", "987654321", "Nats-Msg-Id", "{id}"), expectEnded, ""},
		{"scheduled-text", with("Jetflow-Scheduled", "yesterday", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Scheduled"},
		{"created-invalid", with("Jetflow-Created", "2026-13-45T99:99:99Z", "Nats-Msg-Id", "{id}"), expectFailed, "Jetflow-Created"},
		{"msgid-other-run", with("Nats-Msg-Id", "someone-else-{id}"), expectFailed, "Nats-Msg-Id"},
		{"msgid-attempt-mismatch", with("Nats-Msg-Id", "{id}/2"), expectFailed, "Nats-Msg-Id"},
		{"attempt-twice", with("Jetflow-Attempt", "2", "Jetflow-Attempt", "x"), expectEnded, ""},
		{"parent-invalid", with("Jetflow-Parent", "not a run id!", "Nats-Msg-Id", "{id}"), expectEnded, ""},
		{"parent-16k", with("Jetflow-Parent", strings.Repeat("p", 16<<10), "Nats-Msg-Id", "{id}"), expectEnded, ""},
		{"traceparent-garbage", with("traceparent", "\x01garbage", "Nats-Msg-Id", "{id}"), expectEnded, ""},
		{"new-attempt-2", with("Jetflow-New", "1", "Jetflow-Attempt", "2", "Nats-Msg-Id", "{id}/2"), expectEnded, ""},
		{"timeout-1ns", with("Jetflow-Timeout", "1ns", "Nats-Msg-Id", "{id}"), expectEnded, ""},
		{"reload-garbage", with("Jetflow-Reload", "\xff", "Nats-Msg-Id", "{id}"), expectEnded, ""},
		{"max-attempts-huge", with("Jetflow-Max-Attempts", "2147483647", "Nats-Msg-Id", "{id}"), expectEnded, ""},
		{"scheduled-far-future", with("Jetflow-Scheduled", "9999-12-31T23:59:59Z", "Nats-Msg-Id", "{id}"), expectEnded, ""},
	}
	for i := range 270 {
		c := cases[i%len(cases)]
		add("header-"+c.kind, subj, c.hdr, []byte(`{"n":1}`), c.expect, c.want)
	}
	// Empty bodies (JSON null: the zero value) and valid runs, mixed in.
	for range 20 {
		add("empty-body", subj, msgID, nil, expectSuccess, "")
	}
	for len(out) < n {
		add("valid", subj, msgID, []byte(`{"n":7}`), expectSuccess, "")
	}
	// Valid runs interleaved with the rest.
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// (d) 1000 hostile messages published with a plain JetStream client on the
// function stream's subjects, valid runs mixed in: each one is refused at
// publish or ends as a failed record naming the reason within 30 s, valid
// runs succeed, the stream ends empty, and the worker's heap and goroutines
// stay flat.
func TestFaultHostileMessages(t *testing.T) {
	t.Parallel()
	began := time.Now()
	const fnName = "ft.hostile"
	srv := startNATS(t)
	scfg := streams.Config{}.WithDefaults()
	e := newLoadEnv(t, srv.url(), scfg)
	nc, js := connect(t, srv.url())
	w := startProc(t, "worker", "--url", srv.url(), "--role", "worker", "--id", "w1", "--function", fnName, "--ledger", e.ledger)

	// Warm up, then the baseline.
	ctx := context.Background()
	var warm []string
	for i := range 50 {
		id := fmt.Sprintf("warm-%d", i)
		m := &nats.Msg{Subject: scfg.FunctionSubject(fnName, id), Header: nats.Header{"Nats-Msg-Id": {id}}, Data: []byte(`{"n":1}`)}
		retry(t, 30*time.Second, "publish "+id, func(ctx context.Context) error { _, err := js.PublishMsg(ctx, m); return err })
		warm = append(warm, id)
	}
	if _, notDone := records(t, e.p, e.runs, warm, 60*time.Second); len(notDone) > 0 {
		t.Fatalf("warm-up runs not done: %v", notDone)
	}
	heap0, gr0 := workerStats(t, w)

	maxBody := int(nc.MaxPayload()) - 1024 // room for the headers
	msgs := hostileMessages(1000, fnName, maxBody)
	for _, m := range msgs {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ack, err := js.PublishMsg(pctx, m.msg)
		cancel()
		if err != nil {
			m.refused = err
			m.outcome = "refused"
			continue
		}
		m.seq = ack.Sequence
	}
	published := time.Now()

	ledger := func() map[string]int {
		n := map[string]int{}
		for _, l := range readLedger(t, e.ledger) {
			n[l.id]++
		}
		return n
	}
	get := func(id string) (*jetflow.Run, error) {
		if jetflow.ValidateRunID(id) != nil {
			return nil, jetflow.ErrNotFound
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return e.p.Get(ctx, id)
	}
	var wrong []string
	resolve := func(m *hostileMsg, ran map[string]int) {
		// The record: under dlq-<stream>-<seq> when the subject or the
		// Nats-Msg-Id names no usable run, else under the run id.
		var r *jetflow.Run
		for _, id := range []string{fmt.Sprintf("dlq-%s-%d", scfg.FunctionStream(), m.seq), m.runID} {
			if got, err := get(id); err == nil && (got.State.Terminal() || r == nil) {
				r = got
				if r.State.Terminal() {
					break
				}
			}
		}
		terminal := r != nil && r.State.Terminal()
		switch m.expect {
		case expectFailed, expectFailedOrDiscarded:
			if terminal && r.State == jetflow.Failed && r.Error != "" && strings.Contains(r.Error, m.want) {
				m.outcome = "failed"
			} else if terminal {
				m.outcome = "wrong"
				wrong = append(wrong, fmt.Sprintf("%s: %s %q", m.kind, r.State, r.Error))
			} else if m.expect == expectFailedOrDiscarded && r == nil && ran[m.runID] > 0 {
				m.outcome = "discarded" // ran, outcome discarded, message gone
			}
		case expectEnded:
			if terminal && (r.State == jetflow.Success || r.State == jetflow.Failed && r.Error != "") {
				m.outcome = "ended"
			} else if terminal {
				m.outcome = "wrong"
				wrong = append(wrong, fmt.Sprintf("%s: %s %q", m.kind, r.State, r.Error))
			}
		case expectSuccess:
			if terminal && r.State == jetflow.Success && (len(m.msg.Data) > 0 || string(r.Args) == "null") {
				m.outcome = "success"
			} else if terminal {
				m.outcome = "wrong"
				wrong = append(wrong, fmt.Sprintf("%s: %s %q args %.40s", m.kind, r.State, r.Error, r.Args))
			}
		case expectUnserved:
			if terminal && r.State == jetflow.Failed && r.Error != "" {
				m.outcome = "failed"
			} else if terminal {
				m.outcome = "wrong"
				wrong = append(wrong, fmt.Sprintf("%s: %s %q", m.kind, r.State, r.Error))
			} else if r != nil && r.State == jetflow.Pending && r.Name == m.fn {
				m.outcome = "waiting"
			}
		}
	}
	deadline := published.Add(30 * time.Second)
	for {
		open := 0
		ran := ledger()
		for _, m := range msgs {
			if m.outcome == "" {
				resolve(m, ran)
				if m.outcome == "" {
					open++
				}
			}
		}
		if open == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	settled := time.Since(published)

	// The stream ends empty, but for the documented wait of runs of
	// functions nobody serves.
	waiting := map[string]bool{}
	for _, m := range msgs {
		if m.outcome == "waiting" {
			waiting[m.msg.Subject] = true
		}
	}
	var left, leftWaiting uint64
	leftSubjects := map[string]uint64{}
	retry(t, 30*time.Second, "function stream drained", func(ctx context.Context) error {
		s, err := js.Stream(ctx, scfg.FunctionStream())
		if err != nil {
			return err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("jetflow.fn.>"))
		if err != nil {
			return err
		}
		left, leftWaiting, leftSubjects = info.State.Msgs, 0, info.State.Subjects
		for s, n := range info.State.Subjects {
			if waiting[s] {
				leftWaiting += n
			}
		}
		if left > leftWaiting && time.Since(published) < 40*time.Second {
			return fmt.Errorf("%d messages left", left-leftWaiting)
		}
		return nil
	})
	heap1, gr1 := workerStats(t, w)

	count := map[string]int{}
	open := map[string]int{}
	for _, m := range msgs {
		count[m.outcome]++
		if m.outcome == "" {
			open[m.kind]++
		}
	}
	f := newFigures()
	f.set("sent", len(msgs))
	f.set("refused", count["refused"])
	f.set("failed_with_reason", count["failed"])
	f.set("ended", count["ended"])
	f.set("valid_ok", count["success"])
	f.set("discarded", count["discarded"])
	f.set("waiting_unserved", count["waiting"])
	f.set("wrong", count["wrong"])
	f.set("unresolved", count[""])
	f.set("left_in_stream", left-leftWaiting)
	f.set("settled", settled)
	f.set("heap_mb", fmt.Sprintf("%.1f->%.1f", float64(heap0)/(1<<20), float64(heap1)/(1<<20)))
	f.set("goroutines", fmt.Sprintf("%d->%d", gr0, gr1))
	f.set("wall", time.Since(began))
	f.print(t, "d hostile")

	if count[""] > 0 {
		t.Errorf("%d accepted messages neither failed with a reason nor ended within 30 s, by kind: %v", count[""], open)
	}
	if len(wrong) > 0 {
		byKind := map[string]int{}
		for _, m := range msgs {
			if m.outcome == "wrong" {
				byKind[m.kind]++
			}
		}
		t.Errorf("%d messages ended wrong (by kind: %v), e.g. %v", len(wrong), byKind, wrong[:min(5, len(wrong))])
	}
	if left > leftWaiting {
		var eg []string
		for s, n := range leftSubjects {
			if !waiting[s] && len(eg) < 5 {
				eg = append(eg, fmt.Sprintf("%s(%d)", s, n))
			}
		}
		t.Errorf("%d messages left in the function stream, e.g. %v", left-leftWaiting, eg)
	}
	if heap1 > 2*heap0+32<<20 {
		t.Errorf("worker heap grew from %d to %d bytes", heap0, heap1)
	}
	if gr1 > gr0+25 {
		t.Errorf("worker goroutines grew from %d to %d", gr0, gr1)
	}
	alive(t, w)
}
