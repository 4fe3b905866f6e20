package producer

import (
	"context"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
)

// A producer rides out what a cluster does for a few seconds when a node
// dies (a stream or bucket without a leader until its election ends) and
// what a client does while it reconnects: a write that failed that way is
// tried again, within the caller's ctx, as long as trying again cannot
// make a second run. Writes that may have landed with their reply lost are
// checked before they are written again.

// rideDefault bounds the retries of a call whose ctx has no deadline.
const rideDefault = 30 * time.Second

// rideAttempt bounds one attempt, so that a request sent to a node that
// just died does not use up the caller's whole ctx.
const rideAttempt = 2 * time.Second

// transient reports an error after which the same request may succeed: no
// stream or bucket leader (an election), no responder, a timeout, a
// connection being re-established.
func transient(err error) bool { return kv.Transient(err) }

// ride runs op until it succeeds, fails for good, or ctx (at most
// rideDefault when ctx has no deadline) ends. retried tells op that an
// earlier attempt may have landed.
func (p *Producer) ride(ctx context.Context, op func(ctx context.Context, retried bool) error) error {
	return p.rideFrom(ctx, false, op)
}

// rideFrom is ride whose first attempt is told retried: an attempt made
// elsewhere (a coalesced window) may have landed.
func (p *Producer) rideFrom(ctx context.Context, retried bool, op func(ctx context.Context, retried bool) error) error {
	// Without a deadline, the retries stop after rideDefault; one
	// attempt's ctx is bounded by rideAttempt and by that end.
	end, bounded := ctx.Deadline()
	if !bounded {
		end = time.Now().Add(rideDefault)
	}
	over := func() bool { return ctx.Err() != nil || !time.Now().Before(end) }
	delay := 25 * time.Millisecond
	for ; ; retried = true {
		at := time.Now().Add(rideAttempt)
		if at.After(end) {
			at = end
		}
		actx, cancel := context.WithDeadline(ctx, at)
		err := op(actx, retried)
		cancel()
		if err == nil || !transient(err) || over() {
			if err != nil && retried && over() {
				if ctx.Err() != nil {
					return fmt.Errorf("%w (gave up retrying: %w)", err, ctx.Err())
				}
				return fmt.Errorf("%w (gave up retrying: %w)", err, context.DeadlineExceeded)
			}
			return err
		}
		p.log.DebugContext(ctx, "transient NATS error; retrying", "error", err, "delay", delay)
		telemetry.Retrying(ctx, err, delay)
		t := time.NewTimer(min(delay, time.Until(end)))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// createRecord creates r's record, riding out elections. A refused create
// is settled by the runs leader's word (kv.CreateConfirmed): the stored
// record is this one (same creation time and name: an earlier try that
// landed with its reply lost), another run's (kv.ErrExists), or nothing,
// and the create is made again.
func (p *Producer) createRecord(ctx context.Context, r *jetflow.Run) (uint64, error) {
	var rev uint64
	same := kv.SameRun(r)
	ours := func(stored *jetflow.Run) bool {
		if same(stored) {
			rev = stored.Revision
			return true
		}
		return false
	}
	err := p.ride(ctx, func(ctx context.Context, _ bool) error {
		return kv.CreateConfirmed(ctx, func(ctx context.Context) error {
			n, err := p.runs.Write(ctx, engine.Schedule, engine.None, r, 0)
			rev = n
			return err
		}, p.store.FindRun(r.ID, ours))
	})
	return rev, err
}

// publishDirect publishes a run that has no record (its message is its
// pending record), riding out elections. Its first try goes in the
// producer's window, coalesced with the concurrent calls' (window.go).
// Every later try first looks, on the leaders, whether an earlier one
// landed: its message is queued, or a worker already took it (the record
// exists: a worker writes it before it acknowledges the message).
//
// Every try expects no message on the run's subject (the subject names the
// run id, generated for this run alone): a first try that the client sent
// again after a reconnect, landing after a later try, is refused by the
// stream rather than stored twice. A refusal, or a duplicate
// acknowledgement, is settled by the leaders' word (kv.CreateConfirmed):
// a deposed leader refuses a retry over its own uncommitted first try.
// Unlike a Nats-Msg-Id on every run, the expectation costs the server no
// deduplication entry per run.
func (p *Producer) publishDirect(ctx context.Context, r *jetflow.Run) error {
	err := p.win.publish(ctx, directMessage(p.cfg, r))
	if err == nil || ctx.Err() != nil {
		return err
	}
	// The window failed, for this run or for a neighbour's: this run goes
	// on alone, as a publish whose answer was lost.
	p.log.DebugContext(ctx, "enqueue window failed; publishing alone", "run_id", r.ID, "error", err)
	find := p.store.FindQueued(r.Name, r.ID)
	return p.rideFrom(ctx, true, func(ctx context.Context, _ bool) error {
		return kv.CreateConfirmed(ctx, func(ctx context.Context) error {
			if found, err := find(ctx); err != nil || found == kv.Ours {
				return err
			}
			m := directMessage(p.cfg, r)
			// Deduplicated from here on, should this try land late too.
			m.Header.Set(nats.MsgIdHdr, r.ID)
			ack, err := p.js.PublishMsg(ctx, m)
			if err == nil && ack.Duplicate {
				return kv.ErrRefused
			}
			return err
		}, find)
	})
}

// directMessage is the message of a run published without a record: it
// expects no message on its subject (see publishDirect).
func directMessage(cfg streams.Config, r *jetflow.Run) *nats.Msg {
	m := cfg.Message(directEnvelope(r))
	m.Header[streams.HeaderExpectedLastSubjSeq] = []string{"0"}
	return m
}
