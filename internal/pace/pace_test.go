package pace_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/pace"
)

func TestAhead(t *testing.T) {
	for _, c := range []struct {
		n, perSec int
		elapsed   time.Duration
		want      time.Duration
	}{
		{500, 10_000, 0, 50 * time.Millisecond},                     // ahead of the pace: waits
		{500, 10_000, 20 * time.Millisecond, 30 * time.Millisecond}, // partly
		{500, 10_000, 50 * time.Millisecond, 0},                     // on the pace
		{500, 10_000, time.Second, 0},                               // behind it: never waits
		{10_000, 10_000, 400 * time.Millisecond, 600 * time.Millisecond},
		{500, 0, 0, 0}, // no limit
	} {
		if got := pace.Ahead(c.n, c.perSec, c.elapsed); got != c.want {
			t.Errorf("Ahead(%d, %d, %s) = %s, want %s", c.n, c.perSec, c.elapsed, got, c.want)
		}
	}
}

// 2,000 items at 10,000 a second take at least 200 ms (the waits come
// every 500 items: the last 500 pass at once).
func TestPacerHoldsItsRate(t *testing.T) {
	p := pace.Pacer{PerSec: 10_000}
	t0 := time.Now()
	for range 2_000 {
		p.Wait(context.Background())
	}
	if took := time.Since(t0); took < 150*time.Millisecond {
		t.Fatalf("2,000 items at 10,000/s passed in %s", took)
	}
}
