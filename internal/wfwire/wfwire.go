// Package wfwire is what the producer and package workflow share of a
// workflow's wire format: the names of a definition's internal functions,
// and the events sent to a workflow (stored in the journal bucket, key
// <workflow id>.ev.<name>.<unique>, value Event in JSON).
package wfwire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/payload"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go/jetstream"
)

// eventRoom is what an await's journal entry takes beside the event's
// payload it keeps (step, name, times, what it waited for).
const eventRoom = 1024

// EventLimit is the most bytes of payload an event takes on a server whose
// max payload is max (0: not known, the server decides): payload.MaxSize,
// a payload above payload.Threshold going to the payloads bucket
// (EventPayload), or, on a server too small for that, what an await's
// journal entry holds within a run's args limit.
func EventLimit(max int64) int {
	if max <= 0 {
		return math.MaxInt
	}
	if inline := kv.ArgsLimit(max) - eventRoom; payload.Threshold(max) > inline {
		return inline
	}
	return payload.MaxSize
}

// EventPayload is what the journal keeps of event name's payload raw, sent
// to workflow id: raw, or a reference to it in the payloads bucket when it
// is above payload.Threshold (docs/wire-format.md, "Large payloads").
func EventPayload(ctx context.Context, js jetstream.JetStream, bucket, id, name string, raw []byte) ([]byte, error) {
	b, err := payload.Offload(ctx, js, bucket, id, "event-"+name, raw)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: event %s: %w", id, name, err)
	}
	return b, nil
}

// OffloadEvent is event ev (its journal value, an Event) as the journal
// keeps it for workflow id: its payload as EventPayload keeps it.
func OffloadEvent(ctx context.Context, js jetstream.JetStream, bucket, id string, ev []byte) ([]byte, error) {
	var e Event
	if err := json.Unmarshal(ev, &e); err != nil {
		return nil, fmt.Errorf("workflow %s: event: %w", id, err)
	}
	raw, err := EventPayload(ctx, js, bucket, id, e.Name, e.Payload)
	if err != nil {
		return nil, err
	}
	e.Payload = raw
	return json.Marshal(e)
}

// SegmentFunction is the internal function that runs a definition's
// segments: "<name>.segment".
func SegmentFunction(name string) string { return name + ".segment" }

// WakeFunction is the internal function that resumes a waiting workflow:
// "<name>.wake". Its args are a jetflow.Completion whose Context is
// WakeContext.
func WakeFunction(name string) string { return name + ".wake" }

// SegmentID is the run id of segment n of workflow id.
func SegmentID(id string, n int) string { return jetflow.DerivedID(fmt.Sprintf("%s-seg%d", id, n)) }

// SegArgs are the arguments of a segment run.
type SegArgs struct {
	WF string `json:"wf"`
	N  int    `json:"n"`
	// The first segment carries what the workflow's record holds (Start
	// writes the record before it publishes the segment; the repair sweep
	// rebuilds the segment from the record with FirstSegment).
	Input      json.RawMessage   `json:"input,omitempty"`
	Scheduled  time.Time         `json:"scheduled,omitzero"`
	Created    time.Time         `json:"created,omitzero"`
	Parent     string            `json:"parent,omitempty"`
	OnComplete *jetflow.Callback `json:"onComplete,omitempty"`
	// Forked: the journal holds steps the workflow did not run (Restart);
	// otherwise a first segment that runs first (a first delivery on the
	// worker's fast path) knows the journal is empty and does not read it.
	Forked bool `json:"forked,omitempty"`
	// Fork names the workflow a Restart copies the journal from (with
	// Forked): the record is held (ForkHolder) until the copy is complete.
	Fork string `json:"fork,omitempty"`
}

// forkHold prefixes the HeldBy of a workflow record that a Restart holds
// until its journal copy is complete.
const forkHold = "restart:"

// ForkHolder is the HeldBy of the record of a workflow restarted from
// workflow src, until its journal copy from src is complete.
func ForkHolder(src string) string { return forkHold + src }

// ForkSource is the workflow whose journal workflow record r copies before
// it runs: set while r is held by its Restart (ForkHolder), "" otherwise
// (a record that is not a workflow's included).
func ForkSource(r *jetflow.Run) string {
	src, ok := strings.CutPrefix(r.HeldBy, forkHold)
	if !ok || !IsWorkflow(r) {
		return ""
	}
	return src
}

// IsWorkflow reports whether r is a workflow's record: its first child is
// its first segment.
func IsWorkflow(r *jetflow.Run) bool {
	return len(r.Children) > 0 && r.Children[0] == SegmentID(r.ID, 1)
}

// FirstSegment is the run of workflow record r's first segment, pending,
// without a revision: what Start publishes, and what the repair sweep
// publishes when Start died between the record and the message.
func FirstSegment(r *jetflow.Run) *jetflow.Run {
	a := SegArgs{WF: r.ID, N: 1, Input: r.Args, Scheduled: r.ScheduledTime, Created: r.CreationTime, Parent: r.Parent, OnComplete: r.OnComplete}
	if src := ForkSource(r); src != "" {
		a.Forked, a.Fork = true, src
	}
	raw, _ := json.Marshal(a)
	return &jetflow.Run{
		ID: SegmentID(r.ID, 1), Name: SegmentFunction(r.Name), Kind: jetflow.Retryable, Args: raw,
		State: jetflow.Pending, ScheduledTime: r.ScheduledTime, CreationTime: r.CreationTime, Parent: r.ID, Trace: r.Trace,
	}
}

// WakeContext is the Context of a wake run's Completion.
type WakeContext struct {
	WF string `json:"wf"`
	// Purge: remove the journal of the ended workflow (its retention
	// passed).
	Purge bool `json:"purge,omitempty"`
	// Janitor: with Purge, remove the journal only if the workflow's
	// record has expired or ended a retention period ago; otherwise come
	// back then (a workflow canceled while it waited ends with no segment
	// to schedule its purge).
	Janitor bool `json:"janitor,omitempty"`
	// Fork: armed by a Restart of an earlier version (before it claimed
	// WF's journal): a worker of this version does nothing with it.
	Fork bool `json:"fork,omitempty"`
}

// WakeCall is a run of name's wake function that resumes workflow id if
// it waits.
func WakeCall(name, id string) jetflow.Call {
	raw, _ := json.Marshal(WakeContext{WF: id})
	return jetflow.Call{Name: WakeFunction(name), Kind: jetflow.Retryable, Args: jetflow.Completion{Context: raw}}
}

// Event is an event sent to a workflow, as the journal stores it.
type Event struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Sent    time.Time       `json:"sent"`
}

// EventPrefix is the prefix of the journal keys of workflow wf's events
// named name.
func EventPrefix(wf, name string) string { return wf + ".ev." + name + "." }

// ErrInvalidEventName: an event name that is not 1-64 letters, digits,
// '_' or '-'.
var ErrInvalidEventName = errors.New("workflow: invalid event name")

// ErrEnded: an event sent to a workflow that has ended.
var ErrEnded = errors.New("workflow: workflow has ended")

// ErrNotWorkflow: an event sent to a run that is not a workflow.
var ErrNotWorkflow = errors.New("workflow: not a workflow")

// ValidEventName reports ErrInvalidEventName for a bad event name.
func ValidEventName(name string) error {
	if err := jetflow.ValidateRunID(name); err != nil || len(name) > 64 {
		return fmt.Errorf("%w: %q: 1-64 letters, digits, '_' or '-'", ErrInvalidEventName, name)
	}
	return nil
}
