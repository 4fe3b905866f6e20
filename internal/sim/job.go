package sim

import (
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
)

// advance moves a running handler on: its outcome when it ends, its late
// claim after ClaimAfter, its heartbeats while claimed.
func (k *worker) advance(j *job) {
	switch {
	case j.pending != nil && j.pending.step == engine.Claim:
		k.lateClaim(j) // a write under way is settled first
	case j.pending != nil && j.pending.step == engine.Beat:
		k.beat(j)
	case k.w.now >= j.endAt:
		k.outcome(j)
	case !j.claimed && (j.claimNow || k.w.now-j.started >= claimAfter):
		k.lateClaim(j)
	case j.claimed && k.w.now >= j.nextBeat:
		k.beat(j)
	}
}

func (k *worker) lateClaim(j *job) {
	if j.pending != nil && j.pending.step != engine.Claim {
		return // its outcome is under way: no claim after it
	}
	if j.pending == nil {
		j.pending = &op{rec: record{ID: j.id, State: jetflow.InProgress, Attempts: j.attempt, Owner: k.name, AMO: j.amo,
			Beat: k.wall(), Token: k.w.token()}, step: engine.Claim, from: jetflow.Pending, expect: j.rev}
	}
	rev, res := k.writeBack(*j.pending)
	k.w.tracef("%s: late claim of %s attempt %d: %s", k.name, j.id, j.attempt, res)
	k.settle(j, rev, res, func() { j.claimed, j.claimNow = true, false })
}

func (k *worker) beat(j *job) {
	if j.pending == nil {
		j.pending = &op{rec: record{ID: j.id, State: jetflow.InProgress, Attempts: j.attempt, Owner: k.name, AMO: j.amo,
			Beat: k.wall(), Token: k.w.token()}, step: engine.Beat, from: jetflow.InProgress, expect: j.rev}
	}
	rev, res := k.writeBack(*j.pending)
	k.settle(j, rev, res, func() { j.nextBeat = k.w.now + beatEvery })
}

// settle ends a claim's or a heartbeat's write: done moves on, conflict
// ends the handler (the run moved on), later tries again.
func (k *worker) settle(j *job, rev uint64, res result, ok func()) {
	switch res {
	case done:
		j.rev, j.pending = rev, nil
		ok()
	case conflict:
		k.w.tracef("%s: %s moved on: handler of attempt %d canceled", k.name, j.id, j.attempt)
		delete(k.jobs, j.id)
		k.ackIfOver(j.id, j.seq, j.attempt)
	}
}

// outcome writes the handler's outcome by compare-and-swap (blind with
// BlindOutcome), then publishes a retry and acknowledges the message.
func (k *worker) outcome(j *job) {
	if j.pending == nil {
		j.pending = k.outcomeOp(j)
	}
	o := *j.pending
	rev, res := k.writeBack(o)
	k.w.tracef("%s: outcome of %s attempt %d (%s): %s", k.name, j.id, j.attempt, o.step, res)
	switch res {
	case done:
		if o.step == engine.Retry {
			delay := time.Duration(k.w.rng.Int64N(int64(time.Second)))
			_ = k.w.stream.publish(j.id, j.attempt+1, rev, j.amo, delay) // a lost one is the sweep's
		}
		k.w.stream.ack(j.seq)
		delete(k.jobs, j.id)
	case conflict:
		delete(k.jobs, j.id)
		k.ackIfOver(j.id, j.seq, j.attempt)
	}
}

func (k *worker) outcomeOp(j *job) *op {
	o := &op{rec: record{ID: j.id, Attempts: j.attempt, AMO: j.amo, Token: k.w.token()},
		from: jetflow.Pending, expect: j.rev, blind: k.w.cfg.Bugs.BlindOutcome}
	if j.claimed {
		o.from = jetflow.InProgress
	}
	switch {
	case !j.fails:
		o.step, o.rec.State = engine.Succeed, jetflow.Success
	case !j.amo && j.attempt < maxAttempts:
		o.step, o.rec.State = engine.Retry, jetflow.Pending
	default:
		o.step, o.rec.State = engine.Fail, jetflow.Failed
	}
	return o
}
