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
//
// What to do with each slot is decided by decideSlot, then done by
// repairSlot.
func (d *dispatcher) reconcile(ctx context.Context, start bool) {
	pl := d.pl
	st, _, ok, err := pl.st.getState(ctx, pl.name)
	if err != nil || !ok {
		return
	}
	now := pl.now()
	seen := d.markSeen(st, now)
	// The slots to give back, in one write of the state at the end
	// (thousands of them, another client's garbage, cost one write).
	release := map[string]slot{}
	defer d.giveBackSlots(ctx, release)
	for id, s := range st.Running {
		if ctx.Err() != nil {
			return
		}
		c := slotCheck{start: start, attempt: s.Attempt,
			old: slotOld(now, s.Granted, seen[slotID{id, s.Attempt, s.Granted}], pl.cfg.ReconcileGrace)}
		if !c.lookAt() {
			continue
		}
		it, err := pl.st.getItem(ctx, pl.name, id)
		c = c.withItem(it, err)
		if d.repairSlot(ctx, id, s, c, it, err, now) {
			release[id] = s
		}
	}
}

// markSeen notes when this term first saw each running slot of st, and
// returns it. A slot is old when granted ReconcileGrace ago, or seen that
// long: a grant time in the future, from a clock far ahead or another
// client, would keep it young for good.
func (d *dispatcher) markSeen(st *poolState, now time.Time) map[slotID]time.Time {
	seen := make(map[slotID]time.Time, len(st.Running))
	for id, s := range st.Running {
		k := slotID{id, s.Attempt, s.Granted}
		seen[k] = now
		if t, ok := d.seen[k]; ok {
			seen[k] = t
		}
	}
	d.seen = seen
	return seen
}

// slotOld reports whether a slot granted at granted (Unix ns) and first
// seen at seen is past the grace at now.
func slotOld(now time.Time, granted int64, seen time.Time, grace time.Duration) bool {
	return now.Sub(time.Unix(0, granted)) >= grace || now.Sub(seen) >= grace
}

// giveBackSlots removes the slots of release from the pool state in one
// write. A slot is given back only if it is still the grant that was looked
// at (its attempt and grant time).
func (d *dispatcher) giveBackSlots(ctx context.Context, release map[string]slot) {
	if len(release) == 0 {
		return
	}
	pl := d.pl
	n := 0
	_, err := pl.st.updateState(ctx, pl.name, func(st *poolState) bool {
		n = 0
		for id, r := range release {
			if s, ok := st.Running[id]; ok && s.sameGrant(r) {
				delete(st.Running, id)
				n++
			}
		}
		return n > 0
	})
	if err != nil {
		if ctx.Err() == nil {
			pl.log.Warn("give back the slots of attempts not running; the next check will", "pool", pl.name, "slots", len(release), "error", err)
		}
		return
	}
	pl.stat(func(s *DispatcherStats) { s.Repaired += int64(n) })
	d.st = nil
}

// sameGrant reports whether s and r are the same grant of a slot.
func (s slot) sameGrant(r slot) bool { return s.Attempt == r.Attempt && s.Granted == r.Granted }

// itemRead is what reading the item of a running slot found.
type itemRead int

const (
	itemFound      itemRead = iota // its record
	itemMissing                    // no record: not created yet, expired, or removed
	itemNoID                       // no item has that id, nor can be granted a slot: its attempt never started
	itemBad                        // another client's garbage
	itemUnreadable                 // the read failed: the next check looks again
)

func itemReadOf(err error) itemRead {
	switch {
	case err == nil:
		return itemFound
	case errors.Is(err, jetflow.ErrInvalidRunID):
		return itemNoID
	case errors.Is(err, jetflow.ErrBadRecord):
		return itemBad
	case errors.Is(err, jetflow.ErrNotFound):
		return itemMissing
	}
	return itemUnreadable
}

// slotCheck is what the periodic check knows of one running slot.
type slotCheck struct {
	start    bool // the first check of a term: only ended attempts count
	old      bool // granted, or first seen, ReconcileGrace ago or more
	attempt  int  // the slot's attempt
	read     itemRead
	state    jetflow.State // the item's, when found
	attempts int           // the item's, when found
}

// lookAt reports whether the slot's item is worth reading: at the start of
// a term, or once the slot is old.
func (c slotCheck) lookAt() bool { return c.start || c.old }

func (c slotCheck) withItem(it *Item, err error) slotCheck {
	c.read = itemReadOf(err)
	if c.read == itemFound {
		c.state, c.attempts = it.State, it.Attempts
	}
	return c
}

// slotVerdict is what the periodic check does with one running slot.
type slotVerdict int

const (
	// slotKeep: nothing now.
	slotKeep slotVerdict = iota
	// slotOrphan: the item's record is another client's garbage, or gone
	// while its slot is old: the slot is held while the attempt's run has
	// not ended.
	slotOrphan
	// slotEnded: the slot's attempt has ended (the item finished, or moved
	// on to a later attempt): the slot is given back.
	slotEnded
	// slotNotStarted: the item has not started the slot's attempt: the slot
	// is marked revoked on the item's record, then given back.
	slotNotStarted
	// slotRunning: the attempt runs: its run is made if missing, and
	// settled if it ended ReconcileGrace ago without settling the item.
	slotRunning
)

// decideSlot decides what the periodic check does with one running slot.
func decideSlot(c slotCheck) slotVerdict {
	if !c.lookAt() {
		return slotKeep
	}
	switch c.read {
	case itemUnreadable:
		return slotKeep
	case itemBad:
		if c.old {
			return slotOrphan
		}
		return slotKeep
	case itemMissing, itemNoID:
		if c.old && !c.start {
			return slotOrphan
		}
		return slotKeep
	}
	switch {
	case attemptEnded(c.state, c.attempts, c.attempt):
		return slotEnded
	case c.start || !c.old:
		return slotKeep
	case c.attempts < c.attempt:
		return slotNotStarted
	}
	return slotRunning
}

// attemptEnded reports whether an item in state with attempts has ended
// attempt: it moved on to a later one, or is no longer running it.
func attemptEnded(state jetflow.State, attempts, attempt int) bool {
	return attempts > attempt || attempts == attempt && state != jetflow.InProgress
}

// repairSlot does what decideSlot says for slot s of item id (it and err are the
// read of its record) and reports whether the slot is to be given back.
func (d *dispatcher) repairSlot(ctx context.Context, id string, s slot, c slotCheck, it *Item, err error, now time.Time) bool {
	switch decideSlot(c) {
	case slotOrphan:
		return d.orphanSlot(ctx, id, s, c.read, err)
	case slotEnded:
		return d.endedSlot(ctx, id, s, it)
	case slotNotStarted:
		return d.revoke(ctx, id, s, it)
	case slotRunning:
		d.repairRun(ctx, id, s, it, now)
	}
	return false
}

// orphanSlot gives back the slot of an item whose record is garbage or
// gone once the attempt's run has ended (or never was). read says which.
func (d *dispatcher) orphanSlot(ctx context.Context, id string, s slot, read itemRead, err error) bool {
	pl := d.pl
	run, _, rerr := engine.Of(pl.p).Store().Decide(ctx, RunID(pl.name, id, s.Attempt))
	if !runOver(run, rerr) {
		return false
	}
	switch read {
	case itemBad:
		pl.log.Warn("slot of an unreadable item given back", "pool", pl.name, "item", id, "error", err)
	case itemMissing:
		return d.revoke(ctx, id, s, nil)
	}
	return true
}

// runOver reports whether a run read with err has ended, or never was.
func runOver(run *jetflow.Run, err error) bool {
	return errors.Is(err, jetflow.ErrNotFound) || err == nil && run.State.Terminal()
}

// endedSlot gives back the slot of an ended attempt. A pending item's
// queue entry for its next attempt, that a crash left unwritten, is
// written first; a finished item's on-complete callback is made sure of.
func (d *dispatcher) endedSlot(ctx context.Context, id string, s slot, it *Item) bool {
	pl := d.pl
	if it.State == jetflow.Pending && it.Attempts == s.Attempt {
		_, _, qerr := pl.st.getQueued(ctx, pl.name, id)
		if qerr != nil && !errors.Is(qerr, jetflow.ErrNotFound) {
			return false
		}
		if qerr != nil {
			if err := pl.requeue(ctx, it); err != nil {
				pl.log.Warn("queue the next attempt; the next check will", "pool", pl.name, "item", id, "error", err)
				return false
			}
		}
	}
	if it.State.Terminal() {
		if err := pl.ensureCallback(ctx, it); err != nil {
			pl.log.Warn("on-complete of a finished item; the next check will not", "pool", pl.name, "item", id, "error", err)
		}
	}
	return true
}

// runRepair is what a running item's run needs.
type runRepair int

const (
	runFine      runRepair = iota // running, ended within the grace, or unread
	runMissing                    // never made: make it
	runUnsettled                  // ended ReconcileGrace ago without settling the item: settle it
)

// repairOf decides what a running item's run, read with err, needs at now.
func repairOf(run *jetflow.Run, err error, now time.Time, grace time.Duration) runRepair {
	switch {
	case errors.Is(err, jetflow.ErrNotFound):
		return runMissing
	case err != nil:
		return runFine
	case run.State.Terminal() && now.Sub(run.CompletedTime) >= grace:
		return runUnsettled
	}
	return runFine
}

// repairRun makes the run of running item it if it is missing, and
// settles the item if its run ended unsettled.
func (d *dispatcher) repairRun(ctx context.Context, id string, s slot, it *Item, now time.Time) {
	pl := d.pl
	run, _, err := engine.Of(pl.p).Store().Decide(ctx, it.RunID)
	switch repairOf(run, err, now, pl.cfg.ReconcileGrace) {
	case runMissing:
		err = pl.startRun(ctx, it)
	case runUnsettled:
		err = pl.settle(ctx, pl.name, id, s.Attempt, run)
	default:
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			pl.log.Warn("repair a running item; the next check will", "pool", pl.name, "item", id, "error", err)
		}
		return
	}
	pl.stat(func(s *DispatcherStats) { s.Repaired++ })
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
		switch markSourceOf(s.Attempt, q, err) {
		case markNoEntry:
			// A retry without its record starts nothing. No entry of a
			// new item: the pool removes it only after writing the
			// item's record, so no grant of the pool's is under way (the
			// slot is another client's, or so is the missing entry),
			// unless one wrote the record and removed the entry since the
			// record was read.
			_, err := pl.st.getItem(ctx, pl.name, id)
			return errors.Is(err, jetflow.ErrNotFound)
		case markUnread:
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
	if unexpectedWriteErr(err) && ctx.Err() == nil {
		pl.log.Warn("mark the slot of an attempt not started; the next check will", "pool", pl.name, "item", id, "error", err)
	}
	return err == nil
}

// markSource is where the mark of a slot taken back from a new item (no
// record yet) is written from.
type markSource int

const (
	markEntry   markSource = iota // the new item's queue entry: the mark creates its record from it
	markNoEntry                   // none: a retry without its record, or no entry of the new item
	markUnread                    // the entry could not be read: the next check tries again
)

// markSourceOf classifies the read (q, err) of the queue entry of an item
// without a record, whose slot for attempt is taken back.
func markSourceOf(attempt int, q queued, err error) markSource {
	switch {
	case attempt != 1, errors.Is(err, jetflow.ErrNotFound), errors.Is(err, jetflow.ErrBadRecord):
		return markNoEntry
	case err != nil:
		return markUnread
	case q.Attempt != 1 || q.Item == nil:
		return markNoEntry
	}
	return markEntry
}

// unexpectedWriteErr reports whether err, from a write of an item's
// record, is worth a warning: not a compare-and-swap lost to another
// writer.
func unexpectedWriteErr(err error) bool {
	return err != nil && !errors.Is(err, errConflict) && !errors.Is(err, ErrAlreadyExists)
}
