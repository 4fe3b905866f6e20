package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/nats-io/nats.go/jetstream"
)

// DefinitionState is the lifecycle of a workflow definition (seed 004):
//
//	active      the default: workflows start and run
//	paused      workflows are accepted but none executes (their segment and
//	            wake functions are paused on every worker) until it is active
//	            again; a schedule's fire is skipped and the schedule advances
//	deprecated  no new workflow starts (Start fails with
//	            ErrDefinitionInactive; a schedule's fire is skipped); those
//	            running finish
//	deleted     as deprecated; kept as a state so that schedules and callers
//	            are told rather than left to wait
type DefinitionState string

const (
	DefinitionActive     DefinitionState = "active"
	DefinitionPaused     DefinitionState = "paused"
	DefinitionDeprecated DefinitionState = "deprecated"
	DefinitionDeleted    DefinitionState = "deleted"
)

// ErrDefinitionInactive: the workflow's definition is deprecated or
// deleted, so no new workflow of it starts.
var ErrDefinitionInactive = wfwire.ErrDefinitionInactive

// ErrInvalidState: not a DefinitionState.
var ErrInvalidState = errors.New("workflow: invalid definition state")

// definitionKey is the journal bucket's key of definition name's state (a
// workflow id never starts with '=').
func definitionKey(name string) string { return wfwire.DefinitionKey(name) }

// SetDefinitionState sets the state of workflow definition name for every
// producer and worker. Errors: ErrInvalidState, jetflow.ErrInvalidName, and
// the server's.
func SetDefinitionState(ctx context.Context, p *producer.Producer, name string, st DefinitionState) error {
	switch st {
	case DefinitionActive, DefinitionPaused, DefinitionDeprecated, DefinitionDeleted:
	default:
		return fmt.Errorf("%w: %q", ErrInvalidState, st)
	}
	if err := jetflow.ValidateName(name); err != nil {
		return err
	}
	jr, err := openJournal(ctx, p)
	if err != nil {
		return err
	}
	if _, err := jr.kv.Put(ctx, definitionKey(name), []byte(st)); err != nil {
		return fmt.Errorf("workflow: definition %s: %w", name, err)
	}
	// A paused definition holds its executions: its segments and wakes
	// wait in the stream as pending runs.
	d := engine.Of(p)
	for _, fn := range []string{SegmentFunction(name), WakeFunction(name)} {
		if err := kv.SetPaused(ctx, d.JetStream(), d.Streams(), fn, st == DefinitionPaused); err != nil {
			return fmt.Errorf("workflow: definition %s: %w", name, err)
		}
	}
	return nil
}

// DefinitionStateOf returns the state of workflow definition name (active
// when none was ever set). Errors: jetflow.ErrInvalidName, and the
// server's.
func DefinitionStateOf(ctx context.Context, p *producer.Producer, name string) (DefinitionState, error) {
	if err := jetflow.ValidateName(name); err != nil {
		return "", err
	}
	jr, err := openJournal(ctx, p)
	if err != nil {
		return "", err
	}
	e, err := jr.kv.Get(ctx, definitionKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return DefinitionActive, nil
	}
	if err != nil {
		return "", fmt.Errorf("workflow: definition %s: %w", name, err)
	}
	return DefinitionState(e.Value()), nil
}

// startable reports whether a new workflow of definition name may start:
// nil, or ErrDefinitionInactive naming the state. It reads the state each
// time (one read): a definition deprecated anywhere stops the next Start.
func startable(ctx context.Context, p *producer.Producer, name string) (DefinitionState, error) {
	st, err := DefinitionStateOf(ctx, p, name)
	if err != nil {
		return "", err
	}
	if st == DefinitionDeprecated || st == DefinitionDeleted {
		return st, fmt.Errorf("%w: %s is %s", ErrDefinitionInactive, name, st)
	}
	return st, nil
}
