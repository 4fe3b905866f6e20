package retrier_test

import (
	"fmt"

	"github.com/jetflow-dev/jetflow/retrier"
)

// The default schedule, without jitter: the delay after the k-th failure is
// InitialBackoff * Base^k, as in Convex's action retrier. After the 5th
// failure (MaxFailures 4) the run fails.
func ExampleOptions_Delay() {
	o := retrier.Options{NoJitter: true}
	for k := 1; k <= 4; k++ {
		fmt.Printf("after failure %d: %s\n", k, o.Delay(k))
	}
	// Output:
	// after failure 1: 500ms
	// after failure 2: 1s
	// after failure 3: 2s
	// after failure 4: 4s
}
