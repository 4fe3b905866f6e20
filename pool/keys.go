package pool

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
)

// The dispatcher's per-key queues.
//
// Every pending item belongs to a key (Item.Key; "" for items without
// one). The dispatcher keeps one queue per key with waiting items, ordered
// by rank (priority with aging), and serves the keys by stride scheduling,
// a weighted round robin: each key has a pass; the key with the smallest
// pass goes next and its pass grows by its stride, strideUnit / weight. A
// key that becomes runnable (new items, a slot of its own freed, its
// throttle window moved on) starts no lower than the pass of the last key
// served less KeyBurst turns (KeyBurst x strideUnit): a key that has had
// no start for a while goes first for up to KeyBurst x weight starts, so
// that a tenant's small burst starts about as soon as in an idle pool,
// while a key served all along (its pass at the front) gains nothing, and
// no key banks more than that credit however long it was idle. The keys with runnable items are in one
// heap by pass, keys at their limit in a set that each pass checks against
// the running slots (at most MaxParallelismLimit of them), throttled keys
// in a heap by the time their window allows a start: a start costs
// O(log keys + log items of its key), whatever the number of keys.

// strideUnit is the stride of a key of weight 1.
const strideUnit = 720720

// keyQ is one key's queue.
type keyQ struct {
	key    string
	ready  rankHeap // entries that may start now, by rank
	pass   int64
	stride int64
	order  uint64 // when it last became runnable: ties of pass go first come
	hidx   int    // index in dispatcher.turns, -1 when not in it
	// limited: the key is at its limit (in dispatcher.limited); throttled:
	// its rate window is full until until (in dispatcher.throttled).
	limited   bool
	throttled bool
	until     int64
	tidx      int
	// incoming are new items (attempt 1) that became ready and wait for
	// the key's strategy to admit them (next pass); fifo are the admitted
	// ones not started, in order of arrival (strategies other than Queue).
	incoming []*entry
	fifo     []*entry
	// deb is the waiting debounced item of the key: the next one
	// supersedes it.
	deb *entry
}

// turnHeap orders runnable keys by pass, then by when they became runnable.
type turnHeap []*keyQ

func (h turnHeap) Len() int { return len(h) }
func (h turnHeap) Less(i, j int) bool {
	if h[i].pass != h[j].pass {
		return h[i].pass < h[j].pass
	}
	return h[i].order < h[j].order
}
func (h turnHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *turnHeap) Push(x any) {
	k := x.(*keyQ)
	k.hidx = len(*h)
	*h = append(*h, k)
}
func (h *turnHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	*h = old[:len(old)-1]
	k.hidx = -1
	return k
}

// throttleHeap orders throttled keys by when they may start again.
type throttleHeap []*keyQ

func (h throttleHeap) Len() int           { return len(h) }
func (h throttleHeap) Less(i, j int) bool { return h[i].until < h[j].until }
func (h throttleHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].tidx, h[j].tidx = i, j
}
func (h *throttleHeap) Push(x any) {
	k := x.(*keyQ)
	k.tidx = len(*h)
	*h = append(*h, k)
}
func (h *throttleHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	*h = old[:len(old)-1]
	k.tidx = -1
	return k
}

// keyQ returns key's queue, created when missing.
func (d *dispatcher) keyQ(key string) *keyQ {
	kq := d.keys[key]
	if kq == nil {
		w := 1
		if f := d.pl.cfg.KeyWeight; f != nil {
			w = min(max(f(key), 1), MaxKeyWeight)
		}
		kq = &keyQ{key: key, stride: strideUnit / int64(w), pass: d.vt - d.credit(), hidx: -1, tidx: -1}
		d.keys[key] = kq
	}
	return kq
}

// credit is how far below the last pass served a returning key may start:
// KeyBurst turns, less the turns that keys took on credit and that the keys
// served all along have not yet taken back. The credit is shared, so that a
// flood of new keys (each one new, each with credit of its own) takes turns
// with the keys served all along rather than starving them.
func (d *dispatcher) credit() int64 { return max(d.burst()-d.debt, 0) }

func (d *dispatcher) burst() int64 { return int64(d.pl.cfg.KeyBurst) * strideUnit }

// forgetKey removes an idle key's queue.
func (d *dispatcher) forgetKey(kq *keyQ) {
	// Admitted entries that started or went away leave the fifo here too:
	// a key whose items all started is forgotten.
	kq.fifo = slices.DeleteFunc(kq.fifo, func(e *entry) bool { return !d.live(e) })
	if !kq.standing() && !kq.hasItems() && d.keys[kq.key] == kq {
		delete(d.keys, kq.key)
	}
}

// standing reports whether kq is in the turns, or held aside (at its
// limit, or throttled).
func (kq *keyQ) standing() bool { return kq.hidx >= 0 || kq.limited || kq.throttled }

// hasItems reports whether kq has items: ready, arriving, admitted or
// debounced.
func (kq *keyQ) hasItems() bool {
	return kq.ready.Len()+len(kq.incoming)+len(kq.fifo) > 0 || kq.deb != nil
}

// activate makes kq runnable if it has ready items and nothing holds it.
func (d *dispatcher) activate(kq *keyQ) {
	if kq.standing() || kq.ready.Len() == 0 {
		return
	}
	if floor := d.vt - d.credit(); kq.pass < floor {
		kq.pass = floor
	}
	d.actSeq++
	kq.order = d.actSeq
	heap.Push(&d.turns, kq)
}

func (d *dispatcher) pushReady(kq *keyQ, e *entry) {
	heap.Push(&kq.ready, e)
	d.nready++
	d.activate(kq)
}

// arrive takes an entry whose time has come: a new item waits for its
// key's strategy to admit it at the next pass; a retry is ready at once.
func (d *dispatcher) arrive(e *entry) {
	kq := d.keyQ(e.q.Key)
	if e.q.Attempt == 1 && !e.admitted {
		kq.incoming = append(kq.incoming, e)
		d.dirty[kq.key] = kq
		return
	}
	d.pushReady(kq, e)
}

// forget removes a waiting entry from the dispatcher's memory.
func (d *dispatcher) forget(e *entry) {
	if d.live(e) {
		d.drop(e)
		delete(d.index, e.id)
	}
}

// queueOnly reports whether the last state read admits every new item at
// once (no key strategy to apply).
func (d *dispatcher) queueOnly() bool {
	return d.st == nil || !d.st.strategyApplies()
}

// admit applies the key strategy to the new items that arrived since the
// last pass, against the running slots of st (counts per key).
func (d *dispatcher) admit(st *poolState, counts map[string]int) {
	var byKey map[string][]string // running item ids per key, oldest grant first
	for key, kq := range d.dirty {
		delete(d.dirty, key)
		in := kq.incoming
		kq.incoming = nil
		strat := st.KeyStrategy
		if !st.strategyApplies() || !keyLimited(key) {
			kq.fifo = nil
			for _, e := range in {
				if d.live(e) {
					e.admitted = true
					d.pushReady(kq, e)
				}
			}
			d.forgetKey(kq)
			continue
		}
		kq.fifo = slices.DeleteFunc(kq.fifo, func(e *entry) bool { return !d.live(e) })
		switch strat {
		case DropNewest:
			for _, e := range in {
				if !d.live(e) {
					continue
				}
				if counts[key]+len(kq.fifo) < st.KeyLimit {
					e.admitted = true
					kq.fifo = append(kq.fifo, e)
					d.pushReady(kq, e)
					continue
				}
				d.forget(e)
				d.pl.stat(func(s *DispatcherStats) { s.Dropped++ })
				d.supersede(e, cancelCause{reason: fmt.Sprintf("dropped: key %q has %d items running or waiting, its limit (drop-newest)", key, st.KeyLimit)})
			}
		case CancelInProgress:
			for _, e := range in {
				if d.live(e) {
					e.admitted = true
					kq.fifo = append(kq.fifo, e)
					d.pushReady(kq, e)
				}
			}
			if len(kq.fifo) == 0 {
				break
			}
			newest := kq.fifo[len(kq.fifo)-1]
			why := cancelCause{reason: fmt.Sprintf("superseded by newer item %s of key %q (cancel-in-progress)", newest.id, key), by: newest.id}
			for len(kq.fifo) > st.KeyLimit {
				old := kq.fifo[0]
				kq.fifo = kq.fifo[1:]
				d.forget(old)
				d.pl.stat(func(s *DispatcherStats) { s.Superseded++ })
				d.supersede(old, why)
			}
			if byKey == nil {
				byKey = runningIDsByKey(st)
			}
			excess := len(kq.fifo) - st.KeyLimit
			for _, id := range byKey[key] {
				if !d.canceling[id] {
					excess++
				}
			}
			for _, id := range byKey[key] {
				if excess <= 0 {
					break
				}
				if d.canceling[id] {
					continue
				}
				d.canceling[id] = true
				excess--
				d.pl.stat(func(s *DispatcherStats) { s.Superseded++ })
				d.async(func(ctx context.Context) {
					if err := d.pl.cancel(ctx, id, why); err != nil && !errors.Is(err, jetflow.ErrNotFound) {
						d.pl.log.Warn("cancel in progress", "pool", d.pl.name, "item", id, "error", err)
					}
				})
			}
		}
		d.forgetKey(kq)
	}
}

// runningIDsByKey lists the running items of each key, oldest grant first.
func runningIDsByKey(st *poolState) map[string][]string {
	out := map[string][]string{}
	for id, s := range st.Running {
		if keyLimited(s.Key) {
			out[s.Key] = append(out[s.Key], id)
		}
	}
	for _, ids := range out {
		slices.SortFunc(ids, func(a, b string) int {
			ga, gb := st.Running[a].Granted, st.Running[b].Granted
			if ga != gb {
				if ga < gb {
					return -1
				}
				return 1
			}
			if a < b {
				return -1
			}
			return 1
		})
	}
	return out
}

// unblock makes runnable again the keys that were at their limit and no
// longer are, and forgets the cancels of slots given back.
func (d *dispatcher) unblock(st *poolState, counts map[string]int) {
	for key, kq := range d.limited {
		if st.KeyLimit <= 0 || counts[key] < st.KeyLimit {
			delete(d.limited, key)
			kq.limited = false
			d.activate(kq)
			d.forgetKey(kq)
		}
	}
	for id := range d.canceling {
		if _, ok := st.Running[id]; !ok {
			delete(d.canceling, id)
		}
	}
}

// pick takes up to k entries to start at grant time t, key by key in turn:
// a key at its limit or out of its rate waits aside. Entries whose previous
// attempt still holds its slot are returned as held, to be put back. The
// key starts are recorded on st as they are picked; counts gain the picks.
func (d *dispatcher) pick(st *poolState, counts map[string]int, k int, t int64) (picked, held []*entry) {
	for len(picked) < k && d.turns.Len() > 0 {
		kq := d.turns[0]
		for kq.ready.Len() > 0 && !d.live(kq.ready[0]) {
			heap.Pop(&kq.ready)
			d.nready--
		}
		if kq.ready.Len() == 0 {
			heap.Pop(&d.turns)
			d.forgetKey(kq)
			continue
		}
		if st.KeyLimit > 0 && keyLimited(kq.key) && counts[kq.key] >= st.KeyLimit {
			heap.Pop(&d.turns)
			kq.limited = true
			d.limited[kq.key] = kq
			continue
		}
		if n, next := st.keyAllowance(kq.key, t); n <= 0 {
			heap.Pop(&d.turns)
			kq.throttled, kq.until = true, next
			heap.Push(&d.throttled, kq)
			continue
		}
		e := heap.Pop(&kq.ready).(*entry)
		d.nready--
		if _, running := st.Running[e.id]; running {
			held = append(held, e)
			continue
		}
		picked = append(picked, e)
		counts[kq.key]++
		st.recordKeyStart(kq.key, t)
		if kq.deb == e {
			kq.deb = nil // its collapsed items are recorded before it starts
		}
		if kq.pass < d.vt {
			// A turn on credit; past the whole burst, it moves the pass
			// of the keys served all along on, to bring their turn.
			d.debt += kq.stride
			if over := d.debt - d.burst(); over > 0 {
				d.vt += over
				d.debt -= over
			}
		} else {
			d.vt = kq.pass
			d.debt = max(d.debt-kq.stride, 0)
		}
		kq.pass += kq.stride
		if kq.ready.Len() > 0 {
			heap.Fix(&d.turns, 0)
		} else {
			heap.Pop(&d.turns)
			d.forgetKey(kq)
		}
	}
	return picked, held
}

// putBack returns entries picked (or held) to their keys.
func (d *dispatcher) putBack(es []*entry) {
	for _, e := range es {
		if d.live(e) {
			d.pushReady(d.keyQ(e.q.Key), e)
		}
	}
}

// debounce takes a new debounced entry: it becomes its key's waiting
// debounced item, and the one it replaces joins the items collapsed into
// it. It waits until the key has been quiet for the window, at most MaxWait
// after the first item of the burst. The collapsed items keep their queue
// entries until the burst's last item starts; only then are they recorded
// as "debounced into" it, so that a dispatcher taking over meets the whole
// burst again and the record names the item that ran. It reports whether e
// is to be kept.
func (d *dispatcher) debounce(e *entry) bool {
	kq := d.keyQ(e.q.Key)
	e.debFirst = e.q.Ready
	if h := kq.deb; h != nil && d.live(h) {
		if h.seq > e.seq {
			// Not in arrival order (cannot happen with one watch): the
			// later one wins all the same.
			e.q.Item = nil
			h.collapsed = append(h.collapsed, e)
			return false
		}
		e.debFirst = min(e.debFirst, h.debFirst)
		e.collapsed = append(h.collapsed, h)
		h.collapsed = nil
		d.forget(h)
		h.q.Item = nil // read again when it is recorded
	} else if h != nil {
		d.flushDebounce(h)
	}
	kq.deb = e
	e.at = addSat(e.q.Ready, int64(e.q.Deb.Window))
	if m := e.q.Deb.MaxWait; m > 0 {
		e.at = min(e.at, addSat(e.debFirst, int64(m)))
	}
	return true
}

// flushDebounce records the items collapsed into e as debounced into it,
// e being gone (canceled before it started): they go with it.
func (d *dispatcher) flushDebounce(e *entry) {
	if kq := d.keys[e.q.Key]; kq != nil && kq.deb == e {
		kq.deb = nil
		d.forgetKey(kq)
	}
	for _, c := range e.collapsed {
		d.pl.stat(func(s *DispatcherStats) { s.Debounced++ })
		d.supersede(c, cancelCause{reason: "debounced into " + e.id, by: e.id})
	}
	e.collapsed = nil
}

// recordCollapsed records the items collapsed into e, which is about to
// start, as debounced into it, and returns when they are recorded: only
// then does e start, so that a dispatcher that dies in between leaves a
// burst that the next one collapses into e again, never a second run. An
// item that cannot be recorded is given back to the queue to run.
func (d *dispatcher) recordCollapsed(e *entry) {
	if len(e.collapsed) == 0 {
		return
	}
	// About 5 round trips each, 32 at a time: the time scales with the
	// burst.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+time.Duration(len(e.collapsed))*10*time.Millisecond)
	defer cancel()
	why := cancelCause{reason: "debounced into " + e.id, by: e.id}
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for _, c := range e.collapsed {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			d.pl.stat(func(s *DispatcherStats) { s.Debounced++ })
			d.cancelWaiting(ctx, c, why)
		}()
	}
	wg.Wait()
	e.collapsed = nil
}

// supersede cancels waiting entry e (forgotten already) for why, through
// the pool's cancel path, and removes its queue entry. If the cancel fails
// the entry comes back, to be started rather than lost.
func (d *dispatcher) supersede(e *entry, why cancelCause) {
	d.async(func(ctx context.Context) { d.cancelWaiting(ctx, e, why) })
}

func (d *dispatcher) cancelWaiting(ctx context.Context, e *entry, why cancelCause) {
	err := d.pl.cancel(ctx, e.id, why)
	if err != nil && !errors.Is(err, jetflow.ErrNotFound) {
		d.pl.log.Warn("cancel superseded item; it will run instead", "pool", d.pl.name, "item", e.id, "reason", why.reason, "error", err)
		e.admitted = true
		e.at = d.pl.now().Add(time.Second).UnixNano()
		select {
		case d.redo <- e:
		case <-ctx.Done():
			// No loop took it (the term ended): the next term reads the
			// entry again.
		}
		return
	}
	if err := d.pl.st.deleteMsg(ctx, e.seq); err != nil {
		// The entry of a finished item: dropped as stale by whoever finds it.
		d.pl.log.Debug("remove the queue entry of a superseded item", "pool", d.pl.name, "item", e.id, "error", err)
	}
}

// async runs f off the dispatcher's loop (bounded, awaited at the end of
// the term); f's context outlives the term by up to 10 s.
func (d *dispatcher) async(f func(ctx context.Context)) {
	d.sem <- struct{}{}
	d.wg.Add(1)
	go func() {
		defer func() { <-d.sem; d.wg.Done() }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f(ctx)
	}()
}
