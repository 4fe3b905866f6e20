package sentinel_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jetflow-dev/jetflow/internal/sentinel"
)

func TestKind(t *testing.T) {
	parent := errors.New("jetflow: unreadable run record")
	k := sentinel.Kind("jetflow: unreadable cron record", parent)
	other := sentinel.Kind("jetflow: unreadable cron record", parent)
	err := fmt.Errorf("%w: %q: bad", k, "x")
	if got := err.Error(); got != `jetflow: unreadable cron record: "x": bad` {
		t.Fatalf("text %q", got)
	}
	if !errors.Is(err, k) || !errors.Is(err, parent) || errors.Is(err, other) {
		t.Fatalf("matches: kind %v parent %v another kind of the same text %v", errors.Is(err, k), errors.Is(err, parent), errors.Is(err, other))
	}
}
