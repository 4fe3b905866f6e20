package pool

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jetflow-dev/jetflow"
)

// pass starts what can start now and returns how long to wait before the
// next pass if nothing wakes the dispatcher earlier.
func (d *dispatcher) pass(ctx context.Context) time.Duration {
	pl := d.pl
	pl.stat(func(s *DispatcherStats) { s.Passes++ })
	for round := 0; ; round++ {
		now := pl.now().UnixNano()
		d.due(now)
		if d.nothingToDo() {
			return d.untilLater(now, time.Hour)
		}
		if round > 32 {
			return pl.cfg.PollInterval
		}
		if again, wait := d.round(ctx, now); !again {
			return wait
		}
	}
}

// due makes ready the entries whose time has come at now, and runnable the
// keys whose throttle has passed.
func (d *dispatcher) due(now int64) {
	for d.later.Len() > 0 && d.later[0].at <= now {
		e := heap.Pop(&d.later).(*entry)
		if d.live(e) {
			d.arrive(e)
		}
	}
	for d.throttled.Len() > 0 && d.throttled[0].until <= now {
		kq := heap.Pop(&d.throttled).(*keyQ)
		kq.throttled = false
		d.activate(kq)
		d.forgetKey(kq)
	}
}

// nothingToDo reports whether a pass has nothing to start, give back or
// admit.
func (d *dispatcher) nothingToDo() bool {
	return d.nready == 0 && len(d.releases) == 0 && len(d.dirty) == 0
}

// round is one try of a pass at now, against the pool state: it gives back
// the slots seen ending, admits new items, and starts what the free slots,
// the rate and the keys allow. It returns again when the pass goes on (it
// started items, or lost the state's compare-and-swap), else how long to
// wait.
func (d *dispatcher) round(ctx context.Context, now int64) (again bool, wait time.Duration) {
	pl := d.pl
	st, rev, err := d.state(ctx)
	if err != nil {
		d.warnState(ctx, err)
		return false, pl.cfg.PollInterval
	}
	released := d.applyReleases(st)
	counts := st.runningByKey()
	d.admit(st, counts)
	d.unblock(st, counts)
	free := st.Max - len(st.Running)
	allow, rateNext := st.allowance(now)
	k := min(free, allow, pl.cfg.MaxStartsPerPass, d.nready)
	if k <= 0 {
		if again, wait := d.flush(ctx, st, rev, released); again || wait > 0 {
			return again, wait
		}
		return false, d.noStart(now, free, rateNext)
	}
	t := st.grantTime(now)
	picked, held := d.pick(st, counts, k, t)
	if len(picked) == 0 {
		d.putBack(held)
		if again, wait := d.flush(ctx, st, rev, released); again || wait > 0 {
			return again, wait
		}
		// Every runnable key is at its limit or throttled, or its items
		// wait for their previous attempt's slot: the releases and the
		// throttle timer wake the next pass.
		return false, d.untilLater(now, time.Hour)
	}
	if err := d.reserve(ctx, st, rev, t, picked, held); err != nil {
		if errors.Is(err, errConflict) {
			return true, 0
		}
		d.warnState(ctx, err)
		return false, pl.cfg.PollInterval
	}
	d.launch(ctx, t, picked)
	return true, 0
}

func (d *dispatcher) warnState(ctx context.Context, err error) {
	if ctx.Err() == nil {
		d.pl.log.Warn("pool state", "pool", d.pl.name, "error", err)
	}
}

// flush writes the releases alone (released of them were running) when
// nothing starts. It returns again when the pass goes on, or a wait after
// a failed write.
func (d *dispatcher) flush(ctx context.Context, st *poolState, rev uint64, released int) (again bool, wait time.Duration) {
	if released == 0 {
		clear(d.releases) // nothing of them was running
		return false, 0
	}
	if err := d.putState(ctx, st, rev); err == nil {
		clear(d.releases)
	} else if !errors.Is(err, errConflict) {
		return false, d.pl.cfg.PollInterval
	}
	return true, 0
}

// noStart returns how long to wait when no slot (free of them) or no token
// is left: until the rate gives a token back at rateNext (Unix ns), or
// until a wake.
func (d *dispatcher) noStart(now int64, free int, rateNext int64) time.Duration {
	if d.nready == 0 {
		return d.untilLater(now, time.Hour)
	}
	d.blocked = true
	if free > 0 && rateNext > 0 {
		return d.untilLater(now, time.Duration(rateNext-now))
	}
	return d.untilLater(now, time.Hour)
}

// reserve writes the slots of the picked entries, granted at t, into the
// pool state, and puts the held entries back; the picked ones go back too
// when the write fails.
func (d *dispatcher) reserve(ctx context.Context, st *poolState, rev uint64, t int64, picked, held []*entry) error {
	for _, e := range picked {
		st.Running[e.id] = slot{Attempt: e.q.Attempt, Granted: t, Key: e.q.Key}
	}
	st.pruneKeyStarts(t)
	st.recordStarts(t, len(picked))
	err := d.putState(ctx, st, rev)
	d.putBack(held)
	if err != nil {
		d.putBack(picked)
		return err
	}
	clear(d.releases)
	return nil
}

// launch grants the picked entries their slots, granted at t, each in its
// own goroutine.
func (d *dispatcher) launch(ctx context.Context, t int64, picked []*entry) {
	for _, e := range picked {
		d.drop(e)
		delete(d.index, e.id)
		d.sem <- struct{}{}
		d.wg.Add(1)
		go func() {
			defer func() { <-d.sem; d.wg.Done() }()
			// A grant under way finishes even if the term ends.
			d.recordCollapsed(e)
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			d.grant(gctx, e, t)
		}()
	}
}

// state returns a copy of the pool state to change, and its revision.
func (d *dispatcher) state(ctx context.Context) (*poolState, uint64, error) {
	if d.st == nil {
		st, rev, ok, err := d.pl.st.getState(ctx, d.pl.name)
		if errors.Is(err, jetflow.ErrBadRecord) {
			// Another client's garbage: the active dispatcher rebuilds it.
			if rerr := d.pl.rebuildState(ctx, rev, err); rerr != nil {
				err = fmt.Errorf("%w; rebuild: %w", err, rerr)
			}
			return nil, 0, err
		}
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			// Deleted by another client: the active dispatcher makes it
			// again, as New would.
			err := fmt.Errorf("pool %s: %w", d.pl.name, ErrNoPool)
			if rerr := d.pl.rebuildState(ctx, 0, err); rerr != nil {
				err = fmt.Errorf("%w; rebuild: %w", err, rerr)
			}
			return nil, 0, err
		}
		if st.clampFuture(d.pl.now().UnixNano()) {
			// Written back at once, or every read would clamp them to
			// its own now, and the window would never pass.
			nrev, err := d.pl.st.putState(ctx, d.pl.name, st, rev)
			if err != nil {
				return nil, 0, err
			}
			d.pl.log.Warn("pool start times in the future brought back to now", "pool", d.pl.name)
			rev = nrev
		}
		d.st, d.rev = st, rev
	}
	c := *d.st
	c.Running = maps.Clone(d.st.Running)
	if c.Running == nil {
		c.Running = map[string]slot{}
	}
	c.Starts = slices.Clone(d.st.Starts)
	if d.st.KeyStarts != nil {
		c.KeyStarts = make(map[string][]int64, len(d.st.KeyStarts))
		for k, v := range d.st.KeyStarts {
			c.KeyStarts[k] = slices.Clone(v)
		}
	}
	return &c, d.rev, nil
}

// putState writes st if the state is still at rev, and keeps it as the
// current state; on a conflict the next pass reads the state again.
func (d *dispatcher) putState(ctx context.Context, st *poolState, rev uint64) error {
	nrev, err := d.pl.st.putState(ctx, d.pl.name, st, rev)
	if err != nil {
		d.st = nil
		return err
	}
	d.st, d.rev = st, nrev
	return nil
}

// applyReleases removes from st the slots of attempts seen ending, and
// returns how many it removed.
func (d *dispatcher) applyReleases(st *poolState) int {
	n := 0
	for id, a := range d.releases {
		if s, ok := st.Running[id]; ok && s.Attempt == a {
			delete(st.Running, id)
			n++
		}
	}
	return n
}

func (d *dispatcher) untilLater(now int64, max time.Duration) time.Duration {
	for d.later.Len() > 0 && !d.live(d.later[0]) {
		heap.Pop(&d.later)
	}
	if d.later.Len() > 0 {
		if w := time.Duration(d.later[0].at - now); w < max {
			max = w
		}
	}
	if d.throttled.Len() > 0 {
		if w := time.Duration(d.throttled[0].until - now); w < max {
			max = w
		}
	}
	if max < time.Millisecond {
		max = time.Millisecond
	}
	return max
}
