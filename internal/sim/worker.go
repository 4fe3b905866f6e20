package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/liveness"
	"github.com/jetflow-dev/jetflow/internal/stall"
	"github.com/jetflow-dev/jetflow/kv"
)

// base maps virtual time onto the time.Time liveness.Watch takes.
var base = time.Unix(1_700_000_000, 0)

type delivery struct {
	m      msg
	readAt time.Duration // when the process read it from its socket
}

// job is a handler running here.
type job struct {
	id       string
	attempt  int
	seq      uint64
	amo      bool
	claimed  bool
	claimNow bool // claim at once (after a reconnect)
	rev      uint64
	started  time.Duration
	nextBeat time.Duration
	endAt    time.Duration
	fails    bool
	pending  *op // a write under way (retried with its token)
}

// worker runs handlers. Its wall clock is skewed (and jumps); its
// monotonic clock is true time.
type worker struct {
	w        *World
	idx      int
	name     string
	socket   []delivery
	jobs     map[string]*job
	paused   bool
	skew     time.Duration
	lastTick time.Duration // the stall detector's ticker
	stallEnd time.Duration
	live     liveness.Watch

	replay       bool   // the connection broke once
	replayBound  uint64 // the stream's last sequence at the reconnect
	graceUntil   time.Duration
	reconnecting bool // a crash came while paused
}

func newWorker(w *World, i int) *worker {
	k := &worker{w: w, idx: i, name: fmt.Sprintf("w%d", i), jobs: map[string]*job{}, stallEnd: -1}
	switch w.rng.IntN(4) {
	case 0:
		k.skew = skewBig
	case 1:
		k.skew = -skewBig
	}
	return k
}

func (k *worker) wall() time.Duration { return k.w.now + k.skew }

// tick is the process's tickers, which tick while it runs: the stall
// detector's, and the in-progress acknowledgements of its running handlers'
// messages.
func (k *worker) tick() {
	if k.paused {
		return
	}
	for _, j := range k.jobs {
		k.w.stream.touch(j.seq, k.idx)
	}
	if k.w.now-k.lastTick > stallTick {
		k.stallEnd = k.w.now
	}
	k.lastTick = k.w.now
}

// held: the delivery may have waited here (held long since it was read,
// or read across a stall of this process).
func (k *worker) held(d delivery) bool {
	if k.w.now-d.readAt >= ackWait/2 {
		return true
	}
	if k.w.cfg.Bugs.StaleFastPath {
		return false
	}
	return stall.Stalled(k.w.now, k.lastTick, k.stallEnd, stallTick, stallWindow)
}

func (k *worker) receive(m msg) {
	k.socket = append(k.socket, delivery{m: m, readAt: k.w.now})
	k.w.tracef("%s: delivery of %s attempt %d (msg %d, #%d)%s", k.name, m.id, m.attempt, m.seq, m.delivered, map[bool]string{true: " into a paused socket"}[k.paused])
}

// pauseOrResume pauses the process (not while a handler runs unclaimed:
// ClaimAfter bounds that window, a known limit) or resumes it.
func (k *worker) pauseOrResume() {
	if k.paused {
		k.resume()
		return
	}
	for _, j := range k.jobs {
		if !j.claimed {
			return
		}
	}
	k.paused = true
	k.w.tracef("FAULT: %s paused", k.name)
}

func (k *worker) resume() {
	k.paused = false
	for i := range k.socket {
		k.socket[i].readAt = k.w.now // read from the socket only now
	}
	k.w.tracef("FAULT: %s resumes", k.name)
	if k.reconnecting {
		k.reconnecting = false
		k.reconnect()
	}
}

func (k *worker) jump() {
	d := time.Duration(k.w.rng.Int64N(int64(20*time.Second))) - 10*time.Second
	k.skew += d
	k.w.tracef("FAULT: %s's clock jumps %v", k.name, d)
}

// reconnect: after a server crash, messages stored before now (up to the
// stream's last sequence, read at the reconnect) may be replays; runs in
// flight here are claimed at once.
func (k *worker) reconnect() {
	if k.paused {
		k.reconnecting = true
		return
	}
	k.replay, k.replayBound, k.graceUntil = true, k.w.stream.next, k.w.now+replayGrace
	for _, id := range sortedKeys(k.jobs) {
		if j := k.jobs[id]; !j.claimed {
			j.claimNow = true
			k.lateClaim(j)
		}
	}
}

func (k *worker) act() {
	if k.paused {
		return
	}
	ids := sortedKeys(k.jobs)
	for _, id := range ids {
		if j := k.jobs[id]; j.claimNow && !j.claimed && (j.pending == nil || j.pending.step == engine.Claim) {
			k.advance(j) // claims after a reconnect come first
			return
		}
	}
	if len(k.socket) > 0 && (len(ids) == 0 || k.w.rng.IntN(2) == 0) {
		d := k.socket[0]
		k.socket = k.socket[1:]
		k.process(d)
		return
	}
	if len(ids) > 0 {
		k.advance(k.jobs[ids[k.w.rng.IntN(len(ids))]])
	}
}

// process is the delivery path: classify, then start on the fast path or
// read the record and claim first.
func (k *worker) process(d delivery) {
	m := d.m
	if j, ok := k.jobs[m.id]; ok {
		if j.seq != m.seq {
			k.w.stream.nak(m.seq, k.idx, time.Second)
		}
		return // a duplicate of a run running here
	}
	replay := k.replay && m.seq <= k.replayBound
	kind := engine.Classify(engine.DeliveryFacts{NumDelivered: m.delivered, Replay: replay, Held: k.held(d), Rev: m.rev, Attempt: m.attempt})
	k.w.tracef("%s: %s attempt %d is %s", k.name, m.id, m.attempt, kind)
	if !kind.ReadsRecord() {
		if m.amo {
			k.claim(m, m.attempt, jetflow.Pending, m.rev, false)
			return
		}
		k.start(m, m.attempt, false, m.rev)
		return
	}
	k.reconcile(m, kind, replay)
}

// reconcile reads the record (any replica) and decides.
func (k *worker) reconcile(m msg, kind engine.DeliveryKind, replay bool) {
	v, ok := k.w.bucket.get(m.id)
	if !ok {
		k.w.stream.nak(m.seq, k.idx, time.Second)
		return
	}
	r := v.rec
	switch {
	case r.State.Terminal(), r.State == jetflow.Pending && m.attempt <= r.Attempts:
		k.w.stream.ack(m.seq)
	case r.State == jetflow.InProgress:
		k.inProgress(m, v)
	case replay && !m.amo && k.graceUntil > k.w.now:
		k.w.stream.nak(m.seq, k.idx, k.graceUntil-k.w.now) // its first worker may claim it
	case kind.ClaimsFirst() || m.amo:
		k.claim(m, m.attempt, jetflow.Pending, v.rev, false)
	default:
		k.start(m, m.attempt, false, v.rev)
	}
}

// inProgress: the run is claimed elsewhere; taken over only from a lost owner.
func (k *worker) inProgress(m msg, v version) {
	r := v.rec
	if r.Owner == k.name || !k.ownerLost(v) {
		k.w.stream.nak(m.seq, k.idx, ackWait/2)
		return
	}
	k.live.Forget(r.ID)
	if r.AMO || r.Attempts >= maxAttempts {
		r.State, r.Token = jetflow.Failed, k.w.token()
		_, err := k.w.bucket.write(op{rec: r, step: engine.Lost, from: jetflow.InProgress, expect: v.rev})
		k.w.tracef("%s: owner %s of %s lost: failed: %v", k.name, v.rec.Owner, r.ID, err)
		k.w.stream.ack(m.seq)
		return
	}
	k.w.tracef("%s: owner %s of %s lost: takeover", k.name, r.Owner, r.ID)
	k.claim(m, r.Attempts+1, jetflow.InProgress, v.rev, true)
}

// ownerLost is the lost-worker rule: liveness on this process's monotonic
// clock (or, with WallClockLiveness, the owner's heartbeat time against
// this process's wall clock).
func (k *worker) ownerLost(v version) bool {
	if k.w.cfg.Bugs.WallClockLiveness {
		return k.wall()-v.rec.Beat >= lostAfter
	}
	return liveness.Lost(k.live.Unchanged(v.rec.ID, v.rev, base.Add(k.w.now)), lostAfter)
}

// claim claims the run before its handler starts.
func (k *worker) claim(m msg, attempt int, from jetflow.State, rev uint64, takeover bool) {
	o := op{rec: record{ID: m.id, State: jetflow.InProgress, Attempts: attempt, Owner: k.name, AMO: m.amo,
		Beat: k.wall(), Token: k.w.token()}, step: engine.Claim, from: from, expect: rev}
	newRev, res := k.writeBack(o)
	k.w.tracef("%s: claim %s attempt %d at rev %d: %s", k.name, m.id, attempt, rev, res)
	switch res {
	case done:
		j := k.start(m, attempt, true, newRev)
		j.claimed = true
	case conflict:
		k.ackIfOver(m.id, m.seq, m.attempt)
	case later:
		k.w.stream.nak(m.seq, k.idx, time.Second)
	}
}

func (k *worker) start(m msg, attempt int, claimed bool, rev uint64) *job {
	k.w.check.started(m.id, attempt, m.amo)
	j := &job{id: m.id, attempt: attempt, seq: m.seq, amo: m.amo, claimed: claimed, rev: rev,
		started: k.w.now, nextBeat: k.w.now + beatEvery,
		endAt: k.w.now + time.Duration(k.w.rng.Int64N(int64(3*time.Second))), fails: k.w.rng.IntN(3) == 0}
	k.jobs[m.id] = j
	k.w.tracef("%s: handler of %s attempt %d starts (claimed %v)", k.name, m.id, attempt, claimed)
	return j
}

// ackIfOver acknowledges a message whose attempt is over (the leader's word).
func (k *worker) ackIfOver(id string, seq uint64, attempt int) {
	v, ok, err := k.w.bucket.leaderGet(id)
	if err == nil && ok && (v.rec.State.Terminal() || v.rec.Attempts > attempt ||
		v.rec.State == jetflow.Pending && attempt <= v.rec.Attempts) {
		k.w.stream.ack(seq)
	}
}

type result int

const (
	done result = iota
	conflict
	later
)

func (r result) String() string { return [...]string{"done", "conflict", "later"}[r] }

// writeBack is the one helper for state writes: a write whose reply was
// lost, or refused, is read back on the leader (by its token) and settled
// by kv.Settle, the worker's rule: landed, tried again (not landed, or
// unread), or given up (superseded, gone).
func (k *worker) writeBack(o op) (uint64, result) {
	rev, err := k.w.bucket.write(o)
	if err == nil {
		return rev, done
	}
	v, ok, lerr := k.w.bucket.leaderGet(o.rec.ID)
	rb := kv.ReadBack{Err: lerr, Leader: true, Rev: v.rev, Same: ok && v.rec.Token == o.rec.Token}
	if lerr == nil && !ok {
		rb.Err = kv.ErrNotFound
	}
	switch kv.Settle(o.expect, rb) {
	case kv.Landed:
		return v.rev, done
	case kv.Unread, kv.NotLanded:
		return 0, later
	}
	if o.blind && errors.Is(err, errTimeout) {
		return 0, later // written without compare-and-swap: any record may be under it
	}
	return 0, conflict
}
