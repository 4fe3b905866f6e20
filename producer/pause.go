package producer

import (
	"context"

	"github.com/jetflow-dev/jetflow/kv"
)

// PauseFunction pauses function name on every worker: they stop taking its
// runs (those running finish), and its runs wait as pending, in order,
// until ResumeFunction. Runs keep being accepted. Errors:
// jetflow.ErrInvalidName, and the server's (a user without write access to
// the functions bucket gets its permissions violation).
func (p *Producer) PauseFunction(ctx context.Context, name string) error {
	return kv.SetPaused(ctx, p.js, p.cfg, name, true)
}

// ResumeFunction undoes PauseFunction: workers take the function's runs
// again.
func (p *Producer) ResumeFunction(ctx context.Context, name string) error {
	return kv.SetPaused(ctx, p.js, p.cfg, name, false)
}

// PausedFunctions returns the functions paused now.
func (p *Producer) PausedFunctions(ctx context.Context) (map[string]bool, error) {
	return kv.Paused(ctx, p.js, p.cfg)
}
