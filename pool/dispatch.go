package pool

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/internal/elect"
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
	e := &elect.Elector{Lease: pl.lease, TTL: pl.cfg.LeaseTTL, Log: pl.log, Name: "pool " + pl.name,
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
	loaded    bool // the queue has been read whole
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

// loop is the term's event loop: it follows the queue and the item records,
// and runs a pass after each change that may let an item start, and at each
// wake, poll and timer.
func (d *dispatcher) loop(ctx context.Context) error {
	pl := d.pl
	src, err := d.watch(ctx)
	if err != nil {
		return err
	}
	defer src.stop(pl)
	poll := time.NewTicker(pl.cfg.PollInterval)
	defer poll.Stop()
	rec := time.NewTicker(pl.cfg.ReconcileInterval)
	defer rec.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	reconciled := false
	for {
		pass, err := d.await(ctx, src, poll.C, rec.C, timer.C)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if !pass {
			continue
		}
		d.publishStats()
		if !d.loaded {
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
		d.publishStats()
	}
}

// sources are what a term follows: the item records (from now on: items
// that end give their slot back), the queue entries, and the wakes that
// Enqueue and the completions send.
type sources struct {
	items, queue jetstream.KeyWatcher
	sub          *nats.Subscription
	wake         chan struct{}
}

func (d *dispatcher) watch(ctx context.Context) (*sources, error) {
	pl := d.pl
	src := &sources{wake: make(chan struct{}, 1)}
	var err error
	if src.items, err = pl.st.kv.Watch(ctx, itemKey(pl.name, "*"), jetstream.UpdatesOnly()); err != nil {
		return nil, err
	}
	if src.queue, err = pl.st.kv.Watch(ctx, queueKey(pl.name, "*")); err != nil {
		src.stop(pl)
		return nil, err
	}
	src.sub, err = pl.st.nc.Subscribe(wakeSubject(pl.scfg, pl.name), func(*nats.Msg) {
		select {
		case src.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		src.stop(pl)
		return nil, err
	}
	return src, nil
}

// stop ends the watches and the subscription. Their errors change nothing
// for the next term, which watches anew: they are logged at debug level.
func (s *sources) stop(pl *Pool) {
	var errs []error
	if s.sub != nil {
		errs = append(errs, s.sub.Unsubscribe())
	}
	if s.queue != nil {
		errs = append(errs, s.queue.Stop())
	}
	errs = append(errs, s.items.Stop())
	if err := errors.Join(errs...); err != nil {
		pl.log.Debug("pool dispatcher: stop watching", "pool", pl.name, "error", err)
	}
}

var (
	errQueueWatchClosed = errors.New("pool: queue watch closed")
	errItemWatchClosed  = errors.New("pool: item watch closed")
)

// batchMax bounds the watch updates taken in one go before a pass.
const batchMax = 4096

// await waits for one event and applies it, and reports whether a pass
// follows.
func (d *dispatcher) await(ctx context.Context, src *sources, poll, rec, timer <-chan time.Time) (pass bool, err error) {
	select {
	case <-ctx.Done():
		return false, nil
	case e, ok := <-src.queue.Updates():
		if !ok {
			return false, errQueueWatchClosed
		}
		if err := d.takeQueue(src.queue, e); err != nil {
			return false, err
		}
		if d.blocked && (len(d.dirty) == 0 || d.queueOnly()) {
			d.publishStats()
			return false, nil
		}
	case e, ok := <-src.items.Updates():
		if !ok {
			return false, errItemWatchClosed
		}
		ended, err := d.takeEnded(src.items, e)
		if err != nil || !ended {
			return false, err
		}
		d.blocked = false
	case e := <-d.redo:
		if d.index[e.id] == nil {
			d.index[e.id] = e
			d.schedule(e)
		}
	case <-src.wake:
		d.blocked, d.st = false, nil
	case <-poll:
		d.blocked, d.st = false, nil
	case <-timer:
		d.blocked, d.st = false, nil
	case <-rec:
		if d.loaded {
			d.reconcile(ctx, false)
		}
		d.st = nil
	}
	return true, nil
}

// takeQueue applies queue watch update e, and the updates already waiting
// after it (batchMax at most); a nil update marks the queue loaded.
func (d *dispatcher) takeQueue(w jetstream.KeyWatcher, e jetstream.KeyValueEntry) error {
	for n := 0; ; n++ {
		if e == nil {
			d.loaded = true
		} else {
			d.take(e)
		}
		if n == batchMax {
			return nil
		}
		select {
		case next, ok := <-w.Updates():
			if !ok {
				return errQueueWatchClosed
			}
			e = next
		default:
			return nil
		}
	}
}

// takeEnded applies item watch update e, and the updates already waiting
// after it (batchMax at most), and reports whether an attempt ended.
func (d *dispatcher) takeEnded(w jetstream.KeyWatcher, e jetstream.KeyValueEntry) (bool, error) {
	ended := e != nil && d.ended(e)
	for n := 0; n < batchMax; n++ {
		select {
		case next, ok := <-w.Updates():
			if !ok {
				return false, errItemWatchClosed
			}
			ended = next != nil && d.ended(next) || ended
		default:
			return ended, nil
		}
	}
	return ended, nil
}

func (d *dispatcher) publishStats() {
	n, k, c := len(d.index), len(d.keys), 0
	for _, kq := range d.keys {
		if kq.deb != nil {
			c += len(kq.deb.collapsed)
		}
	}
	d.pl.stat(func(s *DispatcherStats) { s.Loaded, s.Queued, s.Keys, s.Collapsed = d.loaded, n, k, c })
}
