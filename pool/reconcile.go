package pool

import (
	"context"
	"errors"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
)

// reconcile checks the running slots. A slot whose attempt has ended (the
// item finished, or moved on to a later attempt) is given back; a retry's
// queue entry that a crash left unwritten is written first. A slot whose
// item has not started that attempt (a crash between granting the slot and
// starting the item, or a grant still under way but slow) is given back
// after ReconcileGrace, once revoke has marked it on the item's record so
// that a late grant cannot start the item without it; a running item
// without its run gets its run; a run that ended without its completion
// settling the item (the done function not served, or lost) is settled here,
// ReconcileGrace after it ended. At the start of a term (start set) only the
// slots of ended attempts are looked at, whatever their age.
func (d *dispatcher) reconcile(ctx context.Context, start bool) {
	pl := d.pl
	st, _, ok, err := pl.st.getState(ctx, pl.name)
	if err != nil || !ok {
		return
	}
	now := pl.now()
	grace := pl.cfg.ReconcileGrace
	repaired := func() { pl.stat(func(s *DispatcherStats) { s.Repaired++ }) }
	// When this term first saw each slot: a slot is old when granted
	// ReconcileGrace ago, or seen that long (a grant time in the future,
	// from a clock far ahead or another client, would keep it young for
	// good).
	seen := make(map[slotID]time.Time, len(st.Running))
	for id, s := range st.Running {
		k := slotID{id, s.Attempt, s.Granted}
		seen[k] = now
		if t, ok := d.seen[k]; ok {
			seen[k] = t
		}
	}
	d.seen = seen
	// The slots to give back, in one write of the state at the end
	// (thousands of them, another client's garbage, cost one write).
	// A slot is given back only if it is still the grant that was looked
	// at (its attempt and grant time).
	release := map[string]slot{}
	defer func() {
		if len(release) == 0 {
			return
		}
		n := 0
		_, err := pl.st.updateState(ctx, pl.name, func(st *poolState) bool {
			n = 0
			for id, r := range release {
				if s, ok := st.Running[id]; ok && s.Attempt == r.Attempt && s.Granted == r.Granted {
					delete(st.Running, id)
					n++
				}
			}
			return n > 0
		})
		if err == nil {
			pl.stat(func(s *DispatcherStats) { s.Repaired += int64(n) })
			d.st = nil
		}
	}()
	for id, s := range st.Running {
		if ctx.Err() != nil {
			return
		}
		old := now.Sub(time.Unix(0, s.Granted)) >= grace || now.Sub(seen[slotID{id, s.Attempt, s.Granted}]) >= grace
		if !start && !old {
			continue
		}
		it, err := pl.st.getItem(ctx, pl.name, id)
		noItem := errors.Is(err, jetflow.ErrInvalidRunID)
		if noItem {
			// No item has that id (nor can be granted a slot): its
			// attempt never started.
			err = jetflow.ErrNotFound
		}
		if errors.Is(err, jetflow.ErrBadRecord) || errors.Is(err, jetflow.ErrNotFound) && old && !start {
			// Another client overwrote or removed the item's record (or
			// the attempt never started): the slot is held while the
			// attempt's run has not ended.
			if !old {
				continue
			}
			run, rerr := engine.Of(pl.p).Store().GetFromLeader(ctx, RunID(pl.name, id, s.Attempt))
			if errors.Is(rerr, jetflow.ErrNotFound) || rerr == nil && run.State.Terminal() {
				if errors.Is(err, jetflow.ErrBadRecord) {
					pl.log.Warn("slot of an unreadable item given back", "pool", pl.name, "item", id, "error", err)
				} else if !noItem && !d.revoke(ctx, id, s, nil) {
					continue
				}
				release[id] = s
			}
			continue
		}
		if err != nil && !errors.Is(err, jetflow.ErrNotFound) {
			continue
		}
		switch {
		case err == nil && it.Attempts >= s.Attempt && !(it.State == jetflow.InProgress && it.Attempts == s.Attempt):
			// That attempt has ended.
			if it.State == jetflow.Pending && it.Attempts == s.Attempt {
				if _, _, qerr := pl.st.getQueued(ctx, pl.name, id); errors.Is(qerr, jetflow.ErrNotFound) {
					if pl.requeue(ctx, it) != nil {
						continue
					}
				} else if qerr != nil {
					continue
				}
			}
			release[id] = s
			if it.State.Terminal() {
				_ = pl.ensureCallback(ctx, it)
			}
		case start || !old:
		case err != nil || it.Attempts < s.Attempt:
			// The attempt never started.
			if err == nil && !d.revoke(ctx, id, s, it) {
				continue
			}
			release[id] = s
		default:
			// From the leader: a replica behind would say there is no run,
			// and it would be started a second time.
			run, err := engine.Of(pl.p).Store().GetFromLeader(ctx, it.RunID)
			switch {
			case errors.Is(err, jetflow.ErrNotFound):
				if pl.startRun(ctx, it) == nil {
					repaired()
				}
			case err != nil:
			case run.State.Terminal() && now.Sub(run.CompletedTime) >= grace:
				if pl.settle(ctx, pl.name, id, s.Attempt, run) == nil {
					repaired()
				}
			}
		}
	}
}

// revoke marks on the record of item id that slot s, whose attempt has not
// started, is taken back, and reports whether the slot may be given back
// now. it is the item's record, nil when it has none (a new item).
//
// A grant writes the item's record before it starts anything: it creates
// it (attempt 1) or moves it from pending by compare-and-swap (a retry).
// The mark is a write of that same record (created from the item's queue
// entry for a new item, compare-and-swap for a pending one), so the two
// are ordered. A grant that wrote first makes the mark fail (the slot is
// looked at again at the next check, and found started); one that writes
// after meets the mark, starts nothing and gives its entry back to the
// queue. So a grant later than ReconcileGrace (a pause, a slow server)
// never starts an item whose slot was given back, and the normal path
// pays nothing for it. A later grant of the item, with a slot of its own,
// starts from the marked record.
func (d *dispatcher) revoke(ctx context.Context, id string, s slot, it *Item) bool {
	pl := d.pl
	mark := &slotMark{Attempt: s.Attempt, Granted: s.Granted}
	var expect uint64
	if it == nil {
		q, _, err := pl.st.getQueued(ctx, pl.name, id)
		if s.Attempt != 1 || errors.Is(err, jetflow.ErrNotFound) || errors.Is(err, jetflow.ErrBadRecord) || err == nil && (q.Attempt != 1 || q.Item == nil) {
			// A retry without its record starts nothing. No entry of a
			// new item: the pool removes it only after writing the
			// item's record, so no grant of the pool's is under way (the
			// slot is another client's, or so is the missing entry),
			// unless one wrote the record and removed the entry since the
			// record was read.
			_, err := pl.st.getItem(ctx, pl.name, id)
			return errors.Is(err, jetflow.ErrNotFound)
		}
		if err != nil {
			return false
		}
		it = q.Item
	} else {
		if it.State.Terminal() {
			return true // no grant starts a finished item
		}
		if r := it.revoked; r != nil && *r == *mark {
			return true // marked by an earlier check
		}
		expect = it.Revision
	}
	c := copyItem(it)
	c.revoked = mark
	err := pl.st.writeItem(ctx, c, expect)
	if err != nil && ctx.Err() == nil && !errors.Is(err, errConflict) && !errors.Is(err, ErrAlreadyExists) {
		pl.log.Warn("mark the slot of an attempt not started; the next check will", "pool", pl.name, "item", id, "error", err)
	}
	return err == nil
}
