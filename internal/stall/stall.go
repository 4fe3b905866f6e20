// Package stall tells a process that it has been stopped: by SIGSTOP, a VM
// pause, a long GC or a starved CPU. Such a stop cannot be seen from the
// messages it held (they look as fresh as when they arrived), but it can
// be seen on the process's own monotonic clock: a ticker that ticks late.
package stall

import (
	"context"
	"sync/atomic"
	"time"
)

// Detector notices stalls of its process: a tick of its ticker that comes
// more than Threshold late. It is safe for concurrent use.
type Detector struct {
	threshold, window time.Duration
	base              time.Time    // monotonic origin
	lastTick          atomic.Int64 // since base, ns
	stallEnd          atomic.Int64 // since base, ns, of the last late tick; -1: none
}

// New returns a Detector that counts a gap of more than threshold between
// ticks as a stall, and reports one for window after it ended.
func New(threshold, window time.Duration) *Detector {
	d := &Detector{threshold: threshold, window: window, base: time.Now()}
	d.stallEnd.Store(-1)
	return d
}

// Run ticks every threshold/4 until ctx ends. Until Run runs (and after it
// returns), the process counts as stalled once threshold has passed since
// its last tick: Recent errs on the safe side.
func (d *Detector) Run(ctx context.Context) {
	t := time.NewTicker(max(d.threshold/4, time.Millisecond))
	defer t.Stop()
	d.lastTick.Store(int64(time.Since(d.base))) // not a stall: the start
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.tick()
		}
	}
}

func (d *Detector) tick() {
	now := int64(time.Since(d.base))
	if now-d.lastTick.Load() > int64(d.threshold) {
		d.stallEnd.Store(now)
	}
	d.lastTick.Store(now)
}

// Recent reports whether the process is stalled now, or a stall ended less
// than window ago.
func (d *Detector) Recent() bool {
	return Stalled(time.Since(d.base), time.Duration(d.lastTick.Load()), time.Duration(d.stallEnd.Load()), d.threshold, d.window)
}

// Stalled is the rule of Recent, at now: the last tick is older than
// threshold (the ticker has not run since a stop), or the last stall ended
// (stallEnd >= 0) less than window ago. Times are offsets on one monotonic
// clock.
func Stalled(now, lastTick, stallEnd, threshold, window time.Duration) bool {
	if now-lastTick > threshold {
		return true
	}
	return stallEnd >= 0 && now-stallEnd < window
}
