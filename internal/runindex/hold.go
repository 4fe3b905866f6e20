package runindex

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultHold is how long the indexer holds an index entry before it
// publishes it (Indexer.Hold). Long enough for a run claimed first on a
// cluster to end within it when its handler is short (at 20 ms, 1.5-1.9
// entries a run were stored there against 1.02 at 100 ms), short enough
// that a page reads little of the runs stream's tail.
const DefaultHold = 100 * time.Millisecond

// maxHeld bounds the entries held at once: past it the oldest are
// published whatever their age (a burst, or an indexer catching up). It
// also bounds the writes a page reads from the runs stream's tail because
// they are held.
const maxHeld = 4096

// hold keeps a term's index entries for a short while before they are
// published, oldest first, so that an entry replaced meanwhile by a later
// write of the same run is never published: a page would find it stale
// (its run changed since) and skip it. A run claimed first and ending
// within the hold (a short handler) then costs the index one entry, not
// two; so do progress and heartbeat writes that follow each other closely.
//
// Dropping an entry leaves no hole: the write that replaced it has a later
// revision and its entry is published after it, or, if the term ends
// before, by the next term (which resumes after the last entry stored).
// Every checkpoint publishes what is held first, so a checkpoint never
// counts writes whose entries are neither stored nor held.
type hold struct {
	q      []*heldEntry // oldest first, from head
	head   int
	newest map[string]*heldEntry // run id -> its newest entry held
	// Replaced counts the entries dropped because a later write of their
	// run came within the hold.
	Replaced, Published int64
}

type heldEntry struct {
	msg      *nats.Msg
	run, id  string // run id, Nats-Msg-Id
	rev      uint64
	at       time.Time
	replaced bool
}

func newHold() *hold { return &hold{newest: map[string]*heldEntry{}} }

func (h *hold) len() int { return len(h.q) - h.head }

// add holds the entry of write rev of run; an entry of the same run held
// is replaced by it.
func (h *hold) add(msg *nats.Msg, run, id string, rev uint64, now time.Time) {
	if old := h.newest[run]; old != nil {
		old.replaced, old.msg = true, nil
		h.Replaced++
	}
	e := &heldEntry{msg: msg, run: run, id: id, rev: rev, at: now}
	h.q = append(h.q, e)
	h.newest[run] = e
}

// flush publishes the entries held since before cutoff (all of them for a
// zero cutoff), and the oldest beyond maxHeld, oldest first.
func (h *hold) flush(ctx context.Context, ents *entries, cutoff time.Time) error {
	for h.head < len(h.q) {
		e := h.q[h.head]
		if !cutoff.IsZero() && !e.at.Before(cutoff) && h.len() <= maxHeld {
			break
		}
		h.q[h.head] = nil
		h.head++
		if e.replaced {
			continue
		}
		if h.newest[e.run] == e {
			delete(h.newest, e.run)
		}
		if err := ents.publish(ctx, e.msg, e.id); err != nil {
			return fmt.Errorf("runindex: index entry: %w", err)
		}
		h.Published++
	}
	if h.head == len(h.q) {
		h.q, h.head = h.q[:0], 0
	} else if h.head > 4096 && h.head > len(h.q)/2 {
		n := copy(h.q, h.q[h.head:])
		clear(h.q[n:])
		h.q, h.head = h.q[:n], 0
	}
	return nil
}
