package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
)

// record is a run's record as the model keeps it.
type record struct {
	ID       string
	State    jetflow.State
	Attempts int
	Owner    string
	AMO      bool          // an at-most-once function's run
	Beat     time.Duration // the owner's wall clock at its claim or last heartbeat
	Token    uint64        // the logical write that made this version (read-back)
}

type version struct {
	rev uint64
	rec record
	at  time.Duration // committed at (true time)
}

var (
	errTimeout  = errors.New("sim: timeout")
	errWrongSeq = fmt.Errorf("wrong last sequence: %w", kv.ErrRefused)
)

// op is one write to the bucket.
type op struct {
	rec    record
	step   engine.Step
	from   jetflow.State // the state the writer read (engine.None: a create)
	expect uint64        // the revision it read
	blind  bool          // no compare-and-swap (BlindOutcome)
}

// bucket is the runs bucket: a committed log per key, a leader that may be
// cut off with an uncommitted log of its own, replicas that lag.
type bucket struct {
	w           *World
	seq         uint64
	keys        map[string][]version
	cutOff      bool              // the leader is partitioned or paused
	uncommitted map[string]record // creates the cut-off leader accepted
	late        []op              // writes still on their way
}

func newBucket(w *World) *bucket {
	return &bucket{w: w, keys: map[string][]version{}, uncommitted: map[string]record{}}
}

func (b *bucket) latest(id string) (version, bool) {
	vs := b.keys[id]
	if len(vs) == 0 {
		return version{}, false
	}
	return vs[len(vs)-1], true
}

// write sends o, with the network's faults: it returns the new revision or
// errTimeout (landed or not), kv.ErrExists, errWrongSeq, kv.ErrConflict.
func (b *bucket) write(o op) (uint64, error) {
	if err := engine.Check(o.step, o.from, o.rec.State); err != nil {
		b.w.fail("a write the engine refuses: %v", err)
		return 0, err
	}
	if b.cutOff {
		return b.writeCutOff(o)
	}
	switch r := b.w.rng.Float64(); {
	case r < pDrop:
		return 0, errTimeout
	case r < pDrop+pLostReply:
		_, _ = b.apply(o)
		return 0, errTimeout
	case r < pDrop+pLostReply+pLate:
		b.late = append(b.late, o)
		return 0, errTimeout
	}
	return b.apply(o)
}

// writeCutOff: the cut-off leader puts a create in its uncommitted log and
// never answers; it refuses a retried create of the same key against that
// log (wrong last sequence) though nothing is committed. Updates time out.
func (b *bucket) writeCutOff(o op) (uint64, error) {
	if o.from != engine.None {
		return 0, errTimeout
	}
	if _, ok := b.latest(o.rec.ID); ok {
		return 0, kv.ErrExists
	}
	if _, ok := b.uncommitted[o.rec.ID]; ok {
		return 0, errWrongSeq
	}
	b.uncommitted[o.rec.ID] = o.rec
	return 0, errTimeout
}

// apply commits o if its compare-and-swap holds.
func (b *bucket) apply(o op) (uint64, error) {
	cur, exists := b.latest(o.rec.ID)
	switch {
	case o.blind:
	case o.from == engine.None && exists:
		return 0, kv.ErrExists
	case o.from != engine.None && (!exists || cur.rev != o.expect):
		return 0, kv.ErrConflict
	}
	b.seq++
	v := version{rev: b.seq, rec: o.rec, at: b.w.now}
	b.keys[o.rec.ID] = append(b.keys[o.rec.ID], v)
	b.w.committed(o, cur, exists, v)
	return v.rev, nil
}

// landLate lands one write that was on its way.
func (b *bucket) landLate() {
	if len(b.late) == 0 || b.cutOff {
		return
	}
	i := b.w.rng.IntN(len(b.late))
	o := b.late[i]
	b.late = append(b.late[:i], b.late[i+1:]...)
	_, err := b.apply(o)
	b.w.tracef("late write of %s (%s) lands: %v", o.rec.ID, o.step, err)
}

// cut cuts the leader off; heal ends it: the old leader keeps its place and
// commits its log, or a new leader takes over and that log is lost.
func (b *bucket) cut() { b.cutOff = true }

func (b *bucket) heal() {
	b.cutOff = false
	keep := b.w.rng.IntN(2) == 0
	for _, id := range sortedKeys(b.uncommitted) {
		o := op{rec: b.uncommitted[id], step: engine.Schedule, from: engine.None}
		if keep {
			_, err := b.apply(o)
			b.w.tracef("healed leader commits its create of %s: %v", id, err)
		} else {
			b.w.tracef("new leader: the uncommitted create of %s is lost", id)
		}
	}
	b.uncommitted = map[string]record{}
}

// leaderGet is a read the leader answers (a decision read).
func (b *bucket) leaderGet(id string) (version, bool, error) {
	if b.cutOff {
		return version{}, false, errTimeout
	}
	v, ok := b.latest(id)
	return v, ok, nil
}

// get is a read any replica answers: it may be behind.
func (b *bucket) get(id string) (version, bool) {
	seen := b.w.now
	if b.w.rng.Float64() < pStale {
		seen -= time.Duration(b.w.rng.Int64N(int64(maxLag)))
	}
	vs := b.keys[id]
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].at <= seen {
			return vs[i], true
		}
	}
	return version{}, false
}
