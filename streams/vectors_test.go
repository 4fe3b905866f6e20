package streams_test

// The shared wire-format vectors (testdata/vectors, README.md there) run
// against the Go producer on a real server: what it writes for each
// operation, captured from the server, must be exactly what produce.json
// says; what it decodes, what decode.json says; what it accepts and
// refuses, what limits.json says. The clients in other languages run the
// same files.
//
// JETFLOW_VECTORS_UPDATE=1 rewrites the outputs of produce.json (result,
// writes, and the setup of a vector with setupFrom) from what the Go
// producer does: review the diff, it changes the wire format of every
// client.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
)

const vectorsDir = "testdata/vectors"

type produceFile struct {
	Format     int             `json:"format"`
	Prefix     string          `json:"prefix"`
	MaxPayload int64           `json:"maxPayload"`
	Retention  string          `json:"retention"`
	Vectors    []produceVector `json:"vectors"`
}

type produceVector struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	Now          string          `json:"now"`
	GeneratedIDs []string        `json:"generatedIds"`
	SetupFrom    string          `json:"setupFrom,omitempty"`
	Setup        []write         `json:"setup"`
	Op           json.RawMessage `json:"op"`
	Result       result          `json:"result"`
	Writes       []write         `json:"writes"`
}

type result struct {
	ID    string   `json:"id,omitempty"`
	IDs   []string `json:"ids,omitempty"`
	Error string   `json:"error,omitempty"`
}

type write struct {
	Kind     string            `json:"kind"`
	Subject  string            `json:"subject"`
	Bucket   string            `json:"bucket,omitempty"`
	Key      string            `json:"key,omitempty"`
	Headers  map[string]string `json:"headers"`
	BodyText string            `json:"bodyText"`
	Body     json.RawMessage   `json:"body,omitempty"`
	Ack      json.RawMessage   `json:"ack,omitempty"`
}

type op struct {
	Type     string          `json:"type"`
	Function string          `json:"function"`
	Args     json.RawMessage `json:"args"`
	Options  runOptions      `json:"options"`
	Delay    string          `json:"delay"`
	At       string          `json:"at"`
	Items    []struct {
		Function string          `json:"function"`
		Args     json.RawMessage `json:"args"`
		At       string          `json:"at"`
		Options  runOptions      `json:"options"`
	} `json:"items"`
	ID         string          `json:"id"`
	Workflow   string          `json:"workflow"`
	Input      json.RawMessage `json:"input"`
	WorkflowID string          `json:"workflowId"`
	Event      string          `json:"event"`
	Payload    json.RawMessage `json:"payload"`
}

type runOptions struct {
	ID          string `json:"id"`
	MaxAttempts int    `json:"maxAttempts"`
	Timeout     string `json:"timeout"`
	Parent      string `json:"parent"`
	At          string `json:"at"`
	After       string `json:"after"`
}

// errorKinds maps the vectors' error kinds to Go's sentinels, the most
// specific first (limits.json lists them too).
var errorKinds = []struct {
	kind   string
	err    error
	goName string
}{
	{"alreadyExists", producer.ErrAlreadyExists, "producer.ErrAlreadyExists"},
	{"tooManyRuns", producer.ErrTooManyRuns, "producer.ErrTooManyRuns"},
	{"argsTooLarge", producer.ErrArgsTooLarge, "producer.ErrArgsTooLarge"},
	{"invalidEventName", producer.ErrInvalidEventName, "producer.ErrInvalidEventName"},
	{"notWorkflow", producer.ErrNotWorkflow, "producer.ErrNotWorkflow"},
	{"workflowEnded", producer.ErrWorkflowEnded, "producer.ErrWorkflowEnded"},
	{"invalidName", jetflow.ErrInvalidName, "jetflow.ErrInvalidName"},
	{"invalidRunId", jetflow.ErrInvalidRunID, "jetflow.ErrInvalidRunID"},
	{"badArgs", jetflow.ErrBadArgs, "jetflow.ErrBadArgs"},
	{"notFound", jetflow.ErrNotFound, "jetflow.ErrNotFound"},
	{"badRecord", jetflow.ErrBadRecord, "jetflow.ErrBadRecord"},
}

func errorKind(err error) string {
	if err == nil {
		return ""
	}
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return "unexpected: " + err.Error()
}

func updating() bool { return os.Getenv("JETFLOW_VECTORS_UPDATE") == "1" }

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func writeJSON(t *testing.T, name string, v any) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vectorsDir, name), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVectorsProduce runs every vector of produce.json against the Go
// producer on a fresh server each and compares what it writes.
func TestVectorsProduce(t *testing.T) {
	var f produceFile
	readJSON(t, "produce.json", &f)
	if f.Format != 1 || f.Prefix != "jetflow" || f.MaxPayload != 8<<20 || f.Retention != (7*24*time.Hour).String() {
		t.Fatalf("produce.json header: format %d prefix %q maxPayload %d retention %q", f.Format, f.Prefix, f.MaxPayload, f.Retention)
	}
	byName := map[string]*produceVector{}
	for i := range f.Vectors {
		v := &f.Vectors[i]
		if byName[v.Name] != nil {
			t.Fatalf("vector %s twice", v.Name)
		}
		if v.SetupFrom != "" {
			from := byName[v.SetupFrom]
			if from == nil {
				t.Fatalf("vector %s: setupFrom %s: no earlier vector of that name", v.Name, v.SetupFrom)
			}
			if updating() {
				v.Setup = from.Writes
			} else if !reflect.DeepEqual(v.Setup, from.Writes) {
				t.Errorf("vector %s: setup is not the writes of %s", v.Name, v.SetupFrom)
			}
		}
		byName[v.Name] = v
		t.Run(v.Name, func(t *testing.T) {
			got, writes := runProduce(t, v)
			if updating() {
				v.Result, v.Writes = got, writes
				return
			}
			if !reflect.DeepEqual(got, v.Result) {
				t.Errorf("result: got %s, vector has %s", mustJSON(got), mustJSON(v.Result))
			}
			compareWrites(t, writes, v.Writes)
		})
	}
	if updating() && !t.Failed() {
		writeJSON(t, "produce.json", f)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// runProduce runs v's operation on a fresh server and returns its result and
// its writes, generated ids replaced by v's.
func runProduce(t *testing.T, v *produceVector) (result, []write) {
	now, err := time.Parse(time.RFC3339Nano, v.Now)
	if err != nil {
		t.Fatalf("now: %v", err)
	}
	ts := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := producer.New(ctx, ts.JS, producer.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range v.Setup {
		replay(t, ts.NC, i, w)
	}
	capNC, _ := ts.Connect()
	cp := startCapture(t, capNC)

	var o op
	dec := json.NewDecoder(bytes.NewReader(v.Op))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		t.Fatalf("op: %v", err)
	}
	var res result
	switch o.Type {
	case "enqueue":
		res.ID, err = p.Enqueue(ctx, call(t, o.Function, o.Args), o.Options.producer(t)...)
	case "runAfter":
		res.ID, err = p.RunAfter(ctx, duration(t, o.Delay), call(t, o.Function, o.Args), o.Options.producer(t)...)
	case "runAt":
		res.ID, err = p.RunAt(ctx, instant(t, o.At), call(t, o.Function, o.Args), o.Options.producer(t)...)
	case "batch":
		items := make([]producer.Item, len(o.Items))
		for i, it := range o.Items {
			items[i] = producer.Item{Call: call(t, it.Function, it.Args), Options: it.Options.producer(t)}
			if it.At != "" {
				items[i].At = instant(t, it.At)
			}
		}
		res.IDs, err = p.Batch(ctx, items)
	case "cancel":
		err = p.Cancel(ctx, o.ID)
	case "startWorkflow":
		def := workflow.Define(o.Workflow, func(*workflow.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil })
		var opts []workflow.StartOption
		if o.Options.ID != "" {
			opts = append(opts, workflow.WithID(o.Options.ID))
		}
		if o.Options.At != "" {
			opts = append(opts, workflow.At(instant(t, o.Options.At)))
		}
		if o.Options.After != "" {
			opts = append(opts, workflow.After(duration(t, o.Options.After)))
		}
		res.ID, err = workflow.Start(ctx, p, def, compact(t, o.Input), opts...)
	case "sendEvent":
		err = p.SendEvent(ctx, o.WorkflowID, o.Event, compact(t, o.Payload))
	default:
		t.Fatalf("op type %q", o.Type)
	}
	res.Error = errorKind(err)
	if strings.HasPrefix(res.Error, "unexpected") {
		t.Fatalf("%s: %v", o.Type, err)
	}
	if err := ts.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	writes := cp.stop(t)

	// Generated ids: the run ids the call returned, in order, then the
	// other nuids in the order they appear.
	known := []string{o.ID, o.Options.ID, o.WorkflowID, o.Options.Parent}
	for _, it := range o.Items {
		known = append(known, it.Options.ID)
	}
	var gen []string
	for _, id := range append([]string{res.ID}, res.IDs...) {
		if id != "" && !slices.Contains(known, id) && !slices.Contains(gen, id) {
			gen = append(gen, id)
		}
	}
	for _, w := range writes {
		texts := []string{w.Subject}
		for _, k := range slices.Sorted(maps.Keys(w.Headers)) {
			texts = append(texts, w.Headers[k])
		}
		texts = append(texts, w.BodyText)
		for _, s := range texts {
			for _, m := range nuidRE.FindAllStringSubmatch(s, -1) {
				if !slices.Contains(gen, m[1]) {
					gen = append(gen, m[1])
				}
			}
		}
	}
	if len(gen) != len(v.GeneratedIDs) {
		t.Fatalf("the producer generated %d ids (%v), the vector has %d generatedIds", len(gen), gen, len(v.GeneratedIDs))
	}
	pairs := make([]string, 0, 2*len(gen))
	for i, g := range gen {
		pairs = append(pairs, g, v.GeneratedIDs[i])
	}
	r := strings.NewReplacer(pairs...)
	res.ID = r.Replace(res.ID)
	for i := range res.IDs {
		res.IDs[i] = r.Replace(res.IDs[i])
	}
	for i := range writes {
		w := &writes[i]
		w.Subject, w.Key, w.BodyText = r.Replace(w.Subject), r.Replace(w.Key), r.Replace(w.BodyText)
		for k, hv := range w.Headers {
			w.Headers[k] = r.Replace(hv)
		}
		if w.Body != nil {
			w.Body = json.RawMessage(r.Replace(string(w.Body)))
		}
		if w.Ack != nil {
			w.Ack = json.RawMessage(r.Replace(string(w.Ack)))
		}
	}
	return res, writes
}

// nuidRE finds a nuid (22 characters of [0-9A-Za-z]) as a whole token.
var nuidRE = regexp.MustCompile(`(?:^|[^0-9A-Za-z])([0-9A-Za-z]{22})(?:$|[^0-9A-Za-z])`)

func call(t *testing.T, fn string, args json.RawMessage) jetflow.Call {
	return jetflow.RawCall(fn, compact(t, args))
}

// compact is a JSON value of the vectors as a client's serializer writes it:
// the text as given, whitespace removed.
func compact(t *testing.T, raw json.RawMessage) json.RawMessage {
	t.Helper()
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func duration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func instant(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

func (o runOptions) producer(t *testing.T) []producer.Option {
	var opts []producer.Option
	if o.ID != "" {
		opts = append(opts, producer.WithID(o.ID))
	}
	if o.MaxAttempts != 0 {
		opts = append(opts, producer.WithMaxAttempts(o.MaxAttempts))
	}
	if o.Timeout != "" {
		opts = append(opts, producer.WithTimeout(duration(t, o.Timeout)))
	}
	if o.Parent != "" {
		opts = append(opts, producer.WithParent(o.Parent))
	}
	return opts
}

// replay makes setup write w on the server and checks its ack.
func replay(t *testing.T, nc *nats.Conn, i int, w write) {
	t.Helper()
	m := &nats.Msg{Subject: w.Subject, Header: nats.Header{}, Data: []byte(w.BodyText)}
	for k, v := range w.Headers {
		m.Header[k] = []string{v}
	}
	if w.Ack == nil {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatalf("setup %d: %v", i, err)
		}
		return
	}
	reply, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatalf("setup %d: %v", i, err)
	}
	if !jsonEqual(reply.Data, w.Ack) {
		t.Fatalf("setup %d: ack %s, vector has %s", i, reply.Data, w.Ack)
	}
}

// capture records what the producer sends: every message on a subject of
// jetflow's (function stream, cancel notices, KV buckets) and every purge,
// with the replies (acks) to them.
// A synchronous subscription: the connection's reader queues each message
// before it reads the reply to a later flush, so after a flush every message
// sent before it is pending.
type capture struct {
	nc  *nats.Conn
	sub *nats.Subscription
}

func startCapture(t *testing.T, nc *nats.Conn) *capture {
	c := &capture{nc: nc}
	sub, err := nc.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	c.sub = sub
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

func kept(subject string) bool {
	return strings.HasPrefix(subject, "jetflow.") || strings.HasPrefix(subject, "$KV.") ||
		strings.HasPrefix(subject, "$JS.API.STREAM.PURGE.")
}

func (c *capture) stop(t *testing.T) []write {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.sub.Unsubscribe() }()
	out := []write{}
	waiting := map[string]int{}     // reply subject -> write
	early := map[string]*nats.Msg{} // replies seen before their request
	reply := func(i int, m *nats.Msg) {
		if out[i].Kind == "publish" {
			out[i].Ack = normJSON(t, m.Data)
		}
	}
	add := func(m *nats.Msg) {
		if i, ok := waiting[m.Subject]; ok {
			delete(waiting, m.Subject)
			reply(i, m)
			return
		}
		if !kept(m.Subject) {
			// Maybe a reply that overtook its request: JetStream's ack
			// is sent from another goroutine than the one that hands the
			// request to each subscriber.
			early[m.Subject] = m
			return
		}
		w := write{Subject: m.Subject, Headers: map[string]string{}, BodyText: string(m.Data)}
		switch {
		case m.Subject == "jetflow.cancel":
			w.Kind = "core"
		case strings.HasPrefix(m.Subject, "$JS.API."):
			w.Kind = "request"
		default:
			w.Kind = "publish"
		}
		if rest, ok := strings.CutPrefix(m.Subject, "$KV."); ok {
			w.Bucket, w.Key, _ = strings.Cut(rest, ".")
		}
		for k, vs := range m.Header {
			if len(vs) != 1 {
				t.Fatalf("%s: header %s has %d values", m.Subject, k, len(vs))
			}
			w.Headers[k] = vs[0]
		}
		if json.Valid(m.Data) {
			w.Body = normJSON(t, m.Data)
		}
		out = append(out, w)
		if m.Reply == "" {
			return
		}
		if r, ok := early[m.Reply]; ok {
			delete(early, m.Reply)
			reply(len(out)-1, r)
			return
		}
		waiting[m.Reply] = len(out) - 1
	}
	n, _, err := c.sub.Pending()
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		m, err := c.sub.NextMsg(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		add(m)
	}
	// The server may deliver a reply to this connection a moment after the
	// producer had it (an ack goes to each subscriber in turn): every
	// request the producer made was answered, so wait for the answers.
	deadline := time.Now().Add(5 * time.Second)
	for len(waiting) > 0 {
		m, err := c.sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("replies to %d writes not seen: %v", len(waiting), err)
		}
		add(m)
	}
	return out
}

// normJSON is a JSON text compacted, so that the file's indentation does
// not count.
func normJSON(t *testing.T, b []byte) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// compareWrites fails t naming each field where got differs from want.
func compareWrites(t *testing.T, got, want []write) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		if i >= len(got) {
			t.Errorf("write %d (%s %s): the Go producer does not make it", i, want[i].Kind, want[i].Subject)
			continue
		}
		if i >= len(want) {
			t.Errorf("write %d (%s %s): made by the Go producer, not in the vector", i, got[i].Kind, got[i].Subject)
			continue
		}
		g, w := got[i], want[i]
		where := fmt.Sprintf("write %d (%s)", i, w.Subject)
		if g.Kind != w.Kind {
			t.Errorf("%s: kind %q, vector has %q", where, g.Kind, w.Kind)
		}
		if g.Subject != w.Subject || g.Bucket != w.Bucket || g.Key != w.Key {
			t.Errorf("%s: subject %q (bucket %q key %q), vector has %q (bucket %q key %q)", where, g.Subject, g.Bucket, g.Key, w.Subject, w.Bucket, w.Key)
		}
		for _, k := range slices.Sorted(maps.Keys(w.Headers)) {
			if gv, ok := g.Headers[k]; !ok {
				t.Errorf("%s: header %s missing, vector has %q", where, k, w.Headers[k])
			} else if gv != w.Headers[k] {
				t.Errorf("%s: header %s = %q, vector has %q", where, k, gv, w.Headers[k])
			}
		}
		for _, k := range slices.Sorted(maps.Keys(g.Headers)) {
			if _, ok := w.Headers[k]; !ok {
				t.Errorf("%s: header %s = %q, not in the vector", where, k, g.Headers[k])
			}
		}
		if g.BodyText != w.BodyText {
			t.Errorf("%s: bodyText\n got %s\nwant %s", where, g.BodyText, w.BodyText)
		}
		if (w.Body != nil || g.Body != nil) && !jsonEqual(g.Body, w.Body) {
			t.Errorf("%s: body %s, vector has %s", where, g.Body, w.Body)
		}
		if (w.Ack != nil || g.Ack != nil) && !jsonEqual(g.Ack, w.Ack) {
			t.Errorf("%s: ack %s, vector has %s", where, g.Ack, w.Ack)
		}
	}
}

type decodeFile struct {
	Format  int            `json:"format"`
	Vectors []decodeVector `json:"vectors"`
}

type decodeVector struct {
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Source      string            `json:"source"`
	Key         string            `json:"key,omitempty"`
	Revision    uint64            `json:"revision,omitempty"`
	Subject     string            `json:"subject,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	BodyText    string            `json:"bodyText"`
	StreamTime  string            `json:"streamTime,omitempty"`
	Expect      json.RawMessage   `json:"expect,omitempty"`
	Error       string            `json:"error,omitempty"`
}

// TestVectorsDecode decodes every record of decode.json with kv.Decode and
// reads every waiting message of it with the producer's Get, from a real
// server.
func TestVectorsDecode(t *testing.T) {
	var f decodeFile
	readJSON(t, "decode.json", &f)
	if f.Format != 1 {
		t.Fatalf("decode.json: format %d", f.Format)
	}
	ts := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fn, err := ts.JS.Stream(ctx, "JETFLOW_FN")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for i := range f.Vectors {
		v := &f.Vectors[i]
		if names[v.Name] {
			t.Fatalf("vector %s twice", v.Name)
		}
		names[v.Name] = true
		t.Run(v.Name, func(t *testing.T) {
			var r *jetflow.Run
			var err error
			stored := "" // the stream's time of a message, as streamTime is
			switch v.Source {
			case "kv":
				r, err = kv.Decode([]byte(v.BodyText), v.Revision)
			case "message":
				m := &nats.Msg{Subject: v.Subject, Header: nats.Header{}, Data: []byte(v.BodyText)}
				for k, hv := range v.Headers {
					m.Header[k] = []string{hv}
				}
				if _, err := ts.JS.PublishMsg(ctx, m); err != nil {
					t.Fatal(err)
				}
				sm, err2 := fn.GetLastMsgForSubject(ctx, v.Subject)
				if err2 != nil {
					t.Fatal(err2)
				}
				stored = sm.Time.UTC().Format(time.RFC3339Nano)
				r, err = p.Get(ctx, v.Subject[strings.LastIndexByte(v.Subject, '.')+1:])
			default:
				t.Fatalf("source %q", v.Source)
			}
			if kind := errorKind(err); kind != v.Error {
				t.Fatalf("error: got %q (%v), vector has %q", kind, err, v.Error)
			}
			if err != nil {
				return
			}
			got := decodedJSON(t, r)
			if stored != "" {
				got = json.RawMessage(strings.ReplaceAll(string(got), `"`+stored+`"`, `"`+v.StreamTime+`"`))
			}
			if updating() {
				v.Expect = got
				return
			}
			compareDecoded(t, got, v.Expect)
		})
	}
	if updating() && !t.Failed() {
		writeJSON(t, "decode.json", f)
	}
}

// decodedJSON is run r as decode.json's expect writes it: the record's
// fields, times in UTC, and its revision.
func decodedJSON(t *testing.T, r *jetflow.Run) json.RawMessage {
	t.Helper()
	c := *r
	for _, tp := range []*time.Time{&c.ScheduledTime, &c.CreationTime, &c.StartedTime, &c.Heartbeat, &c.CompletedTime} {
		*tp = tp.UTC()
	}
	if c.Progress != nil {
		pr := *c.Progress
		pr.Updated = pr.Updated.UTC()
		c.Progress = &pr
	}
	c.History = slices.Clone(c.History)
	for i := range c.History {
		c.History[i].StartedTime = c.History[i].StartedTime.UTC()
		c.History[i].CompletedTime = c.History[i].CompletedTime.UTC()
	}
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := json.Marshal(r.Revision)
	return append(append(b[:len(b)-1], `,"revision":`...), append(rev, '}')...)
}

// compareDecoded fails t naming each field where got and want differ.
func compareDecoded(t *testing.T, got, want json.RawMessage) {
	t.Helper()
	var g, w map[string]any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("expect: %v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(w)) {
		if gv, ok := g[k]; !ok {
			t.Errorf("field %s: not decoded, vector has %s", k, mustJSON(w[k]))
		} else if !reflect.DeepEqual(gv, w[k]) {
			t.Errorf("field %s: decoded %s, vector has %s", k, mustJSON(gv), mustJSON(w[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(g)) {
		if _, ok := w[k]; !ok {
			t.Errorf("field %s: decoded %s, not in the vector", k, mustJSON(g[k]))
		}
	}
}

type limitsFile struct {
	Format        int          `json:"format"`
	MaxBatch      int          `json:"maxBatch"`
	MaxBatchArgs  int          `json:"maxBatchArgs"`
	RecordRoom    int          `json:"recordRoom"`
	FunctionNames []limitValue `json:"functionNames"`
	RunIDs        []limitValue `json:"runIds"`
	EventNames    []limitValue `json:"eventNames"`
	Args          []limitArgs  `json:"args"`
	Batches       []limitBatch `json:"batches"`
	EventRoom     int          `json:"eventRoom"`
	Events        []struct {
		MaxPayload   int32         `json:"maxPayload"`
		PayloadBytes int           `json:"payloadBytes"`
		Error        string        `json:"error"`
		Offload      *limitOffload `json:"offload,omitempty"`
	} `json:"events"`
	WorkflowInputs []struct {
		MaxPayload int32         `json:"maxPayload"`
		ID         string        `json:"id"`
		Now        string        `json:"now"`
		InputBytes int           `json:"inputBytes"`
		Error      string        `json:"error,omitempty"`
		Offload    *limitOffload `json:"offload,omitempty"`
	} `json:"workflowInputs"`
	ErrorKinds map[string]string `json:"errorKinds"`
}

type limitValue struct {
	Value json.RawMessage `json:"value"` // a string, or {"prefix", "repeat", "times"}
	Valid bool            `json:"valid,omitempty"`
	Error string          `json:"error,omitempty"`
}

func (v limitValue) text(t *testing.T) string {
	t.Helper()
	var s string
	if json.Unmarshal(v.Value, &s) == nil {
		return s
	}
	var r struct {
		Prefix string `json:"prefix"`
		Repeat string `json:"repeat"`
		Times  int    `json:"times"`
	}
	if err := json.Unmarshal(v.Value, &r); err != nil || r.Repeat == "" || r.Times <= 0 {
		t.Fatalf("value %s: neither a string nor a repeat", v.Value)
	}
	return r.Prefix + strings.Repeat(r.Repeat, r.Times)
}

type limitArgs struct {
	MaxPayload int32         `json:"maxPayload"`
	ArgsBytes  int           `json:"argsBytes"`
	Error      string        `json:"error,omitempty"`
	Offload    *limitOffload `json:"offload,omitempty"`
}

type limitBatch struct {
	MaxPayload    int32         `json:"maxPayload"`
	Items         int           `json:"items"`
	ArgsBytesEach int           `json:"argsBytesEach"`
	Error         string        `json:"error,omitempty"`
	Offload       *limitOffload `json:"offload,omitempty"`
}

// limitOffload is what a producer that keeps large payloads in the
// payloads bucket (docs/wire-format.md, "Large payloads"), as the Go one
// does, answers where it differs from the entry's error.
type limitOffload struct {
	Error string `json:"error,omitempty"`
}

// goError is the error kind the Go producer answers: off's where an entry
// has one, err otherwise.
func goError(err string, off *limitOffload) string {
	if off != nil {
		return off.Error
	}
	return err
}

// argsOf is args that encode to n bytes: a JSON string of n-2 'a's.
func argsOf(n int) json.RawMessage {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
	}
	b[0], b[n-1] = '"', '"'
	return b
}

// TestVectorsLimits checks limits.json against jetflow.ValidateName,
// jetflow.ValidateRunID, the producer's SendEvent, Enqueue and Batch on
// servers of the max payloads it names.
func TestVectorsLimits(t *testing.T) {
	var f limitsFile
	readJSON(t, "limits.json", &f)
	if f.Format != 1 || f.MaxBatch != producer.MaxBatch || f.MaxBatchArgs != producer.MaxBatchArgs || f.RecordRoom != 4096 || f.EventRoom != 1024 {
		t.Fatalf("limits.json: format %d maxBatch %d maxBatchArgs %d recordRoom %d eventRoom %d; Go has 1, %d, %d, 4096, 1024",
			f.Format, f.MaxBatch, f.MaxBatchArgs, f.RecordRoom, f.EventRoom, producer.MaxBatch, producer.MaxBatchArgs)
	}
	kinds := map[string]string{}
	for _, k := range errorKinds {
		kinds[k.kind] = k.goName
	}
	if !maps.Equal(f.ErrorKinds, kinds) {
		t.Errorf("errorKinds: %v, Go's are %v", f.ErrorKinds, kinds)
	}
	check := func(what string, vs []limitValue, validate func(string) error) {
		for _, v := range vs {
			s := v.text(t)
			err := validate(s)
			if got := errorKind(err); got != v.Error || v.Valid != (err == nil) {
				t.Errorf("%s %.40q (%d bytes): error %q (%v), vector has valid %t error %q", what, s, len(s), got, err, v.Valid, v.Error)
			}
		}
	}
	check("function name", f.FunctionNames, jetflow.ValidateName)
	check("run id", f.RunIDs, jetflow.ValidateRunID)

	servers := map[int32]*producer.Producer{}
	envs := map[int32]*testserver.Env{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prod := func(max int32) (*producer.Producer, *testserver.Env) {
		if p := servers[max]; p != nil {
			return p, envs[max]
		}
		ts := testserver.StartMaxPayload(t, max)
		p, err := producer.New(ctx, ts.JS, producer.Config{})
		if err != nil {
			t.Fatal(err)
		}
		servers[max], envs[max] = p, ts
		return p, ts
	}
	p, _ := prod(1 << 20)
	check("event name", f.EventNames, func(name string) error {
		err := p.SendEvent(ctx, "wf-none", name, 1)
		if errors.Is(err, jetflow.ErrNotFound) {
			return nil // the name passed; no such workflow
		}
		return err
	})
	stored := func(ts *testserver.Env) uint64 {
		return ts.StreamMsgs(t, "JETFLOW_FN")
	}
	for _, a := range f.Args {
		p, ts := prod(a.MaxPayload)
		before := stored(ts)
		_, err := p.Enqueue(ctx, jetflow.RawCall("limits.args", argsOf(a.ArgsBytes)))
		wantErr := goError(a.Error, a.Offload)
		if got := errorKind(err); got != wantErr {
			t.Errorf("args of %d bytes, max payload %d: error %q (%v), want %q", a.ArgsBytes, a.MaxPayload, got, err, wantErr)
		}
		if n, want := stored(ts)-before, map[bool]uint64{true: 0, false: 1}[wantErr != ""]; n != want {
			t.Errorf("args of %d bytes, max payload %d: %d runs stored, want %d", a.ArgsBytes, a.MaxPayload, n, want)
		}
	}
	for _, b := range f.Batches {
		p, ts := prod(b.MaxPayload)
		before := stored(ts)
		items := make([]producer.Item, b.Items)
		for i := range items {
			items[i] = producer.Item{Call: jetflow.RawCall("limits.batch", argsOf(b.ArgsBytesEach))}
		}
		_, err := p.Batch(ctx, items)
		wantErr := goError(b.Error, b.Offload)
		if got := errorKind(err); got != wantErr {
			t.Errorf("batch of %d × %d bytes, max payload %d: error %q (%v), want %q", b.Items, b.ArgsBytesEach, b.MaxPayload, got, err, wantErr)
		}
		want := uint64(b.Items)
		if wantErr != "" {
			want = 0
		}
		if n := stored(ts) - before; n != want {
			t.Errorf("batch of %d × %d bytes, max payload %d: %d runs stored, want %d", b.Items, b.ArgsBytesEach, b.MaxPayload, n, want)
		}
	}
	for _, e := range f.Events {
		p, _ := prod(e.MaxPayload)
		err := p.SendEvent(ctx, "wf-none", "approve", argsOf(e.PayloadBytes))
		if got, want := errorKind(err), goError(e.Error, e.Offload); got != want {
			t.Errorf("event payload of %d bytes, max payload %d: error %q (%v), want %q", e.PayloadBytes, e.MaxPayload, got, err, want)
		}
	}
	for _, w := range f.WorkflowInputs {
		ts := testserver.StartMaxPayload(t, w.MaxPayload)
		now := instant(t, w.Now)
		p, err := producer.New(ctx, ts.JS, producer.Config{Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		def := workflow.Define("limits.flow", func(*workflow.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil })
		_, err = workflow.Start(ctx, p, def, argsOf(w.InputBytes), workflow.WithID(w.ID))
		wantErr := goError(w.Error, w.Offload)
		if got := errorKind(err); got != wantErr {
			t.Errorf("workflow input of %d bytes, max payload %d: error %q (%v), want %q", w.InputBytes, w.MaxPayload, got, err, wantErr)
		}
		_, gerr := p.Get(ctx, w.ID)
		if stored := gerr == nil; stored != (wantErr == "") {
			t.Errorf("workflow input of %d bytes, max payload %d: stored %t (%v)", w.InputBytes, w.MaxPayload, stored, gerr)
		}
	}
}
