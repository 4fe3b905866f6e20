package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Def is a trigger's stored definition (kv.TriggerDef): what Add takes and
// List returns.
type Def = kv.TriggerDef

// Info is a trigger with the counters of the runners running it and what
// its consumer holds (kv.TriggerInfo).
type Info = kv.TriggerInfo

// bucket is the functions bucket of p, where definitions live.
func bucket(ctx context.Context, p *producer.Producer) (jetstream.KeyValue, jetstream.JetStream, streams.Config, error) {
	d := engine.Of(p)
	b, err := d.JetStream().KeyValue(ctx, d.Streams().FunctionsBucket())
	if err != nil {
		return nil, nil, streams.Config{}, fmt.Errorf("trigger: functions bucket: %w", err)
	}
	return b, d.JetStream(), d.Streams(), nil
}

// Add defines a run-time trigger (the CLI's `jetflow triggers add`): it
// stores def, creates its consumer (and capture stream), and every running
// trigger runner that runs run-time triggers starts it, each message's
// JSON as the args of a run of def.Function (or of a workflow's start
// function: set Function to workflow.StartFunction(name) and Workflow to
// the name). It returns the stored definition. Errors: ErrInvalid,
// ErrExists, and the server's (a stream that does not exist, subjects
// another stream captures).
func Add(ctx context.Context, p *producer.Producer, def Def) (*Def, error) {
	def.Origin = kv.TriggerOriginRuntime
	d := engine.Of(p)
	if err := validate(&def, d.Streams(), d.JetStream().Conn().Opts.InboxPrefix); err != nil {
		return nil, err
	}
	err := natsperm.Do(ctx, engine.Of(p).JetStream().Conn(), func(ctx context.Context) error {
		b, js, scfg, err := bucket(ctx, p)
		if err != nil {
			return err
		}
		if _, err := b.Get(ctx, kv.TriggerKey(def.Name)); err == nil {
			return fmt.Errorf("%w: %s", ErrExists, def.Name)
		}
		// The consumer first: a message published once Add returns is
		// the trigger's, whenever a runner starts it.
		if _, _, err := ensureSource(ctx, js, scfg, def, 30*time.Second); err != nil {
			return fmt.Errorf("trigger %s: %w", def.Name, err)
		}
		now := time.Now().UTC()
		def.Created, def.Updated = now, now
		data, _ := json.Marshal(def)
		rev, err := b.Create(ctx, kv.TriggerKey(def.Name), data)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: %s", ErrExists, def.Name)
		}
		if err != nil {
			return fmt.Errorf("trigger %s: %w", def.Name, err)
		}
		def.Revision = rev
		return nil
	}, "$JS.", "$KV.")
	if err != nil {
		return nil, err
	}
	return &def, nil
}

// Get returns trigger name's definition. Errors: ErrNotFound.
func Get(ctx context.Context, p *producer.Producer, name string) (*Def, error) {
	b, _, _, err := bucket(ctx, p)
	if err != nil {
		return nil, err
	}
	return get(ctx, b, name)
}

func get(ctx context.Context, b jetstream.KeyValue, name string) (*Def, error) {
	e, err := getEntry(ctx, b, name)
	if err != nil {
		return nil, err
	}
	return decodeDef(e, name)
}

// getEntry reads the entry of trigger name's definition, undecoded.
func getEntry(ctx context.Context, b jetstream.KeyValue, name string) (jetstream.KeyValueEntry, error) {
	e, err := b.Get(ctx, kv.TriggerKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("trigger %s: %w", name, err)
	}
	return e, nil
}

// decodeDef decodes the definition entry e of trigger name: ErrUnreadable
// when it is not a definition's JSON or names another trigger.
func decodeDef(e jetstream.KeyValueEntry, name string) (*Def, error) {
	var d Def
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnreadable, name, err)
	}
	if d.Name != name {
		return nil, fmt.Errorf("%w: %s: it names trigger %.80q", ErrUnreadable, name, d.Name)
	}
	d.Revision = e.Revision()
	return &d, nil
}

// Pause stops every runner taking messages of trigger name (those being
// handled finish); the messages wait in the stream, and Resume takes them
// up where they were. Pausing a paused trigger is a no-op. Errors:
// ErrNotFound.
func Pause(ctx context.Context, p *producer.Producer, name string) (*Def, error) {
	return setPaused(ctx, p, name, true)
}

// Resume undoes Pause. Errors: ErrNotFound.
func Resume(ctx context.Context, p *producer.Producer, name string) (*Def, error) {
	return setPaused(ctx, p, name, false)
}

func setPaused(ctx context.Context, p *producer.Producer, name string, paused bool) (*Def, error) {
	b, _, _, err := bucket(ctx, p)
	if err != nil {
		return nil, err
	}
	for {
		d, err := get(ctx, b, name)
		if err != nil {
			return nil, err
		}
		if d.Paused == paused {
			return d, nil
		}
		d.Paused, d.Updated = paused, time.Now().UTC()
		data, _ := json.Marshal(d)
		rev, err := b.Update(ctx, kv.TriggerKey(name), data, d.Revision)
		if err != nil && isWrongRev(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("trigger %s: %w", name, err)
		}
		d.Revision = rev
		return d, nil
	}
}

// Delete removes trigger name: its definition (runners stop it), its
// durable consumer and, for a trigger on plain subjects, its capture
// stream with the messages not yet turned into runs. Runs it made are
// untouched. A trigger declared in code is defined again when its program
// starts. A definition that is unreadable (ErrUnreadable) or cannot run
// is removed too, with the capture stream of that name if there is one.
// Errors: ErrNotFound.
func Delete(ctx context.Context, p *producer.Producer, name string) error {
	b, js, scfg, err := bucket(ctx, p)
	if err != nil {
		return err
	}
	e, err := getEntry(ctx, b, name)
	if err != nil {
		return err
	}
	if err := b.Purge(ctx, kv.TriggerKey(name)); err != nil {
		return fmt.Errorf("trigger %s: %w", name, err)
	}
	d, err := decodeDef(e, name)
	switch {
	case err != nil || d.Stream == "":
		// Capture stream (or, for an unreadable definition, the one it
		// may have had). Only a valid name can have one.
		if len(name) > MaxNameLen || jetflow.ValidateRunID(name) != nil {
			return nil
		}
		err := js.DeleteStream(ctx, kv.CaptureStream(scfg, name))
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("trigger %s: capture stream: %w", name, err)
		}
		if d == nil {
			// Unreadable: the trigger it overwrote may have had a
			// consumer on a user's stream, which no definition names now.
			sweepConsumers(ctx, js, kv.TriggerConsumer(scfg, name))
		}
		return nil
	case !validStreamName(d.Stream):
		sweepConsumers(ctx, js, kv.TriggerConsumer(scfg, name))
		return nil // no stream of that name, so no consumer there
	}
	err = js.DeleteConsumer(ctx, d.Stream, kv.TriggerConsumer(scfg, name))
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("trigger %s: consumer: %w", name, err)
	}
	return nil
}

// List returns every trigger, sorted by name, with its live runners'
// counters and what its consumer holds.
func List(ctx context.Context, p *producer.Producer) ([]Info, error) {
	d := engine.Of(p)
	return ListOn(ctx, d.JetStream(), d.Streams())
}

// ListOn is List for a caller without a producer.
func ListOn(ctx context.Context, js jetstream.JetStream, scfg streams.Config) ([]Info, error) {
	tis, err := kv.ReadTriggers(ctx, js, scfg)
	if err != nil {
		return nil, fmt.Errorf("trigger: %w", err)
	}
	return tis, nil
}

// sweepConsumers deletes the durable consumer named consumer from every
// stream that has one: what a trigger left on a user's stream when its
// definition was overwritten by one that no longer names that stream.
// It is best effort: a user not allowed to list streams or delete their
// consumers leaves them (the first denial ends the sweep at once).
func sweepConsumers(ctx context.Context, js jetstream.JetStream, consumer string) {
	// Best effort (above): a failure leaves the consumers, nothing else.
	_ = natsperm.Do(ctx, js.Conn(), func(ctx context.Context) error {
		names := js.StreamNames(ctx)
		var found []string
		for s := range names.Name() {
			found = append(found, s)
		}
		if err := names.Err(); err != nil {
			return err
		}
		for _, s := range found {
			err := js.DeleteConsumer(ctx, s, consumer)
			if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return err
			}
		}
		return nil
	}, "$JS.API.STREAM.NAMES", "$JS.API.CONSUMER.DELETE")
}
