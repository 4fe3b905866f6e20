package producer

import (
	"context"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/nats-io/nats.go/jetstream"
)

// Pending is a run scheduled by EnqueueAsync whose durability is not yet
// confirmed.
type Pending struct {
	id  string
	ack jetstream.PubAckFuture
	err error // a synchronous result (runs EnqueueAsync does not pipeline)
}

// ID is the run's id (known at once).
func (f *Pending) ID() string { return f.id }

// Wait blocks until the run is durable (nil) or its publish failed. A
// failed run was not scheduled; scheduling it again is safe only with an id
// of the caller's (WithID), as with any enqueue whose answer was lost.
func (f *Pending) Wait(ctx context.Context) error {
	if f.ack == nil {
		return f.err
	}
	select {
	case <-f.ack.Ok():
		return nil
	case err := <-f.ack.Err():
		return fmt.Errorf("producer: publish run %s: %w", f.id, err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// EnqueueAsync schedules a run to start now without waiting for the server:
// the run is durable once Wait returns nil. Publishes are pipelined (the
// JetStream context's async window, WithPublishAsyncMaxPending, bounds how
// many wait for their acknowledgement; a call waits while it is full, up to
// ctx's deadline or a minute), which is how a producer reaches
// JetStream's publish rate; Enqueue waits for each run. Runs that need their
// record written first (WithID, WithParent,
// WithOnComplete) are scheduled synchronously, as Enqueue does, and their
// Pending holds the result. Errors before anything is sent are returned at
// once: jetflow.ErrInvalidName, jetflow.ErrBadArgs, jetflow.ErrInvalidRunID,
// ErrArgsTooLarge.
func (p *Producer) EnqueueAsync(ctx context.Context, c jetflow.Call, opts ...Option) (pd *Pending, err error) {
	ctx, span := telemetry.StartPublish(ctx, c.Name)
	if span.On() {
		// The span ends when the message is sent, not when it is durable.
		defer func() {
			id, serr := "", err
			if pd != nil {
				id = pd.id
				if serr == nil && pd.ack == nil {
					serr = pd.err
				}
			}
			span.End(id, p.subject(c.Name, id), serr)
		}()
	}
	r, o, err := p.prepare(ctx, time.Time{}, c, opts)
	if err != nil {
		return nil, err
	}
	if err := p.checkSize(len(r.Args)); err != nil {
		return nil, err
	}
	if !p.direct(r, o) {
		id, err := p.runAt(ctx, time.Time{}, c, opts)
		if id == "" {
			return nil, err
		}
		return &Pending{id: id, err: err}, nil
	}
	// A full async window (acks slower than publishes: a fsync per write, a
	// busy server) makes the call wait, up to ctx's deadline or a minute.
	stall := time.Minute
	if d, ok := ctx.Deadline(); ok {
		stall = max(time.Until(d), time.Millisecond)
	}
	f, err := p.js.PublishMsgAsync(p.cfg.Message(directEnvelope(r)), jetstream.WithStallWait(stall))
	if err != nil {
		return nil, fmt.Errorf("producer: publish run %s: %w", r.ID, err)
	}
	return &Pending{id: r.ID, ack: f}, nil
}
