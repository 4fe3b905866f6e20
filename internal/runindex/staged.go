package runindex

import (
	"strconv"
	"time"
)

// The entries the indexer has read and not published yet are staged a
// moment (up to window writes, or linger after it has read everything
// delivered so far) so that each message carries as many as it can. One
// rule keeps the index exact: the entries are published in revision
// order, and an entry is dropped only when a later write of its run is
// staged with it. Such an entry names a revision replaced before it could
// be stored: every reader skips it anyway (a page checks each entry
// against the run's current record), and the write that replaced it is
// published after it, or read again by the next term from its resume
// point. So a run claimed and ended within the stage (inProgress, then its
// outcome) leaves one entry instead of two, and the outcomes, consecutive
// once the claims between them are gone, share messages.

// maxBatch bounds the entries of one index message.
const maxBatch = 512

// linger is how long staged entries wait for more writes once the
// indexer has read everything delivered so far. Under load writes come a
// few at a time, and a run's claim and its outcome are tens of
// milliseconds apart (the claim waits for its acknowledgement): with a
// stage of 10 ms, runs claimed first left 1.0 index messages a run, with
// 50 ms 0.3 (jetflow bench, docs/runindex.md). The index lags the writes
// by that much more; a page reads those writes from the runs stream's
// tail, so it stays exact.
const linger = 50 * time.Millisecond

// window bounds the writes staged: about 150 ms of writes under load.
const window = 4096

// staged is the entries not published yet, in revision order, at most
// one a run: a later write of a run staged replaces its entry.
type staged struct {
	ents []stagedEntry  // in revision order; a replaced one has id ""
	at   map[string]int // run id -> its entry in ents
}

type stagedEntry struct {
	subject, id string
	rev         uint64
}

// add stages the entry of run id's write at rev, on subject, dropping the
// run's entry staged before (its revision replaced).
func (s *staged) add(subject, id string, rev uint64) {
	if s.at == nil {
		s.at = make(map[string]int, window)
	}
	if i, ok := s.at[id]; ok {
		s.ents[i].id = ""
	}
	s.at[id] = len(s.ents)
	s.ents = append(s.ents, stagedEntry{subject: subject, id: id, rev: rev})
}

// empty reports whether nothing is staged.
func (s *staged) empty() bool { return len(s.ents) == 0 }

// full reports whether window writes are staged.
func (s *staged) full() bool { return len(s.ents) >= window }

// reset empties the stage, keeping its room.
func (s *staged) reset() {
	clear(s.at)
	s.ents = s.ents[:0]
}

// batches groups the staged entries, in revision order, into the index
// messages to publish: a message holds consecutive entries of one subject,
// up to maxBatch entries and max bytes of headers.
func (s *staged) batches(max int) []batch {
	var out []batch
	for _, e := range s.ents {
		if e.id == "" {
			continue
		}
		if n := len(out); n == 0 || !out[n-1].fits(e.subject, e.id, max) {
			out = append(out, batch{subject: e.subject})
		}
		b := &out[len(out)-1]
		b.runs = append(b.runs, e.id)
		b.revs = append(b.revs, strconv.FormatUint(e.rev, 10))
		b.bytes += entryBytes(e.id)
	}
	return out
}

// batch is the entries of one index message: consecutive entries (in the
// runs stream's order) of one index subject, their Jetflow-Run and
// Jetflow-Rev headers holding a value per entry, in revision order. Only
// consecutive entries share a message, so the index stream keeps every
// entry in revision order, as one message per entry did.
type batch struct {
	subject    string
	runs, revs []string
	bytes      int
}

// fits reports whether the entry of run id on subject joins the batch:
// it is empty, or of the same subject with room left (maxBatch entries,
// max bytes of headers).
func (b *batch) fits(subject, id string, max int) bool {
	return len(b.runs) == 0 || b.subject == subject && len(b.runs) < maxBatch && b.bytes+entryBytes(id) <= max
}

// entryBytes is about what an entry adds to a message's headers.
func entryBytes(id string) int { return len(id) + 48 }
