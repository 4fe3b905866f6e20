package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/payload"
)

// args is the run's arguments as the handler decodes them: the message's
// body, or the payload its reference names (docs/wire-format.md, "Large
// payloads"). A reference to an object that is not there fails the run
// for good (jetflow.ErrBadArgs and jetflow.ErrPayloadMissing match), as
// args that do not decode do; another error of the read is a failed
// attempt, retried.
func (j *jobCore) args(ctx context.Context) ([]byte, error) {
	b, err := payload.Resolve(ctx, j.w.js, j.w.scfg.PayloadsBucket(), j.env.Args)
	if errors.Is(err, jetflow.ErrPayloadMissing) {
		return nil, jetflow.Permanent(fmt.Errorf("%w: %w", jetflow.ErrBadArgs, err))
	}
	if err != nil {
		return nil, fmt.Errorf("run %s: read its args: %w", j.env.ID, err)
	}
	return b, nil
}

// offloadResult moves a result that SetResult took above
// payload.Threshold to the payloads bucket, the record then holding its
// reference. It runs when the handler returns nil, in its context: a
// failure is the attempt's.
func (j *jobCore) offloadResult(ctx context.Context) error {
	j.mu.Lock()
	b := j.result
	j.mu.Unlock()
	if !payload.Above(b, j.w.nc.MaxPayload()) {
		return nil
	}
	ref, err := payload.Offload(ctx, j.w.js, j.w.scfg.PayloadsBucket(), j.env.ID, "result", b)
	if err != nil {
		return fmt.Errorf("run %s: store its result: %w", j.env.ID, err)
	}
	j.mu.Lock()
	j.result = ref
	j.mu.Unlock()
	return nil
}
