package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// client is a connection and a producer for one command.
type client struct {
	nc *nats.Conn
	js jetstream.JetStream
	p  *producer.Producer
	sc streams.Config
}

func (c *client) Close() { c.nc.Close() }

// client connects and opens a producer on the server's jetflow streams.
// It never creates or changes them (producer.ProvisionOff): a CLI command
// needs only the permissions it uses (docs/permissions.md), and streams are
// provisioned by `jetflow provision`, `jetflow dev` or the application.
func (c *connFlags) client(ctx context.Context) (*client, error) {
	nc, js, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	sc := c.streams()
	p, err := producer.New(ctx, js, producer.Config{Streams: sc, Provision: producer.ProvisionOff})
	if err != nil {
		nc.Close()
		switch {
		case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
			return nil, fmt.Errorf("%s: JetStream is not enabled on this server", c.displayURL())
		case errors.Is(err, streams.ErrNotProvisioned):
			return nil, fmt.Errorf("%s: %w (prefix %s): run `jetflow provision`, start `jetflow dev`, or start a worker first", c.displayURL(), err, sc.WithDefaults().Prefix)
		}
		return nil, fmt.Errorf("%s: %w", c.displayURL(), err)
	}
	return &client{nc: nc, js: js, p: p, sc: sc}, nil
}

// notFoundError reads "run X: not found" and matches jetflow.ErrNotFound.
type notFoundError struct{ what, id string }

func (e *notFoundError) Error() string { return e.what + " " + e.id + ": not found" }
func (e *notFoundError) Unwrap() error { return jetflow.ErrNotFound }

// getRun reads run id, with a clear error for an unknown or invalid id.
func (c *client) getRun(ctx context.Context, id string) (*jetflow.Run, error) {
	if err := jetflow.ValidateRunID(id); err != nil {
		return nil, fmt.Errorf("run %q: not a valid run id (letters, digits, '_' or '-'): %w", id, err)
	}
	r, err := c.p.Get(ctx, id)
	if errors.Is(err, jetflow.ErrNotFound) {
		return nil, &notFoundError{"run", id}
	}
	return r, err
}

// functions returns what live workers serve (kv.ReadFunctions: entries of
// workers gone have expired). fn "" reads every function, else only fn.
func (c *client) functions(ctx context.Context, fn string) ([]kv.FunctionInfo, error) {
	return kv.ReadFunctions(ctx, c.js, c.sc, fn)
}
