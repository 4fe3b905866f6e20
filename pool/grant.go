package pool

import (
	"context"
	"errors"
	"time"

	"github.com/jetflow-dev/jetflow"
)

// grant starts the item of entry e, which holds a slot (and a token)
// granted at t: it moves the item to InProgress by compare-and-swap, removes
// the queue entry, and creates the attempt's run. An item canceled or
// changed meanwhile gives the slot and the token back. A grant so late that
// the periodic check took its slot back (see revoke) meets the check's mark
// on the item's record in that write, starts nothing, and gives the entry
// back to the queue to wait for a slot again.
//
// claimItem reads and writes the item's record, each read deciding the
// next step through a pure function (queuedStep, existingStep,
// pendingStep); finishGrant does what the last step says.
func (d *dispatcher) grant(ctx context.Context, e *entry, t int64) {
	it, step := d.claimItem(ctx, e, t)
	d.finishGrant(ctx, e, t, it, step)
}

// grantStep is where a grant stands after a read or a write of the item's
// record.
type grantStep int

const (
	// grantOn: go on (after the last write: the item runs this attempt;
	// make its run).
	grantOn grantStep = iota
	// grantFromRecord: the new item has a pending record already (the
	// periodic check took back a slot of it before it started): it starts
	// from that record, as a retry does.
	grantFromRecord
	// grantGone: the entry was canceled, or replaced by a newer one: the
	// slot is given back.
	grantGone
	// grantStale: the item finished or changed meanwhile (or its record is
	// gone or garbage): the entry is removed and the slot given back.
	grantStale
	// grantLater: a read failed, nothing was written: the slot is given
	// back and the entry tried again later.
	grantLater
	// grantUnsure: a write failed and may have happened: the slot stays
	// (the periodic check gives it back if the item did not start, or
	// makes its run if it did) and the entry is tried again later.
	grantUnsure
	// grantRevoked: the grant came too late (a pause, a slow server): the
	// periodic check gave its slot back, and the item must not run without
	// one. It waits for a slot again, as after grantLater.
	grantRevoked
)

// maxGrantWrites bounds the compare-and-swaps a grant tries on a pending
// record that others keep writing.
const maxGrantWrites = 16

// claimItem writes the item's record for the attempt of entry e, granted
// at t, and returns it with grantOn; or the step that stopped it.
func (d *dispatcher) claimItem(ctx context.Context, e *entry, t int64) (*Item, grantStep) {
	if e.q.Attempt == 1 {
		it, step := d.createItem(ctx, e, t)
		if step != grantFromRecord {
			return it, step
		}
	}
	return d.startPending(ctx, e, t)
}

// createItem creates the record of a new item, from its queue entry (kept
// in memory when small). Creating it is the compare-and-swap that decides
// against a concurrent Cancel.
func (d *dispatcher) createItem(ctx context.Context, e *entry, t int64) (*Item, grantStep) {
	pl := d.pl
	it := e.q.Item
	if it == nil {
		q, seq, err := pl.st.getQueued(ctx, pl.name, e.id)
		if step := queuedStep(q, seq, err, e.seq); step != grantOn {
			return nil, step
		}
		it = q.Item
	}
	e.q.Item = nil
	it = copyItem(it)
	it.State, it.Attempts, it.RunID, it.Started = jetflow.InProgress, 1, RunID(pl.name, it.ID, 1), time.Unix(0, t).UTC()
	err := pl.st.writeItem(ctx, it, 0)
	if errors.Is(err, ErrAlreadyExists) {
		cur, gerr := pl.st.getItem(ctx, pl.name, e.id)
		if gerr != nil {
			cur = nil
		}
		return cur, existingStep(cur, gerr)
	}
	if err != nil {
		return nil, grantUnsure
	}
	return it, grantOn
}

// startPending moves the item's pending record to InProgress for the
// attempt of entry e by compare-and-swap.
func (d *dispatcher) startPending(ctx context.Context, e *entry, t int64) (*Item, grantStep) {
	pl := d.pl
	for i := 0; ; i++ {
		cur, err := pl.st.getItem(ctx, pl.name, e.id)
		if err != nil {
			cur = nil
		}
		if step := pendingStep(cur, err, e.q.Attempt, t, i == maxGrantWrites); step != grantOn {
			return cur, step
		}
		cur.State, cur.Attempts, cur.Started, cur.NotBefore = jetflow.InProgress, e.q.Attempt, time.Unix(0, t).UTC(), time.Time{}
		cur.revoked = nil
		cur.RunID = RunID(pl.name, cur.ID, cur.Attempts)
		err = pl.st.writeItem(ctx, cur, cur.Revision)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return nil, grantUnsure
		}
		return cur, grantOn
	}
}

// queuedStep decides on the read (q at seq, err) of a new item's queue
// entry, expected at want: grantOn when it holds the item.
func queuedStep(q queued, seq uint64, err error, want uint64) grantStep {
	switch {
	case errors.Is(err, jetflow.ErrNotFound), errors.Is(err, jetflow.ErrBadRecord):
		return grantGone
	case err != nil:
		return grantLater
	case seq != want || q.Item == nil:
		return grantGone // replaced by a newer entry
	}
	return grantOn
}

// existingStep decides on the read (cur, err) of a new item's record
// found existing when the grant came to create it.
func existingStep(cur *Item, err error) grantStep {
	switch {
	case errors.Is(err, jetflow.ErrNotFound), errors.Is(err, jetflow.ErrBadRecord):
		return grantStale
	case err != nil:
		return grantLater
	case cur.State != jetflow.Pending || cur.Attempts != 0:
		return grantStale // canceled before it started, or a duplicate entry
	}
	return grantFromRecord
}

// pendingStep decides on the read (cur, err) of the record of an item to
// start attempt on, granted at granted; lastTry is set when the grant has
// lost its compare-and-swaps too often.
func pendingStep(cur *Item, err error, attempt int, granted int64, lastTry bool) grantStep {
	switch {
	case errors.Is(err, jetflow.ErrNotFound), errors.Is(err, jetflow.ErrBadRecord):
		// Gone, or another client's garbage (Status reports it): nothing
		// to start; tried again every second it was.
		return grantStale
	case err != nil, lastTry:
		return grantLater
	case cur.State != jetflow.Pending || cur.Attempts != attempt-1:
		return grantStale
	case cur.revoked.is(attempt, granted):
		return grantRevoked
	}
	return grantOn
}

// is reports whether m marks the grant of attempt at granted.
func (m *slotMark) is(attempt int, granted int64) bool {
	return m != nil && m.Attempt == attempt && m.Granted == granted
}

// finishGrant does what step says for the grant of entry e at t; it is the
// item's record when step is grantOn or grantStale (nil when it has none).
func (d *dispatcher) finishGrant(ctx context.Context, e *entry, t int64, it *Item, step grantStep) {
	pl := d.pl
	switch step {
	case grantOn:
		d.startGranted(ctx, e, it)
	case grantGone:
		d.giveSlotBack(ctx, e, t)
		pl.stat(func(s *DispatcherStats) { s.Skipped++ })
	case grantStale:
		d.dropStale(ctx, e, t, it)
	case grantRevoked:
		pl.log.Warn("grant later than the reconcile grace: its slot was given back; the item waits for another",
			"pool", pl.name, "item", e.id, "attempt", e.q.Attempt, "granted", time.Unix(0, t).UTC())
		d.tryLater(ctx, e, t, true)
	case grantLater:
		d.tryLater(ctx, e, t, true)
	case grantUnsure:
		d.tryLater(ctx, e, t, false)
	}
}

// startGranted makes the run of item it, whose record says it runs, and
// removes its queue entry.
func (d *dispatcher) startGranted(ctx context.Context, e *entry, it *Item) {
	pl := d.pl
	pl.stat(func(s *DispatcherStats) { s.Started++ })
	if err := pl.startRun(ctx, it); err != nil && ctx.Err() == nil {
		pl.log.Warn("create run; the periodic check will", "pool", pl.name, "item", it.ID, "error", err)
	}
	// Last, off the item's critical path: a leftover entry is dropped as
	// stale by whoever finds it.
	if err := pl.st.deleteMsg(ctx, e.seq); err != nil {
		pl.log.Debug("remove queue entry", "pool", pl.name, "item", it.ID, "error", err)
	}
}

// giveSlotBack gives back the slot (and the token) of entry e granted at t,
// if it still holds it.
func (d *dispatcher) giveSlotBack(ctx context.Context, e *entry, t int64) {
	pl := d.pl
	_, err := pl.st.updateState(ctx, pl.name, func(st *poolState) bool {
		s, ok := st.Running[e.id]
		if !ok || !s.sameGrant(slot{Attempt: e.q.Attempt, Granted: t}) {
			return false
		}
		delete(st.Running, e.id)
		st.returnStart(t)
		st.returnKeyStart(e.q.Key, t)
		return true
	})
	if err != nil && ctx.Err() == nil {
		pl.log.Warn("give slot back; the periodic check will", "pool", pl.name, "item", e.id, "error", err)
	}
	pl.wake()
}

// tryLater tries entry e again later. After a failed read nothing was
// written: the slot is given back (free). After a failed write the write
// may have happened: the slot stays, and the periodic check gives it back
// (the item did not start) or starts the run (it did).
func (d *dispatcher) tryLater(ctx context.Context, e *entry, t int64, free bool) {
	if free {
		d.giveSlotBack(ctx, e, t)
	}
	e.at = d.pl.now().Add(time.Second).UnixNano()
	select {
	case d.redo <- e:
	default:
	}
}

// dropStale removes the queue entry e of an item that finished or changed
// meanwhile (it, nil when it has no record) and gives its slot back.
func (d *dispatcher) dropStale(ctx context.Context, e *entry, t int64, it *Item) {
	pl := d.pl
	if it != nil && it.State.Terminal() {
		if err := pl.ensureCallback(ctx, it); err != nil {
			pl.log.Warn("on-complete of canceled item", "pool", pl.name, "item", it.ID, "error", err)
		}
	}
	if err := pl.st.deleteMsg(ctx, e.seq); err != nil {
		// Dropped as stale again by whoever finds it.
		pl.log.Debug("remove stale queue entry", "pool", pl.name, "item", e.id, "error", err)
	}
	pl.stat(func(s *DispatcherStats) { s.Skipped++ })
	d.giveSlotBack(ctx, e, t)
}

func copyItem(it *Item) *Item {
	c := *it
	return &c
}
