package sim

import (
	"fmt"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
)

// checker holds the invariants' ground truth.
type checker struct {
	w        *World
	accepted map[string]bool // ids a producer was told stored, or taken
	order    []string        // accepted, in order
	starts   map[string]int  // handler starts per run/attempt
	amo      map[string]int  // handler starts per at-most-once run
	outcomes map[string]int  // recorded outcomes per run/attempt
}

func newChecker(w *World) *checker {
	return &checker{w: w, accepted: map[string]bool{}, starts: map[string]int{}, amo: map[string]int{}, outcomes: map[string]int{}}
}

func (c *checker) accept(id string) {
	if !c.accepted[id] {
		c.accepted[id] = true
		c.order = append(c.order, id)
	}
}

// started: a handler starts.
func (c *checker) started(id string, attempt int, amo bool) {
	key := fmt.Sprintf("%s/%d", id, attempt)
	c.starts[key]++
	if c.starts[key] > 1 {
		c.w.fail("handler of %s attempt %d started twice", id, attempt)
	}
	if amo {
		c.amo[id]++
		if c.amo[id] > 1 {
			c.w.fail("at-most-once run %s started twice", id)
		}
	}
}

// outcomeSteps record an attempt's outcome.
var outcomeSteps = map[engine.Step]bool{engine.Succeed: true, engine.Fail: true, engine.Retry: true, engine.Lost: true}

// committed checks a write as it commits over cur (when exists).
func (w *World) committed(o op, cur version, exists bool, v version) {
	w.tracef("commit %s rev %d: %s %s attempts %d owner %q", v.rec.ID, v.rev, o.step, v.rec.State, v.rec.Attempts, v.rec.Owner)
	c := w.check
	if exists && cur.rec.State.Terminal() {
		w.fail("terminal record of %s (%s, rev %d) overwritten by %s", v.rec.ID, cur.rec.State, cur.rev, o.step)
	}
	if outcomeSteps[o.step] {
		key := fmt.Sprintf("%s/%d", v.rec.ID, v.rec.Attempts)
		c.outcomes[key]++
		if c.outcomes[key] > 1 {
			w.fail("two outcomes recorded for %s attempt %d", v.rec.ID, v.rec.Attempts)
		}
	}
	takeover := exists && cur.rec.State == jetflow.InProgress && (o.step == engine.Lost || o.step == engine.Claim)
	if takeover && w.now-cur.at < lostAfter {
		w.fail("live owner %s of %s taken over: its record changed %v ago", cur.rec.Owner, v.rec.ID, w.now-cur.at)
	}
	if !v.rec.State.Terminal() {
		w.sweep.index[v.rec.ID] = true
	}
}

// step: every accepted run has a committed record.
func (c *checker) step() {
	for _, id := range c.order {
		if _, ok := c.w.bucket.latest(id); !ok {
			c.w.fail("accepted run %s lost: no committed record", id)
			return
		}
	}
}

// final: after the drain, every accepted run has ended or has something
// that will run it (a message, or the repair sweep's index).
func (c *checker) final() {
	for _, id := range sortedKeys(c.accepted) {
		v, ok := c.w.bucket.latest(id)
		switch {
		case !ok:
			c.w.fail("accepted run %s lost: no committed record", id)
		case v.rec.State.Terminal(), c.w.stream.queued(id):
		case c.w.sweep.index[id]:
		default:
			c.w.fail("accepted run %s lost: %s with no message and unknown to the repair sweep", id, v.rec.State)
		}
	}
}
