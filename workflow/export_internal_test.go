package workflow

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/producer"
)

// SetClaimGrace sets how old an abandoned claim of a Restart must be to be
// taken over (claimGrace) until t ends. t must not run in parallel.
func SetClaimGrace(t testing.TB, d time.Duration) {
	old := claimGrace
	claimGrace = d
	t.Cleanup(func() { claimGrace = old })
}

// ArmForkJanitor arms the janitor that Restart arms before it claims
// workflow id's journal (id restarted from a workflow named name): a test
// that writes a dead Restart's claim by hand arms it as that Restart did.
func ArmForkJanitor(ctx context.Context, p *producer.Producer, name, id string) error {
	return armForkJanitor(ctx, p, name, id)
}
