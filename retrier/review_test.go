package retrier_test

import (
	"math"
	"testing"

	"github.com/jetflow-dev/jetflow/retrier"
)

// A MaxBackoff or InitialBackoff near the largest Duration caps the delay:
// it never wraps to a negative delay (an immediate retry).
func TestDelayHugeValues(t *testing.T) {
	t.Parallel()
	for _, o := range []retrier.Options{
		{NoJitter: true, MaxBackoff: math.MaxInt64},
		{MaxBackoff: math.MaxInt64},
		{NoJitter: true, InitialBackoff: math.MaxInt64, MaxBackoff: math.MaxInt64},
		{InitialBackoff: math.MaxInt64},
		{NoJitter: true, InitialBackoff: math.MaxInt64 / 4, MaxBackoff: math.MaxInt64 - 1},
	} {
		for _, k := range []int{1, 2, 60, 200, math.MaxInt} {
			if d := o.Delay(k); d <= 0 {
				t.Errorf("%+v Delay(%d) = %s, want positive", o, k, d)
			}
		}
	}
}

