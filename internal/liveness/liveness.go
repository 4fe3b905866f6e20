// Package liveness decides whether the owner of a run in progress is gone,
// without trusting any other host's clock: an owner is lost when its run's
// record has not changed (its heartbeats write a new revision) for a while
// as measured on the checker's own clock, never by comparing a time the
// owner wrote with the checker's time (a clock 30 s ahead would take live
// runs over).
package liveness

import (
	"sync"
	"time"
)

// maxWatched bounds the runs a Watch remembers; past it, it forgets them
// all (which only delays a takeover).
const maxWatched = 100_000

// Watch remembers, per run, the revision of its record last seen in
// progress and since when it has been seen unchanged. Times come from the
// checker's clock (time.Now readings carry a monotonic clock, so a jump of
// the wall clock does not count). Safe for concurrent use.
type Watch struct {
	mu   sync.Mutex
	seen map[string]seen
}

type seen struct {
	rev   uint64
	since time.Time
}

// Unchanged returns how long run id's record has been seen at revision rev,
// as of now: 0 when this is the first sight of that revision.
func (w *Watch) Unchanged(id string, rev uint64, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil || len(w.seen) >= maxWatched {
		w.seen = make(map[string]seen)
	}
	s, ok := w.seen[id]
	if !ok || s.rev != rev {
		w.seen[id] = seen{rev: rev, since: now}
		return 0
	}
	return max(now.Sub(s.since), 0)
}

// Forget drops run id (it ended, or was taken over).
func (w *Watch) Forget(id string) {
	w.mu.Lock()
	delete(w.seen, id)
	w.mu.Unlock()
}

// Lost is the rule: an owner is lost when its run's record has been seen
// unchanged for at least after.
func Lost(unchanged, after time.Duration) bool { return unchanged >= after }
