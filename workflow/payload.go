package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/payload"
	"github.com/jetflow-dev/jetflow/producer"
)

// Large payloads (docs/wire-format.md, "Large payloads"): a workflow's
// input and result, a step's result and an event's payload above
// payload.Threshold are kept in the payloads bucket, the record or the
// journal entry holding the reference. offload and resolve are the two
// ends; for a small payload each is a size check.

// offload is b, or the reference to it once stored under owner/what. A
// failure to store it stops the segment, which is retried. A payload above
// payload.MaxSize stays as it is: the write that cannot hold it fails the
// workflow with ErrResultTooLarge (a step's fails the step: segment.put).
func (s *segment) offload(what string, b []byte) []byte {
	eng := engine.Of(s.d.p)
	if !payload.Above(b, eng.Conn().MaxPayload()) || len(b) > payload.MaxSize {
		return b
	}
	ref, err := payload.Offload(s.ctx, eng.JetStream(), eng.Streams().PayloadsBucket(), s.wf, what, b)
	if err != nil {
		s.abort(err)
	}
	return ref
}

// resolve is b, or the payload its reference names. A reference to an
// object that is not there is returned as an error matching
// jetflow.ErrBadArgs and jetflow.ErrPayloadMissing (the caller fails the
// workflow with it); another failure to read stops the segment, which is
// retried.
func (s *segment) resolve(b []byte) ([]byte, error) {
	eng := engine.Of(s.d.p)
	v, err := payload.Resolve(s.ctx, eng.JetStream(), eng.Streams().PayloadsBucket(), b)
	if errors.Is(err, jetflow.ErrPayloadMissing) {
		return nil, jetflow.Permanent(fmt.Errorf("%w: workflow %s: %w", jetflow.ErrBadArgs, s.wf, err))
	}
	if err != nil {
		s.abort(err)
	}
	return v, nil
}

// offloadInput is Start's input raw for workflow id, or the reference to
// it: an input above payload.MaxSize is producer.ErrArgsTooLarge.
func offloadInput(ctx context.Context, p *producer.Producer, id string, raw []byte) ([]byte, error) {
	if len(raw) > payload.MaxSize {
		return nil, fmt.Errorf("%w (%w): workflow %s: %d bytes of input, more than jetflow offloads (%d)",
			producer.ErrArgsTooLarge, jetflow.ErrBadArgs, id, len(raw), payload.MaxSize)
	}
	eng := engine.Of(p)
	return payload.Offload(ctx, eng.JetStream(), eng.Streams().PayloadsBucket(), id, "input", raw)
}
