package workflow

import (
	"testing"
	"time"
)

// SetClaimGrace sets how old an abandoned claim of a Restart must be to be
// taken over (claimGrace) until t ends. t must not run in parallel.
func SetClaimGrace(t testing.TB, d time.Duration) {
	old := claimGrace
	claimGrace = d
	t.Cleanup(func() { claimGrace = old })
}
