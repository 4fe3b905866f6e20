package scheduler

import (
	"container/heap"
	"context"
	"fmt"
	"time"
)

// DispatchDue publishes at once, on the calling goroutine, every delayed
// run (a run scheduled for later, or a retry waiting for its backoff) due
// by the scheduler's clock (Config.Now), whether or not this scheduler
// leads or is started: what the leader's dispatcher does when their time
// comes. It is the hook of a test that drives time with a fake clock
// (jetflowtest): a scheduler that is not started, a clock moved by hand,
// and DispatchDue after each move. A run the leader publishes too is
// harmless: publishes are deduplicated and state changes are
// compare-and-swap. It returns how many delayed entries it took
// (published, or dropped as obsolete: the run was canceled or changed
// meanwhile); an entry it could not publish stays for the next call and
// makes the error.
func (s *Scheduler) DispatchDue(ctx context.Context) (int, error) {
	d := s.oneShot()
	now := s.now()
	d.setLoaded(now.Unix())
	if err := d.scan(ctx, "*", now.Unix()); err != nil {
		return 0, err
	}
	taken, failed := 0, 0
	for {
		d.mu.Lock()
		if d.h.Len() == 0 || d.h[0].due.After(now) {
			d.mu.Unlock()
			break
		}
		it := heap.Pop(&d.h).(*item)
		d.mu.Unlock()
		if d.publish(ctx, it) {
			taken++
		} else {
			failed++
		}
	}
	if failed > 0 {
		return taken, fmt.Errorf("scheduler: %d delayed runs not dispatched (tried again at the next call)", failed)
	}
	return taken, nil
}

// NextDue returns when the earliest delayed run is due; ok is false when
// no delayed run waits. With DispatchDue it lets a fake clock jump from
// one due time to the next.
func (s *Scheduler) NextDue(ctx context.Context) (due time.Time, ok bool, err error) {
	d := s.oneShot()
	d.setLoaded(1<<62 - 1)
	if err := d.scan(ctx, "*", 1<<62-1); err != nil {
		return time.Time{}, false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h.Len() == 0 {
		return time.Time{}, false, nil
	}
	return d.h[0].due, true, nil
}

// oneShot is a dispatcher for one call, outside any leadership term.
func (s *Scheduler) oneShot() *dispatcher {
	return newDispatcher(s, 1)
}
