package worker

import (
	"context"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/puback"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A success is written without waiting for it: the record is published with
// a reply subject of the worker's own, and the run's message is acked when
// the server's reply says the record is stored. The runner goroutine is free
// for the next run meanwhile. A write refused or unanswered falls back to
// writeOutcome (retries, lost-reply detection) in a goroutine of its own.

// outcomeWrite is a success record in flight.
type outcomeWrite struct {
	j    *jobCore
	m    jetstream.Msg
	from jetflow.State // the record's state before
	r    *jetflow.Run
	rev  uint64
	sent time.Time
}

// outcomes tracks the success writes in flight, by reply token.
type outcomes struct {
	puback.Replies[*outcomeWrite]
	// reconnects is the connection's reconnect count at the last sweep
	// (read and written by the sweep only).
	reconnects uint64
}

// outcomeTimeout is how long a success write may go unanswered on a
// connection that did not reconnect meanwhile before the worker writes it
// again through writeOutcome. It is long because a busy server (an fsync per
// write) answers late, and writing again then only adds to its queue; a
// reconnect hands the writes sent before it to writeOutcome at once.
const outcomeTimeout = 15 * time.Second

func (w *Worker) startOutcomes() (*nats.Subscription, error) {
	w.out.reconnects = w.nc.Stats().Reconnects
	return w.out.Start(w.nc, w.outcomeReply)
}

// succeedAsync publishes the success record r over revision rev of j's run.
func (w *Worker) succeedAsync(j *jobCore, m jetstream.Msg, from jetflow.State, r *jetflow.Run, rev uint64) {
	if rev == 0 {
		from = engine.None
	}
	ow := &outcomeWrite{j: j, m: m, from: from, r: r, rev: rev, sent: w.now()}
	msg, err := w.runs.WriteMsg(engine.Succeed, from, r, rev)
	if err != nil {
		go w.outcomeFallback(ow)
		return
	}
	var tok uint64
	msg.Reply, tok = w.out.Add(ow)
	if err := w.nc.PublishMsg(msg); err != nil {
		if _, ok := w.out.Take(tok); ok {
			go w.outcomeFallback(ow)
		}
	}
}

// outcomeReply handles the server's reply to a success write (one timed
// out and handed to the fallback gets none).
func (w *Worker) outcomeReply(ow *outcomeWrite, msg *nats.Msg) {
	seq, ok := puback.Seq(msg)
	if !ok {
		go w.outcomeFallback(ow)
		return
	}
	ow.r.Revision = seq
	if len(ow.r.Children) > 0 || ow.r.OnComplete != nil {
		go w.succeeded(ow) // releasing children and callbacks do I/O
		return
	}
	w.succeeded(ow)
}

// succeeded finishes a run whose success is stored.
func (w *Worker) succeeded(ow *outcomeWrite) {
	ctx := context.Background()
	j := ow.j
	telemetry.M().Succeeded.Add(ctx, 1, j.fn.addAttr...)
	w.releaseHeld(ctx, j, true)
	w.complete(ctx, ow.r)
	w.settle(w.finish(j, ow.m), ackIt)
	w.inflight.Done()
}

// outcomeFallback writes a success whose asynchronous write failed or went
// unanswered, with writeOutcome's retries. A conflict with a record that is
// this very outcome (the first write landed, its reply was lost) counts as
// written.
func (w *Worker) outcomeFallback(ow *outcomeWrite) {
	ctx := context.Background()
	if _, err := w.writeOutcome(ctx, engine.Succeed, ow.from, ow.r, ow.rev, ow.r.StartedTime); err != nil {
		j := ow.j
		w.outcomeLost(ctx, j, w.finish(j, ow.m), err)
		w.inflight.Done()
		return
	}
	w.succeeded(ow)
}

// sweepOutcomes hands to the fallback the writes unanswered for
// outcomeTimeout and those sent before a reconnect (their replies are lost).
func (w *Worker) sweepOutcomes() {
	cut := w.now().Add(-outcomeTimeout)
	if rc := w.nc.Stats().Reconnects; rc != w.out.reconnects {
		// Reconnected since the last sweep: replies to writes sent before
		// now may be lost.
		w.out.reconnects, cut = rc, w.now()
	}
	late := w.out.TakeIf(func(ow *outcomeWrite) bool { return ow.sent.Before(cut) })
	for _, ow := range late {
		go w.outcomeFallback(ow)
	}
}
