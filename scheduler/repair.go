package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/liveness"
	"github.com/jetflow-dev/jetflow/internal/pace"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
)

// fullRepairEvery is how often the repair loop reads every record although
// the run index names its candidates: a safety net.
const fullRepairEvery = time.Hour

// repairLoop sweeps every RepairInterval while the term lasts. Its first
// sweep, which reads every record, waits for the dispatcher to have read
// what is due (ready; at most a RepairInterval), and its reads of every
// record are paced (backgroundRate): runs coming due first.
func (s *Scheduler) repairLoop(ctx context.Context, ready <-chan struct{}) {
	select {
	case <-ctx.Done():
		return
	case <-ready:
	case <-time.After(s.cfg.RepairInterval):
	}
	t := time.NewTicker(s.cfg.RepairInterval)
	defer t.Stop()
	var lastFull time.Time
	for {
		var n int
		var err error
		if st := s.index.Stats(); st.CaughtUp && !lastFull.IsZero() && time.Since(lastFull) < fullRepairEvery {
			n, err = s.repairIndexed(ctx)
		} else {
			n, err = s.repair(ctx, true, &pace.Pacer{PerSec: backgroundRate})
			if err == nil {
				lastFull = time.Now()
			}
		}
		s.mu.Lock()
		s.stats.Sweeps++
		s.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("repair sweep", "error", err)
		} else if n > 0 {
			s.log.Info("repair sweep dispatched runs", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Repair finds pending runs whose message was never published (a crash
// between writing the record and publishing it) and publishes them; it
// commits or cancels children held by a parent that has ended. It returns
// how many runs it dispatched or settled. The leader runs it every
// RepairInterval; it is safe to run anywhere at any time.
//
// Repair reads the header of every record. The leader's loop does so at
// the start of its term and hourly; in between it reads only the runs the
// run index names (runs not ended, and ended runs with an on-complete
// callback written since the last sweep): its cost follows the work found,
// not the records kept.
func (s *Scheduler) Repair(ctx context.Context) (int, error) { return s.repair(ctx, false, nil) }

// RepairIndexed is the sweep the leader's loop runs between full sweeps:
// Repair over the runs the run index names (runs not ended that its
// indexer read or that the last full sweep handed it, and ended runs with
// an on-complete callback written since the last sweep), without reading
// every record. It finds nothing on a scheduler that has not led.
func (s *Scheduler) RepairIndexed(ctx context.Context) (int, error) { return s.repairIndexed(ctx) }

// repairIndexed is a sweep over the run index's candidates.
func (s *Scheduler) repairIndexed(ctx context.Context) (int, error) {
	cut := s.now().Add(-s.cfg.RepairGrace)
	var cands, notify, running, later []kv.Header
	for _, l := range s.index.Candidates(func(l runindex.Live) bool { return repairCandidate(l.State, l.Due, cut) }) {
		h := kv.Header{ID: l.ID, State: l.State, Function: l.Function, Due: l.Due}
		if h.State == jetflow.InProgress {
			running = append(running, h)
		} else {
			cands = append(cands, h)
		}
	}
	for _, h := range s.index.TakeNotify() {
		if h.Notify.Before(cut) {
			notify = append(notify, h)
		} else {
			later = append(later, h)
		}
	}
	s.index.GiveNotify(later)
	return s.settle(ctx, cands, notify, running)
}

// repair is a sweep over every record, paced by pace (nil: at once); seed
// hands the run index the runs not ended.
func (s *Scheduler) repair(ctx context.Context, seed bool, p *pace.Pacer) (int, error) {
	cut := s.now().Add(-s.cfg.RepairGrace)
	var cands, notify, running, open []kv.Header
	recent := s.now().Add(-s.scfg.Retention)
	err := s.store.Scan(ctx, func(h kv.Header) {
		if p != nil {
			p.Wait(ctx)
		}
		if seed && !h.State.Terminal() {
			// Handed over a page at a time: a million runs waiting are
			// never all held twice.
			if open = append(open, h); len(open) == seedPage {
				s.index.Seed(open)
				open = open[:0]
			}
		}
		if h.State == jetflow.Pending && !h.Due.IsZero() && h.Due.Before(cut) {
			cands = append(cands, h)
		}
		if h.State == jetflow.InProgress {
			running = append(running, h)
		}
		if h.State.Terminal() && notifyDue(h.Notify, cut, recent) {
			notify = append(notify, h)
		}
	})
	if err != nil {
		return 0, err
	}
	if seed {
		s.index.Seed(open)
	}
	return s.settle(ctx, cands, notify, running)
}

// seedPage is how many runs not ended a full sweep hands the run index at
// a time.
const seedPage = 1000

// settle repairs the candidates of a sweep (each is read again first).
func (s *Scheduler) settle(ctx context.Context, cands, notify, running []kv.Header) (int, error) {
	n := s.notifyCompleted(ctx, notify)
	for _, h := range cands {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if s.repairPending(ctx, h) {
			n++
		}
	}
	n += s.repairRunning(ctx, running)
	return n, nil
}

// notifyCompleted schedules the on-complete callbacks of ended runs that
// have none yet.
func (s *Scheduler) notifyCompleted(ctx context.Context, notify []kv.Header) int {
	n := 0
	for _, h := range notify {
		if _, _, err := s.store.Decide(ctx, jetflow.CompletionID(h.ID)); !errors.Is(err, jetflow.ErrNotFound) {
			continue
		}
		r, _, err := s.store.Decide(ctx, h.ID)
		if err != nil {
			continue
		}
		if err := s.d.Complete(ctx, r); err == nil {
			n++
		}
	}
	return n
}

// repairPending settles pending record h when nothing else will start it:
// no delayed entry the dispatcher has (or one overdue by more than
// StaleAfter: the dispatcher missed it) and no message waiting. A second
// publish is harmless: Nats-Msg-Id dedups it, and the worker's claim
// refuses a run that has moved on. It reports whether it repaired one.
func (s *Scheduler) repairPending(ctx context.Context, h kv.Header) bool {
	if _, ok, err := s.store.FindDelayed(ctx, h.Due, h.ID); err != nil || ok && h.Due.After(s.now().Add(-s.cfg.StaleAfter)) {
		return false
	}
	if q, err := s.store.Queued(ctx, h.Function, h.ID); err != nil || q {
		return false
	}
	r, _, err := s.store.Decide(ctx, h.ID)
	if err != nil || r.State != jetflow.Pending {
		if err == nil && r.State.Terminal() || errors.Is(err, jetflow.ErrNotFound) {
			s.index.Forget(h.ID)
		}
		return false
	}
	switch {
	case wfwire.IsWorkflow(r):
		// A workflow's record is started by its first segment, a run of
		// its own (workflow.Start writes the record, then publishes the
		// segment): publish that segment if Start died between the two.
		// A record held by its Restart (wfwire.ForkHolder: the Restart
		// died before it released it) is started the same way: its first
		// segment finishes the journal copy and the release before it
		// runs. Its hold is not a parent's: no orphan rule applies.
		return s.repairWorkflow(ctx, r)
	case r.HeldBy != "":
		if done, orphaned := s.settleHeld(ctx, r); done {
			return orphaned
		}
	}
	if err := s.d.Release(ctx, r); err != nil {
		s.log.Warn("repair dispatch", "run_id", r.ID, "error", err)
		return false
	}
	s.log.Info("repaired run: record without message", "run_id", r.ID, "function", r.Name)
	s.mu.Lock()
	s.stats.Repaired++
	s.mu.Unlock()
	return true
}

// settleHeld decides a held child r from its parent: done when
// nothing more is to be done now (its parent's attempt still runs, the
// read failed, or the child was canceled as an orphan: orphaned); not done
// when the parent succeeded with it, and it is to be released.
func (s *Scheduler) settleHeld(ctx context.Context, r *jetflow.Run) (done, orphaned bool) {
	parent, _, err := s.store.Decide(ctx, r.HeldBy)
	switch {
	case err == nil && parent.State == jetflow.Success && slices.Contains(parent.Children, r.ID):
		return false, false
	case err == nil && !parent.State.Terminal() && !heldByEndedAttempt(parent, r.ID):
		return true, false // the parent's attempt is still running
	case err == nil || errors.Is(err, jetflow.ErrNotFound):
		_, werr := s.runs.Write(ctx, engine.Orphan, jetflow.Pending, engine.OrphanRun(r, s.now()), r.Revision)
		return true, werr == nil
	}
	return true, false
}

// repairWorkflow publishes the first segment of pending workflow record r
// when nothing else will run it: it has no message waiting, no delayed
// entry the dispatcher will fire, and no record (a segment that ran has
// one, written before its message goes, and is repaired as a run). The
// message names no revision and is not new, so that the worker reads the
// segment's record and the segment its journal before they run.
func (s *Scheduler) repairWorkflow(ctx context.Context, r *jetflow.Run) bool {
	seg := wfwire.FirstSegment(r)
	drev, delayed, err := s.store.FindDelayed(ctx, seg.ScheduledTime, seg.ID)
	if err != nil || delayed && seg.ScheduledTime.After(s.now().Add(-s.cfg.StaleAfter)) {
		return false
	}
	if q, err := s.store.Queued(ctx, seg.Name, seg.ID); err != nil || q {
		return false
	}
	if rec, _, err := s.store.Decide(ctx, seg.ID); err == nil {
		return s.failDeadLettered(ctx, r, rec)
	} else if !errors.Is(err, jetflow.ErrNotFound) {
		return false
	}
	if delayed {
		// Overdue: the dispatcher missed it. Remove it first, so that it
		// does not publish a second copy later.
		if err := s.store.RemoveDelayed(ctx, kv.DelayedKey(seg.ScheduledTime, seg.ID), drev); err != nil {
			return false
		}
	}
	// It expects no message on its subject, as Start's does: a Start that
	// was only slow (its message lands after this one) or this sweep's
	// second try is refused rather than run twice.
	m := s.scfg.Message(engine.Envelope(seg))
	m.Header[streams.HeaderExpectedLastSubjSeq] = []string{"0"}
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		if !kv.IsWrongSequence(err) {
			s.log.Warn("repair dispatch", "run_id", seg.ID, "error", err)
		}
		return false
	}
	s.log.Info("repaired workflow: record without its first segment", "workflow", r.ID, "function", r.Name)
	s.mu.Lock()
	s.stats.Repaired++
	s.mu.Unlock()
	return true
}

// failDeadLettered fails pending workflow record r whose first segment's
// record, seg, is a dead letter: the worker could not use the segment's
// message (a bad message published on its subject) and recorded it failed,
// and nothing else would ever start the workflow. It reports whether it
// did.
func (s *Scheduler) failDeadLettered(ctx context.Context, r, seg *jetflow.Run) bool {
	if seg.State != jetflow.Failed || !strings.HasPrefix(seg.Error, jetflow.ErrBadMessage.Error()) {
		return false // running, or ended the usual way: its end reaches the workflow
	}
	r = engine.EndRecord(r, jetflow.Failed, nil, fmt.Sprintf("first segment %s dead-lettered: %s", seg.ID, seg.Error), 0, time.Time{}, s.now())
	if _, err := s.runs.Write(ctx, engine.Fail, jetflow.Pending, r, r.Revision); err != nil {
		return false
	}
	if err := s.d.Complete(ctx, r); err != nil {
		s.log.Warn("on-complete of a workflow whose first segment was dead-lettered", "workflow", r.ID, "error", err)
	}
	s.log.Warn("workflow failed: its first segment was dead-lettered", "workflow", r.ID, "segment", seg.ID, "reason", seg.Error)
	s.mu.Lock()
	s.stats.Repaired++
	s.mu.Unlock()
	return true
}

// heldByEndedAttempt reports whether child id was written by an attempt of
// parent that is over.
func heldByEndedAttempt(parent *jetflow.Run, id string) bool {
	attempt, ok := engine.ChildAttempt(parent.ID, id, parent.Attempts+1)
	if !ok {
		return false
	}
	return attempt < parent.Attempts || attempt == parent.Attempts && parent.State == jetflow.Pending
}

// repairRunning settles inProgress runs whose worker stopped heartbeating
// and whose message is gone (it was acknowledged by mistake, or lost): a
// retryable run is dispatched again, an at-most-once run fails as lost.
func (s *Scheduler) repairRunning(ctx context.Context, running []kv.Header) int {
	n := 0
	for _, h := range running {
		r, _, err := s.store.Decide(ctx, h.ID)
		if err != nil || r.State != jetflow.InProgress || r.Owner == "" {
			// No owner: not a worker's claim but a record that is in
			// progress by itself (a workflow's, whose segments are runs of
			// their own): nothing to republish.
			continue
		}
		// Lost only once this scheduler has seen the record unchanged
		// for StaleAfter on its own clock (heartbeats write new
		// revisions); the worker's clock is never compared with ours.
		if !liveness.Lost(s.live.Unchanged(r.ID, r.Revision, s.now()), s.cfg.StaleAfter) {
			continue
		}
		// Its message still queued: a worker takes it over (looked up
		// only for the runs found lost, not for every run in progress).
		if q, err := s.store.Queued(ctx, h.Function, h.ID); err != nil || q {
			continue
		}
		s.live.Forget(r.ID)
		if r.Kind == jetflow.AtMostOnce {
			lost := engine.LoseRun(r, s.now())
			if _, err := s.runs.Write(ctx, engine.Lost, jetflow.InProgress, lost, r.Revision); err == nil {
				if err := s.d.Complete(ctx, lost); err != nil {
					s.log.Warn("on-complete callback of a lost run; repair sweep will", "run_id", r.ID, "error", err)
				}
				n++
			}
			continue
		}
		if err := s.d.Dispatch(ctx, r); err == nil {
			s.log.Info("repaired run: worker lost and message gone", "run_id", r.ID, "function", r.Name)
			n++
		}
	}
	return n
}

// repairCandidate reports whether a run not ended, in state st and due at
// due, is one a sweep looks at: pending and due before cut, or in
// progress.
func repairCandidate(st jetflow.State, due, cut time.Time) bool {
	return st == jetflow.InProgress || st == jetflow.Pending && !due.IsZero() && due.Before(cut)
}

// notifyDue reports whether a terminal record's completion time, notify,
// falls in the sweep's window for on-complete callbacks: after recent and
// before cut (zero: no callback).
func notifyDue(notify, cut, recent time.Time) bool {
	if notify.IsZero() {
		return false
	}
	return notify.Before(cut) && notify.After(recent)
}
