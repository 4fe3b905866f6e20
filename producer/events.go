package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors of SendEvent (the same values as package workflow's).
var (
	// ErrInvalidEventName: not 1-64 letters, digits, '_' or '-'.
	ErrInvalidEventName = wfwire.ErrInvalidEventName
	// ErrWorkflowEnded: the workflow has ended; the event is not stored.
	ErrWorkflowEnded = wfwire.ErrEnded
	// ErrNotWorkflow: the run is not a durable workflow.
	ErrNotWorkflow = wfwire.ErrNotWorkflow
	// ErrDefinitionInactive: SendEventWithStart of a workflow whose
	// definition is deprecated or deleted (workflow.ErrDefinitionInactive).
	ErrDefinitionInactive = wfwire.ErrDefinitionInactive
	// ErrEventUnconfirmed: the event's store went unanswered (a server
	// restart) until ctx ended: it may be stored, and sending it again
	// may deliver it twice. Any other error of SendEvent: it is not
	// stored.
	ErrEventUnconfirmed = wfwire.ErrEventUnconfirmed
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
// bucket, docs/wire-format.md "Large payloads"), ErrEventUnconfirmed (it
// may be stored). A store whose reply is lost is made again on the same
// key within ctx: one call stores the event once.
func (p *Producer) SendEvent(ctx context.Context, workflowID, name string, payload any) error {
	ev, err := p.eventJSON(name, payload)
	if err != nil {
		return err
	}
	r, err := p.get(ctx, workflowID)
	if err != nil {
		return err
	}
	return p.storeEvent(ctx, r, name, ev)
}

// eventJSON is the journal value of event name with payload, checked.
func (p *Producer) eventJSON(name string, payload any) ([]byte, error) {
	if err := wfwire.ValidEventName(name); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: event %s: %v", jetflow.ErrBadArgs, name, err)
	}
	if limit := wfwire.EventLimit(p.nc.MaxPayload()); len(raw) > limit {
		return nil, fmt.Errorf("%w: event %s: %d bytes of payload, more than an await's journal entry holds (%d)", ErrArgsTooLarge, name, len(raw), limit)
	}
	return json.Marshal(wfwire.Event{Name: name, Payload: raw, Sent: p.now().UTC()})
}

// storeEvent stores event ev named name for workflow r and enqueues a
// wake of it.
func (p *Producer) storeEvent(ctx context.Context, r *jetflow.Run, name string, ev []byte) error {
	workflowID := r.ID
	if !slices.Contains(r.Children, wfwire.SegmentID(workflowID, 1)) {
		return fmt.Errorf("run %s (%s): %w", workflowID, r.Name, ErrNotWorkflow)
	}
	if r.State.Terminal() {
		return fmt.Errorf("workflow %s is %s: %w", workflowID, r.State, ErrWorkflowEnded)
	}
	journal, err := p.journal(ctx)
	if err != nil {
		return err
	}
	if ev, err = wfwire.OffloadEvent(ctx, p.js, p.cfg.PayloadsBucket(), workflowID, ev); err != nil {
		return err
	}
	if err := wfwire.StoreEvent(ctx, journal, workflowID, name, ev); err != nil {
		wfwire.WakeUnconfirmed(ctx, err, func(ctx context.Context) error {
			_, err := p.Enqueue(ctx, wfwire.WakeCall(r.Name, workflowID))
			return err
		})
		return err
	}
	if _, err := p.Enqueue(ctx, wfwire.WakeCall(r.Name, workflowID)); err != nil {
		// The event is stored: the workflow finds it at its next await or
		// the next time it resumes.
		return fmt.Errorf("workflow %s: event %s stored, resume failed: %w", workflowID, name, err)
	}
	return nil
}

func (p *Producer) journal(ctx context.Context) (jetstream.KeyValue, error) {
	journal, err := p.js.KeyValue(ctx, p.cfg.JournalBucket())
	if err != nil {
		return nil, fmt.Errorf("workflow journal %s: %w", p.cfg.JournalBucket(), err)
	}
	return journal, nil
}

// SendEventWithStart sends event name with payload to durable workflow
// workflowID, starting it first (workflow workflowName, with input, due
// now) if no run has that id: one call, one workflow per id, and no event
// lost (workflow.SendEventWithStart, for a producer that does not import
// package workflow; docs/wire-format.md says what it writes). Of
// concurrent calls for one id exactly one starts the workflow, storing its
// event before the first segment; the others send theirs to it. It
// reports whether this call started the workflow. Errors: SendEvent's
// (ErrWorkflowEnded when that workflow has ended), jetflow.ErrInvalidName,
// jetflow.ErrInvalidRunID, ErrDefinitionInactive, ErrArgsTooLarge (the
// input), jetflow.ErrBadRecord (the id is a run of another name). A call
// that fails after the record was written may have stored its event:
// trying again sends it again.
func (p *Producer) SendEventWithStart(ctx context.Context, workflowName, workflowID string, input any, name string, payload any) (bool, error) {
	ev, err := p.eventJSON(name, payload)
	if err != nil {
		return false, err
	}
	st, err := p.workflowStart(ctx, workflowName, workflowID, input)
	if err != nil {
		return false, err
	}
	st.Event, st.EventName = ev, name
	journal, err := p.journal(ctx)
	if err != nil {
		return false, err
	}
	if err := wfwire.Startable(ctx, journal, workflowName); err != nil {
		return false, err
	}
	err = st.Do(ctx, p.d, journal)
	if !errors.Is(err, kv.ErrExists) {
		return err == nil || errors.Is(err, wfwire.ErrNotPublished), err
	}
	r, err := p.Get(ctx, workflowID)
	if errors.Is(err, jetflow.ErrNotFound) {
		// Created by another call, and a direct get answered by a replica
		// that has not seen it yet: the leader's word.
		r, _, err = p.store.Decide(ctx, workflowID)
	}
	if err != nil {
		return false, err
	}
	if r.Name != workflowName {
		return false, fmt.Errorf("%w: run %s is a %s, not workflow %s", jetflow.ErrBadRecord, workflowID, r.Name, workflowName)
	}
	return false, p.storeEvent(ctx, r, name, ev)
}

// workflowStart is the start, due now, of workflow name with input under
// id (docs/wire-format.md, "Starting a workflow"), checked.
func (p *Producer) workflowStart(ctx context.Context, name, id string, input any) (wfwire.Start, error) {
	if err := jetflow.ValidateName(name); err != nil {
		return wfwire.Start{}, err
	}
	if err := jetflow.ValidateRunID(id); err != nil {
		return wfwire.Start{}, err
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return wfwire.Start{}, fmt.Errorf("%w: %s: %v", jetflow.ErrBadArgs, name, err)
	}
	now := p.now().UTC()
	a := wfwire.SegArgs{WF: id, N: 1, Input: raw, Scheduled: now, Created: now}
	segRaw, _ := json.Marshal(a)
	if max := p.nc.MaxPayload(); max > 0 && len(segRaw) > kv.ArgsLimit(max) {
		return wfwire.Start{}, fmt.Errorf("%w (%w): workflow %s: %d bytes of input, %d with its first segment's args, more than a run holds (%d)",
			ErrArgsTooLarge, jetflow.ErrBadArgs, name, len(raw), len(segRaw), kv.ArgsLimit(max))
	}
	rec := wfwire.RecordOf(name, a)
	rec.Trace = telemetry.Inject(ctx)
	return wfwire.Start{Record: rec, SegArgs: segRaw, CallerID: true}, nil
}

// QueryWorkflow asks durable workflow workflowID for query name: a worker
// of its definition replays its code read-only and calls the handler the
// code registered (workflow.SetQueryHandler). It returns the answer's
// JSON (workflow.Query decodes it). Errors: jetflow.ErrNotFound,
// ErrNotWorkflow, workflow.ErrNoQueryHandler, the handler's error, ctx's.
func (p *Producer) QueryWorkflow(ctx context.Context, workflowID, name string) (json.RawMessage, error) {
	r, err := p.Get(ctx, workflowID)
	if err != nil {
		return nil, err
	}
	if !wfwire.IsWorkflow(r) {
		return nil, fmt.Errorf("run %s (%s): %w", workflowID, r.Name, ErrNotWorkflow)
	}
	a, err := wfwire.Query(ctx, p.nc, p.cfg.WithDefaults().Prefix, r.Name, workflowID, name)
	if err != nil {
		return nil, err
	}
	return a.Result, a.Err(nil)
}

// UpdateWorkflow sends update name with input (JSON) to durable workflow
// workflowID and waits, until ctx ends, for its answer: the update is
// stored in the journal like an event, the workflow's code takes it at
// its next workflow.AwaitUpdate of that name, validates it, handles it,
// journals it, then answers. It returns the answer's JSON
// (workflow.Update decodes it). Errors: ErrNotWorkflow, ErrWorkflowEnded,
// ErrInvalidEventName, ErrArgsTooLarge, workflow.ErrUpdateRejected, the
// handler's error, workflow.ErrUpdateTimeout (once stored, or maybe stored
// when its store went unanswered, any failure to get the answer: the
// update stays stored and may still be handled). Any other error means
// nothing was stored.
func (p *Producer) UpdateWorkflow(ctx context.Context, workflowID, name string, input json.RawMessage) (json.RawMessage, error) {
	r, err := p.updatable(ctx, workflowID, name, input)
	if err != nil {
		return nil, err
	}
	journal, err := p.journal(ctx)
	if err != nil {
		return nil, err
	}
	a, err := wfwire.SendUpdate(ctx, journal, workflowID, name, input, p.now(), func(ctx context.Context) error {
		_, err := p.Enqueue(ctx, wfwire.WakeCall(r.Name, workflowID))
		return err
	})
	if err != nil {
		return nil, err
	}
	return a.Result, a.Err(nil)
}

// updatable checks an update and reads its workflow's record.
func (p *Producer) updatable(ctx context.Context, workflowID, name string, input json.RawMessage) (*jetflow.Run, error) {
	if err := wfwire.ValidEventName(name); err != nil {
		return nil, err
	}
	if limit := wfwire.EventLimit(p.nc.MaxPayload()); len(input) > limit {
		return nil, fmt.Errorf("%w: update %s: %d bytes of input, more than an await's journal entry holds (%d)", ErrArgsTooLarge, name, len(input), limit)
	}
	r, err := p.Get(ctx, workflowID)
	if err != nil {
		return nil, err
	}
	if !wfwire.IsWorkflow(r) {
		return nil, fmt.Errorf("run %s (%s): %w", workflowID, r.Name, ErrNotWorkflow)
	}
	if r.State.Terminal() {
		return nil, fmt.Errorf("workflow %s is %s: %w", workflowID, r.State, ErrWorkflowEnded)
	}
	return r, nil
}
