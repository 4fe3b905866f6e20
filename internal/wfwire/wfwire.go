// Package wfwire is what the producer and package workflow share of a
// workflow's wire format: the names of a definition's internal functions,
// and the events sent to a workflow (stored in the journal bucket, key
// <workflow id>.ev.<name>.<unique>, value Event in JSON).
package wfwire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
)

// SegmentFunction is the internal function that runs a definition's
// segments: "<name>.segment".
func SegmentFunction(name string) string { return name + ".segment" }

// WakeFunction is the internal function that resumes a waiting workflow:
// "<name>.wake". Its args are a jetflow.Completion whose Context is
// WakeContext.
func WakeFunction(name string) string { return name + ".wake" }

// SegmentID is the run id of segment n of workflow id.
func SegmentID(id string, n int) string { return jetflow.DerivedID(fmt.Sprintf("%s-seg%d", id, n)) }

// WakeContext is the Context of a wake run's Completion.
type WakeContext struct {
	WF string `json:"wf"`
	// Purge: remove the journal of the ended workflow (its retention
	// passed).
	Purge bool `json:"purge,omitempty"`
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
