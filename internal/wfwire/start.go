package wfwire

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// ErrDefinitionInactive: the workflow's definition is deprecated or
// deleted, so no new workflow of it starts (workflow.ErrDefinitionInactive).
var ErrDefinitionInactive = errors.New("workflow: definition not active")

// DefinitionKey is the journal bucket's key of definition name's state (a
// workflow id never starts with '=').
func DefinitionKey(name string) string { return "=def." + name }

// Startable returns nil when a new workflow of definition name may start
// (its state, in the journal, is absent, active or paused), and
// ErrDefinitionInactive naming the state otherwise.
func Startable(ctx context.Context, journal jetstream.KeyValue, name string) error {
	e, err := journal.Get(ctx, DefinitionKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("workflow: definition %s: %w", name, err)
	}
	if st := string(e.Value()); st == "deprecated" || st == "deleted" {
		return fmt.Errorf("%w: %s is %s", ErrDefinitionInactive, name, st)
	}
	return nil
}

// RecordOf is the pending record of workflow name, from its first
// segment's args a: its first child is its first segment (IsWorkflow).
func RecordOf(name string, a SegArgs) *jetflow.Run {
	return &jetflow.Run{
		ID: a.WF, Name: name, Kind: jetflow.Retryable, Args: a.Input, State: jetflow.Pending,
		ScheduledTime: a.Scheduled, CreationTime: a.Created, Parent: a.Parent,
		Children: []string{SegmentID(a.WF, 1)}, OnComplete: a.OnComplete, HeldBy: forkHolderOf(a),
	}
}

// forkHolderOf is the HeldBy of the record of a workflow whose first
// segment's args are a: ForkHolder of a Restart's source, "" otherwise.
func forkHolderOf(a SegArgs) string {
	if a.Fork == "" {
		return ""
	}
	return ForkHolder(a.Fork)
}

// EventKey is a new journal key for an event name sent to workflow wf.
func EventKey(wf, name string) string { return EventPrefix(wf, name) + nuid.Next() }

// Start is a workflow's start once its input and options are checked
// (docs/wire-format.md, "Starting a workflow").
type Start struct {
	// Record is the workflow's pending record (its first child its first
	// segment), and SegArgs its first segment's args.
	Record  *jetflow.Run
	SegArgs []byte
	// CallerID: the id was given by the caller, so an earlier workflow of
	// that id may have left its journal (purged before the first segment).
	CallerID bool
	// Event, when set, is stored before the first segment is published
	// (signal with start): the first segment finds it.
	Event []byte
	// EventName names it.
	EventName string
	// Fork, for a Restart's record (held: ForkHolder), runs after the
	// record is written and before the first segment is published: it
	// copies the journal and releases the record, and reports whether it
	// released it (false: another did, whose segment runs).
	Fork func(ctx context.Context) (released bool, err error)
}

// ErrNotPublished wraps the error of a Start whose record was written but
// whose first segment was not published: the scheduler's repair sweep
// publishes it.
var ErrNotPublished = errors.New("workflow: recorded, its first segment not published (the repair sweep will)")

// Do writes the record (create-only: kv.ErrExists when the id is taken,
// nothing written), purges what an earlier workflow of a caller's id left
// in the journal, stores the event (StoreEvent: once; its error is the
// one returned, not ErrNotPublished), runs Fork (a Restart's), then
// publishes the first segment unless Fork did not release the record (or
// stores it in the delayed store when it is due later). Any other error
// after the record matches ErrNotPublished.
func (s Start) Do(ctx context.Context, d *engine.Dispatcher, journal jetstream.KeyValue) error {
	rec := s.Record
	var left uint64
	if s.CallerID {
		var err error
		if left, err = leftovers(ctx, d, journal, rec.ID); err != nil {
			return err
		}
	}
	if _, err := d.Create(ctx, rec); err != nil {
		return err
	}
	err := purgeBelow(ctx, d, rec.ID, left)
	var evErr error
	if err == nil && s.Event != nil {
		evErr = StoreEvent(ctx, journal, rec.ID, s.EventName, s.Event)
	}
	publish := true
	if err == nil && s.Fork != nil {
		publish, err = s.Fork(ctx)
	}
	if err == nil && publish {
		err = s.publish(ctx, d)
	}
	switch {
	case evErr != nil:
		// Not ErrNotPublished, which a caller takes as accepted: the event
		// is not known to be stored (sending it again to the workflow, now
		// recorded, stores it).
		return evErr
	case err != nil:
		return fmt.Errorf("workflow %s: %w: %w", rec.ID, ErrNotPublished, err)
	}
	return nil
}

// publish publishes the first segment without a record of its own (its
// message is its pending record), once, after the create only one Start
// wins.
func (s Start) publish(ctx context.Context, d *engine.Dispatcher) error {
	seg := FirstSegment(s.Record)
	seg.Args = s.SegArgs
	deep := strings.Count(seg.Name, ".") >= kv.QueuedMaxTokens
	switch {
	case !deep && seg.ScheduledTime.After(d.Now()):
		return d.DelayNew(ctx, seg)
	case !deep:
		return d.PublishNew(ctx, seg)
	}
	// A name too deep for a record-less run to be found by its id
	// (kv.QueuedMaxTokens): a record first, as any run with an id.
	rev, err := d.Create(ctx, seg)
	if err != nil {
		return err
	}
	seg.Revision = rev
	return d.Dispatch(ctx, seg)
}

// leftovers looks, before a Start of a caller's id writes the record,
// for what an earlier workflow of that id left in the journal (its record
// expired before its journal's purge ran): its first step (a workflow that
// journaled anything has one). It returns 0 when there is none, otherwise
// the journal's sequence after its last write: what the Start purges
// under the id once its record is written, so that what others write for
// the new workflow (an event sent as soon as the record is seen) stays.
func leftovers(ctx context.Context, d *engine.Dispatcher, journal jetstream.KeyValue, id string) (uint64, error) {
	_, err := journal.Get(ctx, id+".s.1")
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("workflow %s: journal: %w", id, err)
	}
	st, err := journalStream(ctx, d)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("workflow: journal stream: %w", err)
	}
	return info.State.LastSeq + 1, nil
}

// purgeBelow removes workflow id's journal keys written before sequence
// below (nothing for 0).
func purgeBelow(ctx context.Context, d *engine.Dispatcher, id string, below uint64) error {
	if below == 0 {
		return nil
	}
	st, err := journalStream(ctx, d)
	if err != nil {
		return err
	}
	subject := streams.KVSubject(d.Streams().JournalBucket(), id+".>")
	return st.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(below))
}

func journalStream(ctx context.Context, d *engine.Dispatcher) (jetstream.Stream, error) {
	st, err := d.JetStream().Stream(ctx, streams.KVStream(d.Streams().JournalBucket()))
	if err != nil {
		return nil, fmt.Errorf("workflow: journal stream: %w", err)
	}
	return st, nil
}
