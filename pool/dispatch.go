package pool

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/elect"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DispatcherStats counts what this Pool's dispatcher did.
type DispatcherStats struct {
	// Leader: this dispatcher holds the pool's lease now.
	Leader bool
	// Terms is how many times it took the lease.
	Terms int64
	// Loaded: the current term has read the whole queue.
	Loaded bool
	// Queued is the number of pending items it knows of (waiting for a slot
	// or backing off).
	Queued int
	// Passes counts the passes that looked for items to start after the
	// queue was loaded.
	Passes int64
	// Started counts the items it started.
	Started int64
	// Skipped counts queue entries of items canceled or changed meanwhile.
	Skipped int64
	// Repaired counts slots the periodic check fixed (a lost completion, a
	// run never created, a slot never used).
	Repaired int64
	// Keys is the number of keys it holds a queue for (keys with items
	// waiting, or kept aside at their limit or throttle).
	Keys int
	// Dropped counts new items recorded canceled by DropNewest; Superseded
	// the items (waiting or running) canceled by CancelInProgress;
	// Debounced the items collapsed into a later one.
	Dropped    int64
	Superseded int64
	Debounced  int64
	// Collapsed is the number of items now collapsed into a later one of
	// their key that waits out its debounce window (they go with it).
	Collapsed int
}

// Start runs the pool's dispatcher in the background and returns at once.
// Any number of processes may start one; one holds the lease and works, the
// others stand by. It can run in the scheduler's process or anywhere. It
// runs until Stop or StopAndCancel, or until ctx ends, which stops it as
// Stop does.
func (pl *Pool) Start(ctx context.Context) error { return pl.life.Start(ctx, pl.run) }

// Stop stops the dispatcher and gives up the lease so a standby takes over.
// Items are not affected: pending ones wait, running ones run. It returns
// when the dispatcher has stopped, or with ctx's error when ctx ends first.
func (pl *Pool) Stop(ctx context.Context) error { return pl.life.Stop(ctx) }

// StopAndCancel is Stop: the dispatcher runs no handler of its own to
// cancel (the items run on workers: see worker.Worker.StopAndCancel). It
// exists so that every long-running part has the same lifecycle.
func (pl *Pool) StopAndCancel(ctx context.Context) error { return pl.life.Stop(ctx) }

// Stopped is closed when the dispatcher has stopped.
func (pl *Pool) Stopped() <-chan struct{} { return pl.life.Stopped() }

// Stats returns this dispatcher's counters.
func (pl *Pool) Stats() DispatcherStats {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.stats
}

func (pl *Pool) stat(f func(s *DispatcherStats)) {
	pl.mu.Lock()
	f(&pl.stats)
	pl.mu.Unlock()
}

// run campaigns for the pool's lease until ctx ends; each term runs a
// dispatcher.
func (pl *Pool) run(ctx context.Context) {
	e := &elect.Elector{Lease: pl.lease, TTL: pl.cfg.LeaseTTL, Now: pl.now, Log: pl.log, Name: "pool " + pl.name,
		OnTerm: func(leader bool) {
			pl.stat(func(s *DispatcherStats) {
				if leader {
					s.Leader = true
					s.Terms++
				} else {
					s.Leader, s.Loaded, s.Queued, s.Collapsed = false, false, 0, 0
				}
			})
		}}
	e.Run(ctx, func(ctx context.Context) {
		d := newDispatcher(pl)
		if err := d.loop(ctx); err != nil && ctx.Err() == nil {
			pl.log.Warn("pool dispatcher stopped", "pool", pl.name, "error", err)
		}
		d.wg.Wait()
	})
}

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

// dispatcher is one leadership term: it keeps the pool's queue in memory
// (read from the queue entries, then followed by a KV watch), and starts the
// items of smallest rank while the pool has free slots and the rate limit
// allows. Memory is a cache: the queue entries, item records and pool state
// in KV are the truth, and a new term reads them again.
type dispatcher struct {
	pl    *Pool
	index map[string]*entry // id -> its live entry
	// keys are the per-key queues (see keys.go): turns the runnable keys by
	// pass, limited the keys at their limit, throttled those out of their
	// rate, dirty those with new items to admit; nready counts the entries
	// in the keys' ready heaps, vt is the highest pass served (the pass of
	// the keys served all along), debt the credit taken by keys served
	// below it and not yet made up (see credit).
	keys      map[string]*keyQ
	turns     turnHeap
	limited   map[string]*keyQ
	throttled throttleHeap
	dirty     map[string]*keyQ
	canceling map[string]bool // running items this term canceled (CancelInProgress)
	nready    int
	vt        int64
	debt      int64
	actSeq    uint64
	later     timeHeap
	blocked   bool // no slot or token at the last pass: wait for a wake, the poll or the timer
	// releases are the slots to give back at the next pass: item id ->
	// attempt, for attempts seen ending (a finished item, a retry queued).
	releases map[string]int
	// seen is when the periodic check first saw each running slot.
	seen map[slotID]time.Time
	kept int // bytes of queue entries kept in memory
	// st and rev are the pool state as this dispatcher last wrote or read
	// it: passes caused by the watches start from it (a compare-and-swap
	// that fails reads it again); wakes, polls and timers read it afresh.
	st   *poolState
	rev  uint64
	redo chan *entry
	sem  chan struct{}
	wg   sync.WaitGroup
}

// slotID names one grant of a slot.
type slotID struct {
	id      string
	attempt int
	granted int64
}

func newDispatcher(pl *Pool) *dispatcher {
	return &dispatcher{pl: pl, index: map[string]*entry{}, releases: map[string]int{},
		keys: map[string]*keyQ{}, limited: map[string]*keyQ{}, dirty: map[string]*keyQ{}, canceling: map[string]bool{},
		redo: make(chan *entry, 1024), sem: make(chan struct{}, 256)}
}

func (d *dispatcher) live(e *entry) bool { return d.index[e.id] == e }

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
	if q.Attempt == 1 && q.Deb != nil && q.Deb.Window > 0 && !d.debounce(n) {
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

func (d *dispatcher) loop(ctx context.Context) error {
	pl := d.pl
	// Item records, from now on: items that end give their slot back.
	iw, err := pl.st.kv.Watch(ctx, itemKey(pl.name, "*"), jetstream.UpdatesOnly())
	if err != nil {
		return err
	}
	defer func() { _ = iw.Stop() }()
	w, err := pl.st.kv.Watch(ctx, queueKey(pl.name, "*"))
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	wake := make(chan struct{}, 1)
	sub, err := pl.st.nc.Subscribe(wakeSubject(pl.scfg, pl.name), func(*nats.Msg) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	poll := time.NewTicker(pl.cfg.PollInterval)
	defer poll.Stop()
	rec := time.NewTicker(pl.cfg.ReconcileInterval)
	defer rec.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	loaded, reconciled := false, false
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("pool: queue watch closed")
			}
			for n := 0; ; n++ {
				if e == nil {
					loaded = true
				} else {
					d.take(e)
				}
				if n == 4096 {
					break
				}
				more := false
				select {
				case e, ok = <-w.Updates():
					if !ok {
						return errors.New("pool: queue watch closed")
					}
					more = true
				default:
				}
				if !more {
					break
				}
			}
			if d.blocked && (len(d.dirty) == 0 || d.queueOnly()) {
				d.publishStats(loaded)
				continue
			}
		case e, ok := <-iw.Updates():
			if !ok {
				return errors.New("pool: item watch closed")
			}
			ended := e != nil && d.ended(e)
			for n := 0; n < 4096; n++ {
				more := false
				select {
				case e, ok = <-iw.Updates():
					if !ok {
						return errors.New("pool: item watch closed")
					}
					more = true
					ended = e != nil && d.ended(e) || ended
				default:
				}
				if !more {
					break
				}
			}
			if !ended {
				continue
			}
			d.blocked = false
		case e := <-d.redo:
			if d.index[e.id] == nil {
				d.index[e.id] = e
				d.schedule(e)
			}
		case <-wake:
			d.blocked, d.st = false, nil
		case <-poll.C:
			d.blocked, d.st = false, nil
		case <-timer.C:
			d.blocked, d.st = false, nil
		case <-rec.C:
			if loaded {
				d.reconcile(ctx, false)
			}
			d.st = nil
		}
		d.publishStats(loaded)
		if !loaded {
			continue
		}
		if !reconciled {
			// A new term: slots of attempts that ended while no dispatcher
			// watched are given back now.
			d.reconcile(ctx, true)
			reconciled, d.st = true, nil
		}
		next := d.pass(ctx)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
		d.publishStats(loaded)
	}
}

func (d *dispatcher) publishStats(loaded bool) {
	n, k, c := len(d.index), len(d.keys), 0
	for _, kq := range d.keys {
		if kq.deb != nil {
			c += len(kq.deb.collapsed)
		}
	}
	d.pl.stat(func(s *DispatcherStats) { s.Loaded, s.Queued, s.Keys, s.Collapsed = loaded, n, k, c })
}

// pass starts what can start now and returns how long to wait before the
// next pass if nothing wakes the dispatcher earlier.
func (d *dispatcher) pass(ctx context.Context) time.Duration {
	pl := d.pl
	pl.stat(func(s *DispatcherStats) { s.Passes++ })
	for round := 0; ; round++ {
		now := pl.now().UnixNano()
		for d.later.Len() > 0 && d.later[0].at <= now {
			e := heap.Pop(&d.later).(*entry)
			if d.live(e) {
				d.arrive(e)
			}
		}
		for d.throttled.Len() > 0 && d.throttled[0].until <= now {
			kq := heap.Pop(&d.throttled).(*keyQ)
			kq.throttled = false
			d.activate(kq)
			d.forgetKey(kq)
		}
		if d.nready == 0 && len(d.releases) == 0 && len(d.dirty) == 0 {
			return d.untilLater(now, time.Hour)
		}
		if round > 32 {
			return pl.cfg.PollInterval
		}
		st, rev, err := d.state(ctx)
		if err != nil {
			if ctx.Err() == nil {
				pl.log.Warn("pool state", "pool", pl.name, "error", err)
			}
			return pl.cfg.PollInterval
		}
		released := d.applyReleases(st)
		counts := st.runningByKey()
		d.admit(st, counts)
		d.unblock(st, counts)
		free := st.Max - len(st.Running)
		allow, rateNext := st.allowance(now)
		k := min(free, allow, pl.cfg.MaxStartsPerPass, d.nready)
		// flush writes the releases alone when nothing starts.
		flush := func() (again bool, wait time.Duration) {
			if released == 0 {
				clear(d.releases) // nothing of them was running
				return false, 0
			}
			if err := d.putState(ctx, st, rev); err == nil {
				clear(d.releases)
			} else if !errors.Is(err, errConflict) {
				return false, pl.cfg.PollInterval
			}
			return true, 0
		}
		if k <= 0 {
			if again, wait := flush(); again {
				continue
			} else if wait > 0 {
				return wait
			}
			if d.nready == 0 {
				return d.untilLater(now, time.Hour)
			}
			d.blocked = true
			if free > 0 && rateNext > 0 {
				return d.untilLater(now, time.Duration(rateNext-now))
			}
			return d.untilLater(now, time.Hour)
		}
		t := st.grantTime(now)
		picked, held := d.pick(st, counts, k, t)
		if len(picked) == 0 {
			d.putBack(held)
			if again, wait := flush(); again {
				continue
			} else if wait > 0 {
				return wait
			}
			// Every runnable key is at its limit or throttled, or its
			// items wait for their previous attempt's slot: the releases
			// and the throttle timer wake the next pass.
			return d.untilLater(now, time.Hour)
		}
		for _, e := range picked {
			st.Running[e.id] = slot{Attempt: e.q.Attempt, Granted: t, Key: e.q.Key}
		}
		st.pruneKeyStarts(t)
		st.recordStarts(t, len(picked))
		err = d.putState(ctx, st, rev)
		d.putBack(held)
		if err == nil {
			clear(d.releases)
		}
		if err != nil {
			d.putBack(picked)
			if errors.Is(err, errConflict) {
				continue
			}
			if ctx.Err() == nil {
				pl.log.Warn("pool state", "pool", pl.name, "error", err)
			}
			return pl.cfg.PollInterval
		}
		for _, e := range picked {
			d.drop(e)
			delete(d.index, e.id)
			d.sem <- struct{}{}
			d.wg.Add(1)
			go func() {
				defer func() { <-d.sem; d.wg.Done() }()
				// A grant under way finishes even if the term ends.
				d.recordCollapsed(e)
				gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				d.grant(gctx, e, t)
			}()
		}
	}
}

// state returns a copy of the pool state to change, and its revision.
func (d *dispatcher) state(ctx context.Context) (*poolState, uint64, error) {
	if d.st == nil {
		st, rev, ok, err := d.pl.st.getState(ctx, d.pl.name)
		if errors.Is(err, jetflow.ErrBadRecord) {
			// Another client's garbage: the active dispatcher rebuilds it.
			if rerr := d.pl.rebuildState(ctx, rev, err); rerr != nil {
				err = fmt.Errorf("%w; rebuild: %w", err, rerr)
			}
			return nil, 0, err
		}
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			// Deleted by another client: the active dispatcher makes it
			// again, as New would.
			err := fmt.Errorf("pool %s: %w", d.pl.name, ErrNoPool)
			if rerr := d.pl.rebuildState(ctx, 0, err); rerr != nil {
				err = fmt.Errorf("%w; rebuild: %w", err, rerr)
			}
			return nil, 0, err
		}
		if st.clampFuture(d.pl.now().UnixNano()) {
			// Written back at once, or every read would clamp them to
			// its own now, and the window would never pass.
			nrev, err := d.pl.st.putState(ctx, d.pl.name, st, rev)
			if err != nil {
				return nil, 0, err
			}
			d.pl.log.Warn("pool start times in the future brought back to now", "pool", d.pl.name)
			rev = nrev
		}
		d.st, d.rev = st, rev
	}
	c := *d.st
	c.Running = maps.Clone(d.st.Running)
	if c.Running == nil {
		c.Running = map[string]slot{}
	}
	c.Starts = slices.Clone(d.st.Starts)
	if d.st.KeyStarts != nil {
		c.KeyStarts = make(map[string][]int64, len(d.st.KeyStarts))
		for k, v := range d.st.KeyStarts {
			c.KeyStarts[k] = slices.Clone(v)
		}
	}
	return &c, d.rev, nil
}

// putState writes st if the state is still at rev, and keeps it as the
// current state; on a conflict the next pass reads the state again.
func (d *dispatcher) putState(ctx context.Context, st *poolState, rev uint64) error {
	nrev, err := d.pl.st.putState(ctx, d.pl.name, st, rev)
	if err != nil {
		d.st = nil
		return err
	}
	d.st, d.rev = st, nrev
	return nil
}

// applyReleases removes from st the slots of attempts seen ending, and
// returns how many it removed.
func (d *dispatcher) applyReleases(st *poolState) int {
	n := 0
	for id, a := range d.releases {
		if s, ok := st.Running[id]; ok && s.Attempt == a {
			delete(st.Running, id)
			n++
		}
	}
	return n
}

func (d *dispatcher) untilLater(now int64, max time.Duration) time.Duration {
	for d.later.Len() > 0 && !d.live(d.later[0]) {
		heap.Pop(&d.later)
	}
	if d.later.Len() > 0 {
		if w := time.Duration(d.later[0].at - now); w < max {
			max = w
		}
	}
	if d.throttled.Len() > 0 {
		if w := time.Duration(d.throttled[0].until - now); w < max {
			max = w
		}
	}
	if max < time.Millisecond {
		max = time.Millisecond
	}
	return max
}

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
