package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jetflow-dev/jetflow"
)

// WithOnComplete runs c once when this run ends (success, failed or
// canceled). c's function receives a jetflow.Completion: the finished record
// and c's args as Context. It runs exactly once: its run id is
// jetflow.CompletionID(run id), and the repair sweep schedules it if the
// process that ended the run died before it could.
func WithOnComplete(c jetflow.Call) Option {
	return func(o *options) { o.onComplete = &c }
}

// Complete schedules the on-complete run of r, if r has one and has ended.
// It is idempotent.
func (p *Producer) Complete(ctx context.Context, r *jetflow.Run) error {
	if r == nil || r.OnComplete == nil || !r.State.Terminal() {
		return nil
	}
	rec := *r
	rec.OnComplete = nil
	args, err := json.Marshal(jetflow.Completion{Run: &rec, Context: r.OnComplete.Args})
	if err != nil {
		return fmt.Errorf("%w: completion of %s: %v", jetflow.ErrBadArgs, r.ID, err)
	}
	_, err = p.Enqueue(ctx, jetflow.RawCall(r.OnComplete.Function, args),
		WithID(jetflow.CompletionID(r.ID)), WithParent(r.ID))
	if errors.Is(err, ErrAlreadyExists) {
		return nil
	}
	return err
}
