package scheduler

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/elect"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/lifecycle"
	"github.com/jetflow-dev/jetflow/internal/liveness"
	"github.com/jetflow-dev/jetflow/internal/pace"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/internal/srvclock"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Config configures a Scheduler. Every zero field takes the default named.
type Config struct {
	// Streams names subjects and buckets (default prefix "jetflow").
	Streams streams.Config
	// Logger. Default: discard.
	Logger *slog.Logger
	// ID names this scheduler in the lease. Default: generated.
	ID string
	// LeaseTTL is how long a dead leader keeps the lease. Default 5 s; the
	// leader renews every LeaseTTL/5 and standbys try as often.
	LeaseTTL time.Duration
	// Horizon is how far ahead delayed runs are loaded into memory. Runs due
	// later are read when their second comes within the horizon. Default 10 s.
	Horizon time.Duration
	// RepairInterval is the period of the repair sweep. Default 30 s.
	RepairInterval time.Duration
	// RepairGrace is how long a pending record may go without a message
	// before the sweep publishes it. Default 10 s.
	RepairGrace time.Duration
	// StaleAfter is how long the repair sweep must see the record of an
	// inProgress run whose message is gone unchanged (no heartbeat) before
	// it settles it, measured on this scheduler's clock. Default 2 minutes
	// (workers heartbeat every AckWait/3, 10 s by default).
	StaleAfter time.Duration
	// PayloadSweep is the period of the payload sweep, which deletes the
	// large payloads of runs whose records have expired (SweepPayloads).
	// Default a tenth of the retention, at least a second, at most an
	// hour; negative: no sweep (the payloads bucket's TTL alone).
	PayloadSweep time.Duration
	// DispatchParallel bounds concurrent publishes of due runs. Default 256.
	DispatchParallel int
	// Now is the clock. Default: the NATS server's time, this process's
	// clock corrected by its offset, measured every 10 s (due times, cron
	// ticks and leases are judged in the server's time).
	Now func() time.Time
	// Crons are configured in one place, ConfigureCrons: the code-defined
	// crons and the evaluator's settings (page size, minimum interval,
	// grace).
}

// Scheduler publishes delayed runs when due, repairs runs whose message was
// never published, and evaluates crons. Any number may run; one leader
// works, the others stand by.
type Scheduler struct {
	cfg   Config
	scfg  streams.Config
	js    jetstream.JetStream
	store *kv.Store      // reads
	runs  *engine.Runs   // record writes
	live  liveness.Watch // in-progress records seen unchanged (repairRunning)
	p     *producer.Producer
	d     *engine.Dispatcher // the producer's plumbing: dispatch, release, on-complete
	lease *kv.Lease
	// leases is the leases bucket: the lease, and the delayed
	// dispatcher's checkpoint.
	leases jetstream.KeyValue
	log    *slog.Logger
	now    func() time.Time
	life   lifecycle.L

	mu     sync.Mutex
	leader bool
	stats  Stats

	index *runindex.Indexer // run on the leader

	health schedHealth // what liveness and readiness read (health.go)
	ops    opsState    // the backlog reader (backlog_ops.go)

	cronsMu sync.Mutex
	crons   *Crons

	// holds is elect.Holds (a test stands in for a term that no longer
	// holds its lease).
	holds func(context.Context) bool
}

// Stats counts what this scheduler did.
type Stats struct {
	Dispatched int64
	Repaired   int64
	Terms      int64
	// Sweeps counts the repair sweeps this scheduler's leader loop ended
	// (the first of a term waits until what is due was read).
	Sweeps int64
	// Ticks counts the dispatcher's ticks (every 200 ms while leading:
	// reading the delayed entries of the seconds that came within
	// Config.Horizon); TickTime is the time they took in all.
	Ticks    int64
	TickTime time.Duration
}

// New returns a scheduler. It provisions streams and buckets (idempotent).
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Scheduler, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ID == "" {
		cfg.ID = nuid.Next()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 5 * time.Second
	}
	if cfg.LeaseTTL < time.Second {
		cfg.LeaseTTL = time.Second
	}
	if cfg.Horizon <= 0 {
		cfg.Horizon = 10 * time.Second
	}
	if cfg.RepairInterval <= 0 {
		cfg.RepairInterval = 30 * time.Second
	}
	if cfg.RepairGrace <= 0 {
		cfg.RepairGrace = 10 * time.Second
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 2 * time.Minute
	}
	if cfg.DispatchParallel <= 0 {
		cfg.DispatchParallel = 256
	}
	if cfg.PayloadSweep == 0 {
		cfg.PayloadSweep = payloadSweepEvery(cfg.Streams.WithDefaults().Retention)
	}
	if cfg.Now == nil {
		cfg.Now = srvclock.Follow(ctx, nil, js.Conn(), kv.APIPrefix(js), cfg.Streams.WithDefaults().FunctionStream(), 10*time.Second)
	}
	p, err := producer.New(ctx, js, producer.Config{Streams: cfg.Streams, Logger: cfg.Logger, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	scfg := cfg.Streams.WithDefaults()
	leases, err := js.KeyValue(ctx, scfg.LeasesBucket())
	if err != nil {
		return nil, err
	}
	d := engine.Of(p)
	s := &Scheduler{cfg: cfg, scfg: scfg, js: js, store: d.Store(), runs: d.Runs(), p: p, d: d, leases: leases, log: cfg.Logger, now: cfg.Now, holds: elect.Holds}
	s.lease = kv.NewLease(js, leases, "scheduler", cfg.ID, cfg.LeaseTTL, cfg.Now)
	s.index = runindex.New(js, cfg.Streams) // its Replicas as given: zero keeps the index stream's
	s.index.Name, s.index.Log = cfg.ID, cfg.Logger
	s.index.RecountRate = backgroundRate
	return s, nil
}

// Start runs the scheduler in the background and returns at once. It runs
// until Stop or StopAndCancel, or until ctx ends, which stops it as Stop
// does.
func (s *Scheduler) Start(ctx context.Context) error { return s.life.Start(ctx, s.run) }

// Stop stops the scheduler, giving up the lease so a standby takes over. It
// returns when the scheduler has stopped, or with ctx's error when ctx ends
// first.
func (s *Scheduler) Stop(ctx context.Context) error { s.health.drain(); return s.life.Stop(ctx) }

// StopAndCancel is Stop: the scheduler runs no handler to cancel (its
// publishes in flight end with it; a run they had not published yet is
// published by the next leader). It exists so that every long-running part
// has the same lifecycle (see worker.Worker.StopAndCancel).
func (s *Scheduler) StopAndCancel(ctx context.Context) error {
	s.health.drain()
	return s.life.Stop(ctx)
}

// Stopped is closed when the scheduler has stopped.
func (s *Scheduler) Stopped() <-chan struct{} { return s.life.Stopped() }

// IsLeader reports whether this scheduler holds the lease now.
func (s *Scheduler) IsLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader
}

// Stats returns counters of this scheduler.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Leader reads who holds the lease.
func (s *Scheduler) Leader(ctx context.Context) (LeaseInfo, error) { return s.lease.Info(ctx) }

func (s *Scheduler) setLeader(v bool) {
	s.mu.Lock()
	s.leader = v
	if v {
		s.stats.Terms++
	}
	s.mu.Unlock()
}

// run campaigns for the lease until ctx ends; each term leads.
func (s *Scheduler) run(ctx context.Context) {
	defer s.observeBacklog()() // the backlog gauges (backlog_ops.go)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.codeCheckLoop(ctx) })
	e := &elect.Elector{Lease: s.lease, TTL: s.cfg.LeaseTTL, Log: s.log, Name: "scheduler " + s.cfg.ID, OnTerm: s.setLeader, OnAttempt: s.health.attempt}
	e.Run(ctx, s.lead)
}

// item is a delayed entry waiting in memory.
type item struct {
	due time.Time
	sec int64 // the due second of its key
	key string
	rev uint64
	d   kv.Delayed
	// bad: the entry cannot be dispatched (undecodable, or naming no valid
	// run or function): it is dead-lettered (deadLetter).
	bad  error
	data []byte
	// doubts counts the dispatches that found the record missing or
	// behind and could not ask the stream's leader, since doubtSince.
	doubts     int
	doubtSince time.Time
}

type dueHeap []*item

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*item)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// lead is one leadership term: delayed dispatch, repair sweep and crons.
func (s *Scheduler) lead(ctx context.Context) {
	d := newDispatcher(s, s.cfg.DispatchParallel)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.repairLoop(ctx, d.ready)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.cronLoop(ctx)
	}()
	if s.cfg.PayloadSweep > 0 {
		wg.Go(func() { s.payloadLoop(ctx) })
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = s.index.Run(ctx) // returns when the term ends; it logs its own restarts
	}()
	for ctx.Err() == nil {
		// A failed watch or scan (the stream briefly unavailable) restarts
		// the dispatcher; the term goes on.
		if err := d.loop(ctx); err != nil && ctx.Err() == nil {
			if errors.Is(err, errReconnected) {
				s.log.Info("reconnected: delayed entries read again")
				continue // at once: runs due meanwhile wait for it
			}
			s.log.Warn("delayed dispatch restarting", "error", err)
			if errors.Is(err, kv.ErrWatchSlow) {
				continue // it waited already; a request sent again is answered sooner
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	d.wg.Wait()
}

type dispatcher struct {
	s        *Scheduler
	mu       sync.Mutex
	h        dueHeap
	known    map[string]uint64 // key -> revision, in heap or in flight
	inflight map[string]int64  // key -> due second, being published
	loaded   int64             // unix second up to which entries are in memory
	// reading is set while a full read of the bucket runs in the
	// background: until it ends, the checkpoint stays where it was.
	reading bool
	// reread holds seconds whose read stayed behind the stream's leader:
	// read again each tick, and the checkpoint stays before them.
	reread []int64
	sem    chan struct{}
	wg     sync.WaitGroup
	wake   chan struct{}
	// watchWait bounds the start of the watch (kv.WatchWithin).
	watchWait time.Duration
	// ready is closed once the term's first start has read what is due:
	// the repair sweep's first read of every record waits for it.
	ready     chan struct{}
	readyOnce sync.Once
}

func newDispatcher(s *Scheduler, parallel int) *dispatcher {
	return &dispatcher{s: s, known: map[string]uint64{}, inflight: map[string]int64{},
		sem: make(chan struct{}, parallel), wake: make(chan struct{}, 1), watchWait: kv.WatchWait,
		ready: make(chan struct{})}
}

func (d *dispatcher) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// forget drops an entry that is done with, unless a newer revision of the
// same key replaced it meanwhile.
func (d *dispatcher) forget(key string, rev uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.known[key] == rev {
		delete(d.known, key)
	}
}

func (d *dispatcher) setLoaded(sec int64) {
	d.mu.Lock()
	d.loaded = sec
	d.mu.Unlock()
}

func (d *dispatcher) add(key string, rev uint64, data []byte) {
	sec, keyID, ok := kv.ParseDelayedKey(key)
	if !ok {
		return
	}
	d.mu.Lock()
	loaded := d.loaded
	d.mu.Unlock()
	if sec > loaded {
		return // read later, when its second comes within the horizon
	}
	it := &item{sec: sec, key: key, rev: rev}
	e, err := kv.DecodeDelayed(data)
	if err == nil {
		err = checkDelayed(e, keyID)
	}
	it.due, it.d = e.Due, e
	if err != nil {
		// Written by another client (docs/wire-format.md): dead-lettered
		// when its second comes, not retried for ever.
		it.due, it.bad, it.data = time.Unix(sec, 0), err, data
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.known[key]; ok && old >= rev {
		return
	}
	d.known[key] = rev
	heap.Push(&d.h, it)
	if len(d.h) > 0 && d.h[0].key == key {
		d.poke() // due before what the loop waits for
	}
}

// How a term finds the delayed entries that are due or due soon without
// reading every entry waiting (docs/scaling.md):
//
//   - the leader keeps the entries due within Config.Horizon in memory,
//     reads each later second's entries when it comes within the horizon
//     (the tick), and hears of new entries through a watch;
//   - every checkpointEvery it stores a checkpoint, a second before which
//     no entry waits: the earliest second of the entries it holds, or now,
//     less checkpointMargin (a producer whose clock is behind writes an
//     entry a little in the past);
//   - a new term reads the seconds from the checkpoint to the horizon. With
//     no checkpoint (the first term, an old deployment) or one older than
//     catchUpMax, it reads the last catchUp seconds and the horizon at
//     once, and the whole bucket in the background: the first runs due
//     fire at once, whatever the size of the bucket.
//
// An entry a term missed all the same (a clock far behind) is still
// dispatched: the repair sweep publishes a pending run whose delayed entry
// is overdue by Config.StaleAfter.
const (
	checkpointKey    = "scheduler-delayed-low"
	checkpointEvery  = 2 * time.Second
	checkpointMargin = 60 // seconds
	catchUp          = 60
	catchUpMax       = 6 * 60 * 60
	tickEvery        = 200 * time.Millisecond
)

func (d *dispatcher) loop(ctx context.Context) error {
	s := d.s
	// A reconnect (the server restarted, or the connection broke) ends the
	// loop: the watch below is a consumer the server may have lost, and
	// until the client notices (missed heartbeats, seconds later) entries
	// written for seconds already read would wait unseen. The next loop
	// watches anew and reads the seconds again (start).
	reconnected := s.js.Conn().StatusChanged(nats.CONNECTED)
	defer s.js.Conn().RemoveStatusListener(reconnected)
	s.awaitLeaders(ctx, streams.KVStream(s.scfg.DelayedBucket()), s.scfg.FunctionStream())
	w, err := kv.WatchWithin(ctx, s.store.Delayed(), ">", d.watchWait, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	d.watchWait = kv.NextWatchWait(d.watchWait, err)
	if err != nil {
		return err
	}
	defer func() {
		if err := w.Stop(); err != nil {
			s.log.Debug("stop the delayed bucket's watch", "error", err)
		}
	}()
	if err := d.start(ctx); err != nil {
		return err
	}
	d.readyOnce.Do(func() { close(d.ready) })
	lctx, stop := context.WithCancel(ctx)
	var lwg sync.WaitGroup
	defer func() {
		stop()
		lwg.Wait()
	}()
	lwg.Go(func() { d.loadLoop(lctx) })
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.fire(ctx)
		wait := time.Hour
		d.mu.Lock()
		if d.h.Len() > 0 {
			wait = max(d.h[0].due.Sub(s.now()), 0)
		}
		d.mu.Unlock()
		if wait > 0 && wait <= fineWait {
			sleepFine(wait) // the last stretch to a due time, to the microsecond
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("delayed watch closed")
			}
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				d.add(e.Key(), e.Revision(), e.Value())
			}
		case <-d.wake:
		case <-timer.C:
		case <-reconnected:
			return errReconnected
		}
	}
}

// fineWait: a dispatch loop sleeps the last fineWait before a due time in
// the kernel (sleepFine), not on a Go timer, which would wake it up to a
// millisecond late. Entries written meanwhile wait that long at most.
const fineWait = 2 * time.Millisecond

// errReconnected ends a dispatch loop whose connection reconnected.
var errReconnected = errors.New("scheduler: reconnected")

// awaitLeaders returns once each of names answers with a leader, at once
// when they have one, or after leaderWait. A term that starts while a
// stream it reads or publishes to is electing a leader (the node that led
// it and the lease went down together) would otherwise send its first
// request into the election, wait out the client's request timeout (5 s)
// and start again: delayed runs due meanwhile started that much later. A
// stream that cannot be looked up is left to the reads that follow, which
// say why.
func (s *Scheduler) awaitLeaders(ctx context.Context, names ...string) {
	deadline := time.Now().Add(leaderWait)
	for _, name := range names {
		for time.Now().Before(deadline) {
			ictx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := s.js.Stream(ictx, name)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				if ci := st.CachedInfo().Cluster; ci == nil || ci.Leader != "" || len(ci.Replicas) == 0 {
					break // a leader, or a stream of one server
				}
			} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// leaderWait bounds awaitLeaders: an election takes 4-9 s.
const leaderWait = 15 * time.Second

// start loads what is due at the start of a term (see checkpointKey):
// the seconds from the checkpoint to the next one. The loop fires them as
// soon as start returns; its first tick, at once, reads the rest of the
// horizon.
func (d *dispatcher) start(ctx context.Context) error {
	s := d.s
	now := s.now().Unix()
	from := now - catchUp
	low, ok := s.readCheckpoint(ctx)
	full := !ok || low < now-catchUpMax
	if !full {
		from = min(from, low)
	}
	upTo := now + 1
	d.setLoaded(upTo)
	secs := make([]int64, 0, upTo-from+1)
	for sec := from; sec <= upTo; sec++ {
		secs = append(secs, sec)
	}
	if err := s.store.ReadDelayed(ctx, secs, d.add); err != nil {
		// Seconds read from a replica behind the leader are read again at
		// the next ticks; the term goes on with the others.
		var stale *kv.StaleSeconds
		if !errors.As(err, &stale) {
			return err
		}
		s.log.Warn("delayed seconds read behind the stream's leader: read again", "count", len(stale.Secs))
		d.mu.Lock()
		d.reread = append(d.reread, stale.Secs...)
		d.mu.Unlock()
	}
	if !full {
		return nil
	}
	d.mu.Lock()
	d.reading = true
	d.mu.Unlock()
	d.wg.Go(func() {
		t0 := time.Now()
		if err := d.readBefore(ctx, from); err != nil {
			// The next term reads again: the checkpoint did not move.
			if ctx.Err() == nil {
				s.log.Warn("reading the delayed bucket", "error", err)
			}
			return
		}
		s.log.Debug("read the delayed bucket", "took", time.Since(t0))
		d.mu.Lock()
		d.reading = false
		d.mu.Unlock()
		d.poke()
	})
	return nil
}

// backgroundRate bounds the background reads of a term (the delayed
// bucket's keys of a first term, the repair sweep's records, the run
// index's recount), in messages a second each, so that they take a small
// share of the machine beside runs coming due, whatever the records kept:
// a million are read in 200 s.
const backgroundRate = 5_000

// readBefore reads, in the background of a term without a checkpoint, the
// delayed entries due before second from, which neither the term's start
// nor its ticks read: the keys of the whole bucket, paced, and the value
// of each entry found before from. Nothing else of the bucket is kept.
func (d *dispatcher) readBefore(ctx context.Context, from int64) error {
	s := d.s
	p := pace.Pacer{PerSec: backgroundRate}
	var old []string
	err := s.store.ScanDelayedKeys(ctx, func(key string, _ uint64) {
		p.Wait(ctx)
		if sec, _, ok := kv.ParseDelayedKey(key); ok && sec < from {
			old = append(old, key)
		}
	})
	if err != nil {
		return err
	}
	for _, k := range old {
		e, err := s.store.Delayed().Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // dispatched or canceled meanwhile
		}
		if err != nil {
			return err
		}
		d.add(k, e.Revision(), e.Value())
	}
	return nil
}

// loadLoop reads each second's entries when it comes within the horizon,
// and stores the checkpoint, until ctx ends.
func (d *dispatcher) loadLoop(ctx context.Context) {
	s := d.s
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	lastCheckpoint := time.Now()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				d.storeCheckpoint()
				return
			case <-tick.C:
			}
		}
		t0 := time.Now()
		next := s.now().Add(s.cfg.Horizon).Unix()
		d.mu.Lock()
		from := d.loaded + 1
		if from <= next {
			// Entries written from now on to these seconds are taken
			// from the watch; those written before, from the read.
			d.loaded = next
		}
		d.mu.Unlock()
		if from <= next {
			secs := make([]int64, 0, next-from+1)
			for sec := from; sec <= next; sec++ {
				secs = append(secs, sec)
			}
			var stale *kv.StaleSeconds
			if err := s.store.ReadDelayed(ctx, secs, d.add); errors.As(err, &stale) {
				// Read, but not on the leader's word: read again each
				// tick until it vouches for them.
				d.mu.Lock()
				d.reread = append(d.reread, stale.Secs...)
				d.mu.Unlock()
			} else if err != nil {
				d.setLoaded(from - 1)
				if ctx.Err() == nil {
					s.log.Warn("delayed read", "from", from, "to", next, "error", err)
				}
			}
		}
		d.mu.Lock()
		again := d.reread
		d.reread = nil
		d.mu.Unlock()
		if len(again) > 0 {
			var stale *kv.StaleSeconds
			if err := s.store.ReadDelayed(ctx, again, d.add); errors.As(err, &stale) {
				again = stale.Secs
			} else if err != nil {
				s.log.Warn("delayed read", "seconds", len(again), "error", err)
			} else {
				again = nil
			}
			d.mu.Lock()
			d.reread = append(d.reread, again...)
			d.mu.Unlock()
		}
		s.mu.Lock()
		s.stats.Ticks++
		s.stats.TickTime += time.Since(t0)
		s.mu.Unlock()
		if time.Since(lastCheckpoint) >= checkpointEvery {
			lastCheckpoint = time.Now()
			d.storeCheckpoint()
		}
	}
}

// checkpoint is the second before which no delayed entry waits, as far as
// this term knows; ok is false while a full read runs.
func (d *dispatcher) checkpoint() (int64, bool) {
	low := d.s.now().Unix()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reading {
		return 0, false
	}
	for _, it := range d.h {
		low = min(low, it.sec)
	}
	for _, sec := range d.inflight {
		low = min(low, sec)
	}
	for _, sec := range d.reread {
		low = min(low, sec)
	}
	return low - checkpointMargin, true
}

func (d *dispatcher) storeCheckpoint() {
	low, ok := d.checkpoint()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	if _, err := d.s.leases.Put(ctx, checkpointKey, []byte(strconv.FormatInt(low, 10))); err != nil {
		d.s.log.Debug("delayed checkpoint", "error", err)
	}
}

// readCheckpoint reads the checkpoint of the last term; ok is false when
// there is none.
func (s *Scheduler) readCheckpoint(ctx context.Context) (int64, bool) {
	e, err := s.leases.Get(ctx, checkpointKey)
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			s.log.Debug("delayed checkpoint", "error", err)
		}
		return 0, false
	}
	n, err := strconv.ParseInt(string(e.Value()), 10, 64)
	return n, err == nil
}

// scan reads the delayed entries under prefix (a second, or "*" for all)
// with a due second <= upTo, by their keys: DispatchDue and NextDue.
func (d *dispatcher) scan(ctx context.Context, sec string, upTo int64) error {
	keys, err := kv.ListKeys(ctx, d.s.store.Delayed(), sec+".*")
	if err != nil {
		return err
	}
	for _, k := range keys {
		ksec, _, ok := kv.ParseDelayedKey(k)
		if !ok || ksec > upTo {
			continue
		}
		e, err := d.s.store.Delayed().Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // dispatched or canceled meanwhile
		}
		if err != nil {
			return err // the whole second is read again
		}
		d.add(k, e.Revision(), e.Value())
	}
	return nil
}

// fire dispatches every entry that is due.
func (d *dispatcher) fire(ctx context.Context) {
	now := d.s.now()
	for {
		d.mu.Lock()
		if d.h.Len() == 0 || d.h[0].due.After(now) {
			d.mu.Unlock()
			return
		}
		it := heap.Pop(&d.h).(*item)
		d.inflight[it.key] = it.sec
		d.mu.Unlock()
		select {
		case d.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		d.wg.Add(1)
		go func() {
			done := d.publish(ctx, it)
			<-d.sem
			d.mu.Lock()
			delete(d.inflight, it.key)
			d.mu.Unlock()
			d.wg.Done()
			if done {
				d.forget(it.key, it.rev)
			}
		}()
	}
}

// publish starts one delayed run: it checks the record still waits for this
// entry, publishes the run's message (Nats-Msg-Id dedups a second leader;
// a new run's message expects no message on its subject),
// then removes the entry.
// It reports whether the entry is done with (published or obsolete).
// checkDelayed reports why a delayed entry cannot be dispatched: it names
// no valid run (or another than its key) or function, or a time no record
// holds.
func checkDelayed(e kv.Delayed, keyID string) error {
	switch {
	case jetflow.ValidateRunID(e.ID) != nil:
		return fmt.Errorf("%w: %.256q", jetflow.ErrInvalidRunID, e.ID)
	case e.ID != keyID:
		return fmt.Errorf("run %.256q under the key of run %.256q", e.ID, keyID)
	case jetflow.ValidateName(e.Function) != nil:
		return fmt.Errorf("%w: %.256q", jetflow.ErrInvalidName, e.Function)
	case e.Attempt < 0 || e.MaxAttempts < 0 || e.Timeout < 0:
		return fmt.Errorf("attempt %d, max attempts %d, timeout %s", e.Attempt, e.MaxAttempts, e.Timeout)
	case e.Parent != "" && jetflow.ValidateRunID(e.Parent) != nil:
		return fmt.Errorf("parent: %w: %.256q", jetflow.ErrInvalidRunID, e.Parent)
	}
	for _, t := range [...]time.Time{e.Due, e.Scheduled, e.Created} {
		if !streams.TimeFits(t) {
			return fmt.Errorf("time %s: outside years 0 through 9999", t.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// invalidFunction names the function of a dead-lettered delayed entry whose
// own is no valid name, so that pages and counts find it (the error quotes
// the name it had).
const invalidFunction = "invalid-function"

// deadLetter records a delayed entry that cannot be dispatched as a failed
// run with the reason (the entry's run id when it is valid and has no
// record yet, otherwise dlq-<delayed stream>-<revision>), then removes the
// entry: nothing is dropped silently, nor retried for ever.
func (d *dispatcher) deadLetter(ctx context.Context, it *item) bool {
	s := d.s
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	dlq := engine.DeadLetterID(streams.KVStream(s.scfg.DelayedBucket()), it.rev)
	id, fn := it.d.ID, it.d.Function
	if _, keyID, _ := kv.ParseDelayedKey(it.key); jetflow.ValidateRunID(id) != nil || id != keyID {
		id = dlq
	}
	if jetflow.ValidateName(fn) != nil {
		fn = invalidFunction
	}
	now := s.now().UTC()
	args := it.d.Args
	if it.data != nil {
		args = kv.BodySummary(it.data, 64<<10)
	} else if len(args) > 0 && !json.Valid(args) {
		args = kv.BodySummary(args, 64<<10)
	}
	r := engine.DeadLetterRun(&jetflow.Run{
		ID: id, Name: fn, Kind: jetflow.Retryable, Args: args, ScheduledTime: now, CreationTime: now,
	}, fmt.Sprintf("%v: delayed entry %.256q: %v", jetflow.ErrBadMessage, it.key, it.bad), now)
	_, err := s.runs.Write(ctx, engine.DeadLetter, engine.None, r, 0)
	if errors.Is(err, kv.ErrExists) && id != dlq {
		// The run has a record: the entry's own dead letter, written by
		// an earlier dispatch of it (its removal not seen yet), or the
		// record of a run the entry may not touch.
		if cur, gerr := s.store.Show(ctx, id); gerr != nil || cur.State != jetflow.Failed || cur.Error != r.Error {
			r.ID = dlq
			_, err = s.runs.Write(ctx, engine.DeadLetter, engine.None, r, 0)
		}
	}
	if err != nil && !errors.Is(err, kv.ErrExists) {
		s.log.Debug("dead letter of a delayed entry", "key", it.key, "error", err)
		d.retry(ctx, it)
		return false
	}
	s.log.Warn("bad delayed entry recorded as failed run", "key", it.key, "run_id", r.ID, "reason", it.bad)
	if err := s.store.RemoveDelayed(ctx, it.key, it.rev); err != nil {
		s.log.Debug("remove delayed entry", "key", it.key, "error", err)
	}
	return true
}

func (d *dispatcher) publish(ctx context.Context, it *item) bool {
	if it.bad != nil {
		return d.deadLetter(ctx, it)
	}
	s := d.s
	// Each request is bounded: one sent to a node that just died (a
	// cluster electing a new leader) is given up after publishTimeout and
	// the entry tried again retryDelay later, rather than after
	// JetStream's default 5 s.
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	r, err := s.store.Show(ctx, it.d.ID)
	if !it.d.New && behindEntry(r, err, it.d.Rev) {
		// A record behind its entry (missing, or older than the revision
		// the entry was written against) is a read behind the writes: the
		// record was written before its entry, and a pending record does
		// not expire. A replica answers so, and so does a leader just
		// elected that has not applied every write it holds (a paused
		// leader's successor, a few hundred ms after its election). So
		// the leader is asked, and while its answer fails or is behind
		// too the entry is tried again (keepDoubting); then it goes: the
		// repair sweep stands behind it. (A record that did expire, or was
		// deleted by hand, ends its entry here too, doubtFor late.)
		var leader bool
		r, leader, err = s.store.Decide(ctx, it.d.ID)
		failed := err != nil && !errors.Is(err, jetflow.ErrNotFound)
		unpermitted := !leader && !failed
		if doubtRecord(r, err, it.d.Rev) {
			if it.doubtSince.IsZero() {
				it.doubtSince = s.now()
			}
			it.doubts++
			if keepDoubting(unpermitted, it.doubts, s.now().Sub(it.doubtSince)) {
				s.log.Debug("confirm delayed run's record", "run_id", it.d.ID, "error", err)
				d.retry(ctx, it)
				return false
			}
			s.log.Warn("delayed run's record not confirmed: entry dropped", "run_id", it.d.ID, "error", err)
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
			defer rcancel()
			s.removeEntry(rctx, it)
			return true
		}
	}
	switch {
	case errors.Is(err, jetflow.ErrNotFound) && it.d.New:
		// A run stored without a record (engine.DelayNew): its message is
		// its pending record.
	case err != nil:
		d.retry(ctx, it)
		return false
	case r.State != jetflow.Pending || r.Revision != it.d.Rev || r.HeldBy != "":
		s.removeEntry(ctx, it)
		return true
	}
	m := s.scfg.Message(it.d.Envelope)
	if it.d.New {
		// A new run's message expects no message on its subject, so that
		// a second publish (a lost ack tried again, a second leader) is
		// refused while the first waits or runs; once it ran, its record
		// stops the check above. Its Nats-Msg-Id (which producers leave
		// out of new runs) covers a publish made on a read from before
		// the first one ran (a leader paused between the two), for the
		// function stream's duplicate window.
		m.Header[streams.HeaderMsgID] = []string{it.d.ID}
		m.Header[streams.HeaderExpectedLastSubjSeq] = []string{"0"}
	}
	if !s.holds(ctx) {
		// This term's lease may have passed (the process was paused
		// since the read above): the next term reads again.
		d.retry(ctx, it)
		return false
	}
	if err := s.publishDue(ctx, it.d, m); err != nil {
		s.log.Debug("publish delayed run", "run_id", it.d.ID, "error", err)
		d.retry(ctx, it)
		return false
	}
	if err := s.store.RemoveDelayed(ctx, it.key, it.rev); err != nil {
		s.log.Debug("remove delayed entry", "run_id", it.d.ID, "error", err)
	}
	s.mu.Lock()
	s.stats.Dispatched++
	s.mu.Unlock()
	return true
}

// publishDue publishes the message m of due delayed entry d. A new run's
// message expects none on its subject; a refusal counts as published only
// once the leaders hold the run (kv.CreateConfirmed's rule: a deposed
// leader refuses over its own uncommitted first try), else it is an error
// and the entry stays for the next try.
func (s *Scheduler) publishDue(ctx context.Context, d kv.Delayed, m *nats.Msg) error {
	_, err := s.js.PublishMsg(ctx, m)
	if err == nil || !d.New || !kv.IsWrongSequence(err) {
		return err
	}
	found, ferr := s.store.FindQueued(d.Function, d.ID)(ctx)
	switch {
	case ferr != nil:
		return ferr
	case found == kv.Missing:
		return fmt.Errorf("%w: %v", kv.ErrUnconfirmed, err) // not the refusal: it is no answer
	}
	return nil
}

// publishTimeout bounds the requests of one delayed dispatch; a dispatch
// that failed is tried again after retryDelay.
const (
	publishTimeout = time.Second
	retryDelay     = 250 * time.Millisecond
	maxDoubts      = 8
	doubtFor       = 30 * time.Second
)

func (d *dispatcher) retry(_ context.Context, it *item) {
	it.due = d.s.now().Add(retryDelay)
	d.mu.Lock()
	if d.known[it.key] == it.rev {
		heap.Push(&d.h, it)
	}
	d.mu.Unlock()
	d.poke()
}

// removeEntry removes the delayed entry of it, whose run is settled, and
// logs a removal that failed.
func (s *Scheduler) removeEntry(ctx context.Context, it *item) {
	if err := s.store.RemoveDelayed(ctx, it.key, it.rev); err != nil {
		s.log.Debug("remove delayed entry", "key", it.key, "error", err)
	}
}

// doubtRecord reports whether a read (r, err) of a delayed entry's record
// cannot settle the entry: it failed, or it is behind the entry's revision
// rev (behindEntry). Only a read that is neither starts or drops a run.
func doubtRecord(r *jetflow.Run, err error, rev uint64) bool {
	failed := err != nil && !errors.Is(err, jetflow.ErrNotFound)
	return failed || behindEntry(r, err, rev)
}

// behindEntry reports whether a direct get's answer (r, err) is missing or
// older than rev, the revision a delayed entry was written against.
func behindEntry(r *jetflow.Run, err error, rev uint64) bool {
	if errors.Is(err, jetflow.ErrNotFound) {
		return true
	}
	return err == nil && r.Revision < rev
}

// keepDoubting reports whether a delayed entry whose record the leader did
// not confirm is tried again: maxDoubts times where the leader may not be
// asked (unpermitted: a direct get stood in), for doubtFor otherwise.
func keepDoubting(unpermitted bool, doubts int, doubted time.Duration) bool {
	if unpermitted {
		return doubts < maxDoubts
	}
	return doubted < doubtFor
}
