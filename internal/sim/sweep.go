package sim

import (
	"fmt"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/liveness"
)

// sweeper is the scheduler's repair sweep: a pending record with no message
// gets its message published again; an in-progress one with no message
// whose record has not changed for StaleAfter (on the sweep's clock) fails
// as lost (at most once) or is dispatched again. Its index learns of
// records from the leader (a watch); it forgets a run that ended or that
// does not exist.
type sweeper struct {
	w     *World
	index map[string]bool
	live  liveness.Watch
}

func (s *sweeper) act() {
	ids := sortedKeys(s.index)
	if len(ids) == 0 {
		return
	}
	id := ids[s.w.rng.IntN(len(ids))]
	if s.w.stream.queued(id) {
		return
	}
	v, ok := s.w.bucket.get(id)
	if !ok && !s.w.cfg.Bugs.StaleForget {
		// A replica behind must not decide to forget: ask the leader.
		var err error
		if v, ok, err = s.w.bucket.leaderGet(id); err != nil {
			return
		}
	}
	switch {
	case !ok || v.rec.State.Terminal():
		s.w.tracef("sweep: forgets %s (found %v)", id, ok)
		delete(s.index, id)
	case v.rec.State == jetflow.Pending:
		err := s.w.stream.publish(id, v.rec.Attempts+1, v.rev, v.rec.AMO, 0)
		s.w.tracef("sweep: %s pending with no message: publish attempt %d: %v", id, v.rec.Attempts+1, err)
	case v.rec.State == jetflow.InProgress:
		s.running(v)
	}
}

// running is repairRunning for one record read (any replica).
func (s *sweeper) running(v version) {
	if !liveness.Lost(s.live.Unchanged(v.rec.ID, v.rev, base.Add(s.w.now)), staleAfter) {
		return
	}
	s.live.Forget(v.rec.ID)
	r := v.rec
	if r.AMO {
		r.State, r.Token = jetflow.Failed, s.w.token()
		_, err := s.w.bucket.write(op{rec: r, step: engine.Lost, from: jetflow.InProgress, expect: v.rev})
		s.w.tracef("sweep: %s in progress, owner %s lost, no message: failed: %v", r.ID, r.Owner, err)
		return
	}
	// The message does not carry the record (revision 0): its worker
	// reads it, and takes the run over from its lost owner.
	key := fmt.Sprintf("%s/%d/repair%d", r.ID, r.Attempts, v.rev)
	err := s.w.stream.publishAs(key, r.ID, r.Attempts, 0, r.AMO, 0)
	s.w.tracef("sweep: %s in progress, owner %s lost, no message: dispatched again: %v", r.ID, r.Owner, err)
}
