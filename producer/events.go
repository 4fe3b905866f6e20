package producer

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/nats-io/nuid"
)

// Errors of SendEvent (the same values as package workflow's).
var (
	// ErrInvalidEventName: not 1-64 letters, digits, '_' or '-'.
	ErrInvalidEventName = wfwire.ErrInvalidEventName
	// ErrWorkflowEnded: the workflow has ended; the event is not stored.
	ErrWorkflowEnded = wfwire.ErrEnded
	// ErrNotWorkflow: the run is not a durable workflow.
	ErrNotWorkflow = wfwire.ErrNotWorkflow
)

// SendEvent sends event name with payload (JSON-encoded) to durable
// workflow workflowID (package workflow): the event is stored in the
// workflow's journal, kept until an await consumes it (one sent before its
// await waits for it; each is consumed by one await), and a run of the
// workflow's wake function resumes the workflow if it waits. A producer
// needs no import of package workflow to send one (workflow.SendEvent does
// the same, resuming the workflow directly). Errors: ErrInvalidEventName,
// jetflow.ErrNotFound (no such run), ErrNotWorkflow, ErrWorkflowEnded,
// jetflow.ErrBadArgs (payload not JSON-encodable), ErrArgsTooLarge (above 32
// MiB; a payload above a quarter of the max payload goes to the payloads
// bucket, docs/wire-format.md "Large payloads").
func (p *Producer) SendEvent(ctx context.Context, workflowID, name string, payload any) error {
	if err := wfwire.ValidEventName(name); err != nil {
		return err
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("%w: event %s: %v", jetflow.ErrBadArgs, name, err)
	}
	if limit := wfwire.EventLimit(p.nc.MaxPayload()); len(raw) > limit {
		return fmt.Errorf("%w: event %s: %d bytes of payload, more than an event takes (%d)", ErrArgsTooLarge, name, len(raw), limit)
	}
	r, err := p.get(ctx, workflowID)
	if err != nil {
		return err
	}
	if !slices.Contains(r.Children, wfwire.SegmentID(workflowID, 1)) {
		return fmt.Errorf("run %s (%s): %w", workflowID, r.Name, ErrNotWorkflow)
	}
	if r.State.Terminal() {
		return fmt.Errorf("workflow %s is %s: %w", workflowID, r.State, ErrWorkflowEnded)
	}
	journal, err := p.js.KeyValue(ctx, p.cfg.JournalBucket())
	if err != nil {
		return fmt.Errorf("workflow %s: journal: %w", workflowID, err)
	}
	if raw, err = wfwire.EventPayload(ctx, p.js, p.cfg.PayloadsBucket(), workflowID, name, raw); err != nil {
		return err
	}
	b, _ := json.Marshal(wfwire.Event{Name: name, Payload: raw, Sent: p.now().UTC()})
	if _, err := journal.Create(ctx, wfwire.EventPrefix(workflowID, name)+nuid.Next(), b); err != nil {
		return fmt.Errorf("workflow %s: store event %s: %w", workflowID, name, err)
	}
	if _, err := p.Enqueue(ctx, wfwire.WakeCall(r.Name, workflowID)); err != nil {
		// The event is stored: the workflow finds it at its next await or
		// the next time it resumes.
		return fmt.Errorf("workflow %s: event %s stored, resume failed: %w", workflowID, name, err)
	}
	return nil
}
