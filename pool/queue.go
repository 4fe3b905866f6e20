package pool

import (
	"container/heap"
	"encoding/json"
	"strings"

	"github.com/jetflow-dev/jetflow"
	"github.com/nats-io/nats.go/jetstream"
)

// entry is a queue entry in the dispatcher's memory.
type entry struct {
	id   string
	seq  uint64
	q    queued
	rank int64 // q.Ready - priority x Aging: smaller starts first
	at   int64 // when it may be tried (Unix ns)
	size int   // bytes of q.Item kept in memory
	// admitted: its key's strategy let it wait to start (new items only).
	admitted bool
	// debFirst is when its debounce burst began; collapsed are the
	// earlier items of the burst, recorded as debounced into it when it
	// starts.
	debFirst  int64
	collapsed []*entry
}

// rankHeap orders ready entries by rank, then by queue sequence.
type rankHeap []*entry

func (h rankHeap) Len() int { return len(h) }
func (h rankHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].seq < h[j].seq
}
func (h rankHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *rankHeap) Push(x any)   { *h = append(*h, x.(*entry)) }
func (h *rankHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// timeHeap orders entries not ready yet by when they may be tried.
type timeHeap []*entry

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(*entry)) }
func (h *timeHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// The dispatcher keeps a new item's queue entry in memory, to start it
// without reading it again, if the entry is at most maxKeptEntry bytes and
// the entries kept total at most maxKeptBytes; others are read again when
// they start. Every pending item costs its metadata (about 100 bytes).
const (
	maxKeptEntry = 16 << 10
	maxKeptBytes = 64 << 20
)

func (d *dispatcher) add(e *entry) {
	old := d.index[e.id]
	if old != nil && old.seq >= e.seq {
		return
	}
	if old != nil {
		d.drop(old)
	}
	if e.q.Item != nil && (e.size > maxKeptEntry || d.kept+e.size > maxKeptBytes) {
		e.q.Item, e.size = nil, 0 // read again when it starts
	}
	if e.q.Item == nil {
		e.size = 0
	}
	d.kept += e.size
	d.index[e.id] = e
	d.schedule(e)
}

// drop forgets e's kept item.
func (d *dispatcher) drop(e *entry) {
	d.kept -= e.size
	e.size = 0
}

func (d *dispatcher) schedule(e *entry) {
	if e.at <= d.pl.now().UnixNano() {
		d.arrive(e)
	} else {
		heap.Push(&d.later, e)
	}
}

func (d *dispatcher) take(e jetstream.KeyValueEntry) {
	pfx := queueKey(d.pl.name, "")
	id, ok := strings.CutPrefix(e.Key(), pfx)
	if !ok {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		if old := d.index[id]; old != nil && old.seq <= e.Revision() {
			d.drop(old)
			delete(d.index, id)
			if len(old.collapsed) > 0 {
				// A debounced item canceled before it started: its burst
				// goes with it.
				d.flushDebounce(old)
			}
		}
		return
	}
	var q queued
	err := json.Unmarshal(e.Value(), &q)
	if err == nil {
		err = jetflow.ValidateRunID(id)
	}
	if err == nil {
		err = q.check(d.pl.name, id)
	}
	if err != nil {
		// Not written by the pool: it starts nothing (Status reports it).
		d.pl.log.Warn("bad pool queue entry, ignored", "pool", d.pl.name, "key", e.Key(), "error", err)
		d.pl.stat(func(s *DispatcherStats) { s.Skipped++ })
		return
	}
	if q.Attempt > 1 {
		// A retry queued: the attempt before it has ended.
		d.releases[id] = q.Attempt - 1
	}
	n := &entry{id: id, seq: e.Revision(), q: q, rank: addSat(q.Ready, mulSat(-int64(q.Priority), int64(d.pl.cfg.Aging))), at: q.Ready, size: len(e.Value())}
	if old := d.index[id]; old != nil && old.seq >= n.seq {
		return
	}
	if q.debounced() && !d.debounce(n) {
		return
	}
	d.add(n)
}

// ended notes an item record written: a finished item's slot is given back.
func (d *dispatcher) ended(e jetstream.KeyValueEntry) bool {
	if e.Operation() != jetstream.KeyValuePut {
		return false
	}
	var it struct {
		State    jetflow.State `json:"state"`
		Attempts int           `json:"attempts"`
	}
	if err := json.Unmarshal(e.Value(), &it); err != nil || !it.State.Terminal() {
		return false
	}
	id, _ := strings.CutPrefix(e.Key(), itemKey(d.pl.name, ""))
	if w := d.index[id]; w != nil && w.q.Attempt > it.Attempts {
		// Finished (canceled) while waiting: its entry is stale. A
		// debounced burst waiting on it goes with it.
		d.forget(w)
		if len(w.collapsed) > 0 {
			d.flushDebounce(w)
		}
	}
	if it.Attempts < 1 {
		return false
	}
	d.releases[id] = it.Attempts
	return true
}
