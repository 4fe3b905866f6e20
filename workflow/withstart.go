package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/producer"
)

// SendEventWithStart sends event name with payload to workflow id, and
// starts that workflow (def with input in, and opts) first if no run has
// id: one call, one workflow per id, and the event is never lost. Of
// concurrent calls for one id exactly one starts the workflow (it stores
// its event before the workflow's first segment runs); the others send
// theirs to it, so every call that returns nil has its event stored. It
// reports whether this call started the workflow. Errors: SendEvent's and
// Start's, but not producer.ErrAlreadyExists; ErrEnded when the workflow
// of that id has ended (the event is not stored); ErrBadRecord when the id
// is a run of another name; ErrEventUnconfirmed when the event's store
// went unanswered until ctx ended (it may be stored: sending it again may
// deliver it twice), whichever call started the workflow. The event's
// store is made once (its lost reply made again on the same key, as
// SendEvent's). A call that fails after the workflow's record was written
// with any other error did not store its event: trying again sends it.
func SendEventWithStart[In, Out any](ctx context.Context, p *producer.Producer, def *Workflow[In, Out], id string, in In, name string, payload any, opts ...StartOption) (bool, error) {
	raw, err := json.Marshal(in)
	if err != nil {
		return false, fmt.Errorf("%w: %s: %v", jetflow.ErrBadArgs, def.name, err)
	}
	ev, err := eventJSON(engine.Of(p), name, payload)
	if err != nil {
		return false, err
	}
	opts = append(opts, WithID(id), func(o *startOptions) { o.event, o.eventName = ev, name })
	_, err = start(ctx, p, def.name, raw, opts...)
	if !errors.Is(err, producer.ErrAlreadyExists) {
		return err == nil || errors.Is(err, wfwire.ErrNotPublished), err
	}
	return false, watchDenied(ctx, p, func(ctx context.Context) error {
		return sendToStarted(ctx, p, id, def.name, name, ev)
	})
}

// eventJSON is the journal value of event name with payload, checked.
func eventJSON(eng *engine.Dispatcher, name string, payload any) ([]byte, error) {
	if err := validEventName(name); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: event %s: %v", jetflow.ErrBadArgs, name, err)
	}
	if limit := wfwire.EventLimit(eng.Conn().MaxPayload()); len(raw) > limit {
		return nil, fmt.Errorf("%w: event %s: %d bytes of payload, more than an await's journal entry holds (%d)",
			producer.ErrArgsTooLarge, name, len(raw), limit)
	}
	return json.Marshal(wfwire.Event{Name: name, Payload: raw, Sent: time.Now().UTC()})
}

// sendToStarted sends an event to workflow id, of definition def, whose
// record another call created: a direct get may be answered by a replica
// that has not seen it yet, so a missing record is read again from the
// stream's leader.
func sendToStarted(ctx context.Context, p *producer.Producer, id, def, name string, ev []byte) error {
	r, err := p.Get(ctx, id)
	if errors.Is(err, jetflow.ErrNotFound) {
		r, _, err = engine.Of(p).Store().Decide(ctx, id)
	}
	if err != nil {
		return err
	}
	if r.Name != def {
		return fmt.Errorf("%w: run %s is a %s, not a %s", ErrBadRecord, id, r.Name, def)
	}
	return storeEvent(ctx, p, r, name, ev)
}
