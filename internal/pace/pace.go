// Package pace spreads a background read over time, so that it takes a
// bounded share of the machine beside the work that is due.
package pace

import (
	"context"
	"time"
)

// Pacer lets at most PerSec items a second pass Wait (0: no limit). Its
// zero value with PerSec set is ready; it is not safe for concurrent use.
type Pacer struct {
	PerSec int
	n      int
	start  time.Time
}

// chunk is how many items pass between a pacer's waits.
const chunk = 500

// Wait counts one item and, every chunk items, blocks while the reader is
// ahead of its pace, or until ctx ends.
func (p *Pacer) Wait(ctx context.Context) {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	p.n++
	if p.n%chunk != 0 {
		return
	}
	if d := Ahead(p.n, p.PerSec, time.Since(p.start)); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// Ahead is how long a reader that has read n items in elapsed waits to
// read at most perSec a second (0: no limit).
func Ahead(n, perSec int, elapsed time.Duration) time.Duration {
	if perSec <= 0 {
		return 0
	}
	return max(time.Duration(float64(n)/float64(perSec)*float64(time.Second))-elapsed, 0)
}
