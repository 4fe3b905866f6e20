package jetflow_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
)

// A Call of a kind that is neither Retryable nor AtMostOnce is refused
// before anything is written (it was recorded as given); the empty kind is
// Retryable.
func TestCallKindValidated(t *testing.T) {
	t.Parallel()
	for _, k := range []jetflow.Kind{"", jetflow.Retryable, jetflow.AtMostOnce} {
		if _, err := (jetflow.Call{Name: "orders.ship", Kind: k, Args: 1}).Encode(); err != nil {
			t.Errorf("kind %q: %v", k, err)
		}
	}
	for _, k := range []jetflow.Kind{"weird", "AtMostOnce", jetflow.Kind(strings.Repeat("k", 10000))} {
		_, err := (jetflow.Call{Name: "orders.ship", Kind: k, Args: 1}).Encode()
		if !errors.Is(err, jetflow.ErrInvalidName) || len(err.Error()) > 200 {
			t.Errorf("kind %.20q: %v, want a short ErrInvalidName", k, err)
		}
	}
}
