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
func (d *dispatcher) grant(ctx context.Context, e *entry, t int64) {
	pl := d.pl
	giveBack := func() {
		_, err := pl.st.updateState(ctx, pl.name, func(st *poolState) bool {
			s, ok := st.Running[e.id]
			if !ok || s.Attempt != e.q.Attempt || s.Granted != t {
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
	// retry tries the entry again later. After a failed read nothing was
	// written: the slot is given back. After a failed write the write may
	// have happened: the slot stays, and the periodic check gives it back
	// (the item did not start) or starts the run (it did).
	retry := func(free bool) {
		if free {
			giveBack()
		}
		e.at = pl.now().Add(time.Second).UnixNano()
		select {
		case d.redo <- e:
		default:
		}
	}
	stale := func(it *Item) {
		if it != nil && it.State.Terminal() {
			if err := pl.ensureCallback(ctx, it); err != nil {
				pl.log.Warn("on-complete of canceled item", "pool", pl.name, "item", it.ID, "error", err)
			}
		}
		_ = pl.st.deleteMsg(ctx, e.seq)
		pl.stat(func(s *DispatcherStats) { s.Skipped++ })
		giveBack()
	}
	grantT := time.Unix(0, t).UTC()
	var it *Item
	if e.q.Attempt == 1 {
		// A new item: its record is created now, from the queue entry (kept
		// in memory when small). Creating it is the compare-and-swap that
		// decides against a concurrent Cancel.
		it = e.q.Item
		if it == nil {
			q, seq, err := pl.st.getQueued(ctx, pl.name, e.id)
			if errors.Is(err, jetflow.ErrNotFound) || errors.Is(err, jetflow.ErrBadRecord) || err == nil && (seq != e.seq || q.Item == nil) {
				giveBack() // canceled, or replaced by a newer entry
				pl.stat(func(s *DispatcherStats) { s.Skipped++ })
				return
			}
			if err != nil {
				retry(true)
				return
			}
			it = q.Item
		}
		e.q.Item = nil
		it = copyItem(it)
		it.State, it.Attempts, it.RunID, it.Started = jetflow.InProgress, 1, RunID(pl.name, it.ID, 1), grantT
		err := pl.st.writeItem(ctx, it, 0)
		if errors.Is(err, ErrAlreadyExists) {
			cur, gerr := pl.st.getItem(ctx, pl.name, e.id)
			if gerr != nil && !errors.Is(gerr, jetflow.ErrNotFound) && !errors.Is(gerr, jetflow.ErrBadRecord) {
				retry(true)
				return
			}
			if gerr != nil || cur.State != jetflow.Pending || cur.Attempts != 0 {
				stale(cur) // canceled before it started, or a duplicate entry
				return
			}
			// A pending record: the periodic check took back a slot of
			// this item before it started (this grant's, or an earlier
			// one's). It starts from that record, as a retry does.
			it = nil
		} else if err != nil {
			retry(false)
			return
		}
	}
	if it == nil {
		for i := 0; ; i++ {
			cur, err := pl.st.getItem(ctx, pl.name, e.id)
			if errors.Is(err, jetflow.ErrNotFound) || errors.Is(err, jetflow.ErrBadRecord) {
				// Gone, or another client's garbage (Status reports it):
				// nothing to start; tried again every second it was.
				stale(nil)
				return
			}
			if err != nil || i == 16 {
				retry(true)
				return
			}
			if cur.State != jetflow.Pending || cur.Attempts != e.q.Attempt-1 {
				stale(cur)
				return
			}
			if r := cur.revoked; r != nil && r.Attempt == e.q.Attempt && r.Granted == t {
				// This grant came too late (a pause, a slow server): the
				// periodic check gave its slot back, and the item must not
				// run without one. It waits for a slot again.
				pl.log.Warn("grant later than the reconcile grace: its slot was given back; the item waits for another",
					"pool", pl.name, "item", e.id, "attempt", e.q.Attempt, "granted", grantT)
				retry(true)
				return
			}
			cur.State, cur.Attempts, cur.Started, cur.NotBefore = jetflow.InProgress, e.q.Attempt, grantT, time.Time{}
			cur.revoked = nil
			cur.RunID = RunID(pl.name, cur.ID, cur.Attempts)
			err = pl.st.writeItem(ctx, cur, cur.Revision)
			if errors.Is(err, errConflict) {
				continue
			}
			if err != nil {
				retry(false)
				return
			}
			it = cur
			break
		}
	}
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

func copyItem(it *Item) *Item {
	c := *it
	return &c
}
