package streams

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/nats-io/nats.go"
)

// Envelope is one run as it travels to a worker: the message on
// <prefix>.fn.<function>.<id> carries the args as its body and the rest as
// headers (docs/wire-format.md). The same value, JSON-encoded, is a delayed
// entry.
type Envelope struct {
	Function    string            `json:"fn"`
	ID          string            `json:"id"`
	Rev         uint64            `json:"rev,omitempty"`
	Attempt     int               `json:"attempt,omitempty"`
	MaxAttempts int               `json:"maxAttempts,omitempty"`
	Timeout     time.Duration     `json:"timeout,omitempty"`
	Parent      string            `json:"parent,omitempty"`
	Scheduled   time.Time         `json:"scheduled,omitzero"`
	Created     time.Time         `json:"created,omitzero"`
	Trace       map[string]string `json:"trace,omitempty"`
	Args        json.RawMessage   `json:"args,omitempty"`
	// Reload: the record has fields the message does not carry.
	Reload bool `json:"reload,omitempty"`
	// New: the id was generated for this run and no record was written;
	// the message is the pending record.
	New bool `json:"new,omitempty"`
}

// MsgID is the Nats-Msg-Id of an attempt: the run id for the first, and
// <id>/<attempt> for retries, so a retry is not taken for a duplicate.
func (e Envelope) MsgID() string {
	if e.Attempt <= 1 {
		return e.ID
	}
	return e.ID + "/" + strconv.Itoa(e.Attempt)
}

// Message builds the message that starts this run.
func (c Config) Message(e Envelope) *nats.Msg {
	// Canonical keys assigned directly: Header.Set would canonicalise each.
	h := make(nats.Header, 8)
	if !e.New {
		// A new id is published once (nothing republishes it), so it needs
		// no deduplication: the server keeps no Nats-Msg-Id for it.
		h[HeaderMsgID] = []string{e.MsgID()}
	}
	if e.Rev != 0 {
		h[HeaderRev] = []string{strconv.FormatUint(e.Rev, 10)}
	}
	if e.Attempt > 1 {
		h[HeaderAttempt] = []string{strconv.Itoa(e.Attempt)}
	}
	if e.MaxAttempts > 0 {
		h[HeaderMaxAttempts] = []string{strconv.Itoa(e.MaxAttempts)}
	}
	if e.Timeout > 0 {
		h[HeaderTimeout] = []string{e.Timeout.String()}
	}
	if e.Parent != "" {
		h[HeaderParent] = []string{e.Parent}
	}
	if !e.Scheduled.IsZero() && !e.Scheduled.Equal(e.Created) {
		// Absent, the scheduled time is the creation time.
		h[HeaderScheduled] = []string{string(e.Scheduled.UTC().AppendFormat(make([]byte, 0, 36), time.RFC3339Nano))}
	}
	if !e.Created.IsZero() {
		h[HeaderCreated] = []string{string(e.Created.UTC().AppendFormat(make([]byte, 0, 36), time.RFC3339Nano))}
	}
	for k, v := range e.Trace {
		h.Set(k, v)
	}
	if e.Reload {
		h[HeaderReload] = []string{"1"}
	}
	if e.New {
		h[HeaderNew] = []string{"1"}
	}
	return &nats.Msg{Subject: c.FunctionSubject(e.Function, e.ID), Header: h, Data: e.Args}
}

// ErrBadHeader is returned by ParseMessage for a header it cannot read.
type ErrBadHeader struct{ Name, Value string }

func (e *ErrBadHeader) Error() string { return fmt.Sprintf("bad header %s: %q", e.Name, e.Value) }

// ParseMessage reads a run from a message on a function subject. Missing
// headers take defaults (attempt 1, no revision, scheduled at the creation
// time); a header that is present
// but unreadable is an *ErrBadHeader. The run id comes from the subject; a
// Nats-Msg-Id that names another run is refused.
func (c Config) ParseMessage(subject string, h nats.Header, data []byte) (Envelope, error) {
	fn, id, ok := c.ParseFunctionSubject(subject)
	if !ok {
		return Envelope{}, fmt.Errorf("subject %q is not %s.fn.<function>.<id>", subject, c.prefix())
	}
	if len(data) == 0 {
		data = []byte("null") // an empty body is no args (docs/wire-format.md)
	}
	e := Envelope{Function: fn, ID: id, Args: data, Attempt: 1}
	if v := h.Get(HeaderRev); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return e, &ErrBadHeader{HeaderRev, v}
		}
		e.Rev = n
	}
	if v := h.Get(HeaderAttempt); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return e, &ErrBadHeader{HeaderAttempt, v}
		}
		e.Attempt = n
	}
	if v := h.Get(HeaderMaxAttempts); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return e, &ErrBadHeader{HeaderMaxAttempts, v}
		}
		e.MaxAttempts = n
	}
	if v := h.Get(HeaderTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return e, &ErrBadHeader{HeaderTimeout, v}
		}
		e.Timeout = d
	}
	if v := h.Get(HeaderParent); v != "" {
		if jetflow.ValidateRunID(v) != nil {
			return e, &ErrBadHeader{HeaderParent, v}
		}
		e.Parent = v
	}
	e.Reload = h.Get(HeaderReload) != ""
	e.New = h.Get(HeaderNew) != ""
	var err error
	if e.Scheduled, err = parseTime(h, HeaderScheduled); err != nil {
		return e, err
	}
	if e.Created, err = parseTime(h, HeaderCreated); err != nil {
		return e, err
	}
	if e.Scheduled.IsZero() {
		e.Scheduled = e.Created
	}
	// W3C trace context that cannot be valid (a traceparent is 55
	// characters, a tracestate at most 32 entries in 512) is ignored, as
	// the W3C asks of a malformed one: the run starts a trace of its own.
	if v := h.Get("traceparent"); v != "" && len(v) <= maxTraceParent {
		e.Trace = map[string]string{"traceparent": v}
		if ts := h.Get("tracestate"); ts != "" && len(ts) <= maxTraceState {
			e.Trace["tracestate"] = ts
		}
	}
	return e, nil
}

// The longest trace context a run carries (see ParseMessage).
const (
	maxTraceParent = 128
	maxTraceState  = 1024
)

func parseTime(h nats.Header, name string) (time.Time, error) {
	v := h.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || !TimeFits(t) {
		// An offset can carry a time RFC 3339 reads past what it writes:
		// 9999-12-31T23:59:59-23:59 is in year 10000 in UTC.
		return time.Time{}, &ErrBadHeader{name, v}
	}
	return t.UTC(), nil
}

var (
	firstTime = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	lastTime  = time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC)
)

// TimeFits reports whether a run record can hold t: RFC 3339, and so JSON's
// times, hold years 0 through 9999 (in UTC, as records keep them).
func TimeFits(t time.Time) bool { return !t.Before(firstTime) && !t.After(lastTime) }
