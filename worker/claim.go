package worker

import (
	"context"
	"errors"
	"fmt"
	"github.com/jetflow-dev/jetflow/internal/sentinel"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/puback"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
)

// A claim is a write its runner waits for. It goes out with a reply subject
// of the worker's own and its runner waits for the server's reply on a
// channel: no context, timer of the client's request machinery or JSON
// decoding of the acknowledgement on the way of every run claimed first. A
// write the server refuses (a conflict, a marker to write over, no stream)
// stored nothing: the claim is then written again the usual way, which
// tells why.

// claims tracks the claims in flight, by reply token: each runner waits on
// a channel of its own for its claim's reply.
type claims = puback.Replies[chan *nats.Msg]

func (w *Worker) startClaims() (*nats.Subscription, error) {
	return w.claims.Start(w.nc, func(ch chan *nats.Msg, reply *nats.Msg) {
		ch <- reply // buffered: never blocks
	})
}

// claimTry is the longest one attempt of a claim waits for its reply
// (less if the JetStream handle's DefaultTimeout is shorter). A claim
// unanswered that long is written again (claimAgain) rather than handed
// back: an election of the runs bucket's leader takes a few seconds, and a
// claim retried through it starts its run as soon as the new leader is in
// place, where a claim given up waits for its message's redelivery.
const claimTry = 2 * time.Second

// claim writes r, the claim of a run whose record was in state from at
// revision rev (0: no record yet, created create-only), as writeRecord
// does, and returns the new revision. A claim that may have landed unseen
// (its reply lost with a server or a leader) is written again until the
// worker has heard whether it did, up to AckWait/2; it then counts as this
// worker's if the stored record is that very claim. Errors as
// writeRecord's.
func (w *Worker) claim(ctx context.Context, from jetflow.State, r *jetflow.Run, rev uint64) (uint64, error) {
	n, err := w.claimOnce(ctx, from, r, rev)
	if err == nil {
		return n, nil
	}
	if errors.Is(err, kv.ErrConflict) {
		// Refused: settled by the record read back (engine.ReadBack). A
		// refusal from a leader judging against an uncommitted write (the
		// record unchanged), or one the leader does not confirm, is
		// written again, as a claim whose reply was lost. So is a record
		// read as missing (kv.Gone): a record this worker read at rev does
		// not vanish, but a leader just cut off answers from a store that
		// never had it.
		switch v, cur, _ := engine.ReadBack(ctx, w.readConfirmed, r.ID, rev, engine.ClaimOf(r)); v {
		case kv.Landed:
			r.Revision = cur.Revision
			return cur.Revision, nil
		case kv.NotLanded, kv.Unread, kv.Gone:
			return w.claimAgain(ctx, from, r, rev, fmt.Errorf("%w (the record unchanged or unread: %v)", kv.ErrUnconfirmed, err))
		case kv.Superseded:
			w.logSuperseded(r, rev, cur)
			return n, engine.Superseded(err)
		}
		return n, err
	}
	if !claimRetryable(ctx, err) {
		return n, err
	}
	return w.claimAgain(ctx, from, r, rev, err)
}

// logSuperseded says, at debug level, what a refused claim found in its
// place: another attempt's or owner's record (for diagnosis).
func (w *Worker) logSuperseded(r *jetflow.Run, rev uint64, cur *jetflow.Run) {
	if cur == nil {
		return
	}
	w.log.Debug("claim superseded", "run_id", r.ID, "expected", rev, "stored", cur.Revision, "state", cur.State,
		"owner", cur.Owner, "attempt", cur.Attempts, "started", cur.StartedTime, "claim_attempt", r.Attempts, "claim_started", r.StartedTime)
}

// claimRetryable reports whether a failed claim is to be written again:
// not when it lost (a conflict), cannot be stored (ErrBadArgs), is not
// allowed, or its context ended.
func claimRetryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	return !sentinel.IsAny(err, kv.ErrConflict, jetflow.ErrBadArgs, nats.ErrPermissionViolation, context.Canceled)
}

// claimAgain writes a claim whose first write failed with err (it may have
// landed) until it is stored, another write wins, or AckWait/2 has passed
// (its message may be redelivered elsewhere after AckWait: a claim there
// and this one are then settled by the record's revision, as any two
// claims are). A conflict whose stored record is this claim (same owner,
// attempt and start time, to the nanosecond) is this worker's claim: an
// earlier write landed and its reply was lost.
func (w *Worker) claimAgain(ctx context.Context, from jetflow.State, r *jetflow.Run, rev uint64, err error) (uint64, error) {
	deadline := time.Now().Add(w.cfg.AckWait / 2)
	delay := 50 * time.Millisecond
	for {
		w.log.Debug("claim write failed; retrying", "run_id", r.ID, "error", err)
		select {
		case <-time.After(delay):
		case <-w.stopCh:
			return 0, err
		case <-ctx.Done():
			return 0, err
		}
		delay = min(2*delay, time.Second)
		tctx, cancel := context.WithTimeout(ctx, w.claimWait())
		var n uint64
		n, err = w.writeRecord(tctx, engine.Claim, from, r, rev)
		cancel()
		if err == nil {
			r.Revision = n
			return n, nil
		}
		if errors.Is(err, kv.ErrConflict) {
			v, cur, gerr := engine.ReadBack(ctx, w.readConfirmed, r.ID, rev, engine.ClaimOf(r))
			switch v {
			case kv.Landed:
				r.Revision = cur.Revision
				return cur.Revision, nil
			case kv.Superseded:
				return 0, engine.Superseded(err)
			case kv.NotLanded:
				gerr = fmt.Errorf("the record is unchanged at revision %d: %w", rev, kv.ErrUnconfirmed)
			}
			// Not landed, or unread (the leader is being replaced, say):
			// the stored record may be this claim. Write again and read
			// again. Not a conflict (%v): a claim still unsettled at the
			// deadline may have landed, and is given back (giveBackClaim).
			err = fmt.Errorf("%v (and the record unread: %w)", err, gerr)
		}
		if w.claimGivesUp(ctx, err, deadline) {
			return 0, err
		}
	}
}

// claimGivesUp reports whether a claim whose write failed with err is not
// written again: it is settled (not a conflict, and not retryable), the
// worker is stopping, or its deadline passed.
func (w *Worker) claimGivesUp(ctx context.Context, err error, deadline time.Time) bool {
	if w.isStopping() || time.Now().After(deadline) {
		return true
	}
	return !errors.Is(err, kv.ErrConflict) && !claimRetryable(ctx, err)
}

// claimWait is how long one write of a claim waits for its reply.
func (w *Worker) claimWait() time.Duration {
	wait := w.js.Options().DefaultTimeout
	if wait <= 0 || wait > claimTry {
		wait = claimTry
	}
	return wait
}

// claimOnce writes a claim once, as claim describes.
func (w *Worker) claimOnce(ctx context.Context, from jetflow.State, r *jetflow.Run, rev uint64) (uint64, error) {
	fromWritten := from
	if rev == 0 {
		fromWritten = engine.None
		r.Args = w.recordArgs(r.Args)
	}
	msg, err := w.runs.WriteMsg(engine.Claim, fromWritten, r, rev)
	if err != nil {
		return 0, err
	}
	ch := make(chan *nats.Msg, 1)
	var tok uint64
	msg.Reply, tok = w.claims.Add(ch)
	if err := w.nc.PublishMsg(msg); err != nil {
		w.claims.Take(tok)
		return w.writeRecord(ctx, engine.Claim, from, r, rev) // nothing was sent
	}
	t := time.NewTimer(w.claimWait())
	defer t.Stop()
	select {
	case reply := <-ch:
		if seq, ok := puback.Seq(reply); ok {
			r.Revision = seq
			return seq, nil
		}
		// Refused or unanswered (no responders): nothing was stored.
		return w.writeRecord(ctx, engine.Claim, from, r, rev)
	case <-t.C:
		w.claims.Take(tok)
		return 0, fmt.Errorf("kv: write run %s: %w", r.ID, nats.ErrTimeout)
	case <-ctx.Done():
		w.claims.Take(tok)
		return 0, fmt.Errorf("kv: write run %s: %w", r.ID, ctx.Err())
	}
}

// maxGiveBacks bounds the claims a worker gives back at once (giveBackClaim):
// each reads the runs leader until it answers.
const maxGiveBacks = 256

// giveBackClaim settles a claim this worker wrote and gave up unanswered
// (claim failed with an error other than a conflict): its handler never
// ran, but the write may have landed (a runs leader killed mid-write). A
// landed claim would hold the run under an owner that is not running it
// until LostAfter passes, and an at-most-once run would then fail as lost
// without having run. So the record is read from the leader until it
// answers: a record that is this claim is written back to pending, as
// before it (the attempt does not count), and the message's next delivery
// claims it at once. A record past rev that is not this claim (another
// worker's, a cancel) is left alone; a record not past rev means the claim
// did not land, which the leader is asked again for a few seconds (a write
// still being replicated may land late).
func (w *Worker) giveBackClaim(claim *jetflow.Run, rev uint64) {
	defer func() {
		<-w.givingBack
		w.inflight.Done()
	}()
	delay := 100 * time.Millisecond
	deadline := time.Now().Add(max(w.cfg.LostAfter, 10*time.Second))
	notLanded := time.Time{}
	for time.Now().Before(deadline) {
		select {
		case <-time.After(delay):
		case <-w.stopCh:
			return
		}
		delay = min(2*delay, 2*time.Second)
		if w.giveBackOnce(claim, rev, &notLanded) {
			return
		}
	}
}

// giveBackOnce reads claim's record back once (rev: the revision the claim
// expected) and gives the claim back if it landed. It reports whether the
// claim is settled: given back, written over, or not landed for 3 s
// (notLanded: since when).
func (w *Worker) giveBackOnce(claim *jetflow.Run, rev uint64, notLanded *time.Time) bool {
	ctx, cancel := context.WithTimeout(context.Background(), recordReadTimeout)
	defer cancel()
	v, cur, _ := engine.ReadBack(ctx, w.readLeader, claim.ID, rev, engine.ClaimOf(claim))
	switch v {
	case kv.Landed:
		_, err := w.runs.Write(ctx, engine.Retry, jetflow.InProgress, engine.UnclaimRun(cur, claim.Attempts), cur.Revision)
		if err == nil {
			w.log.Info("claim landed after it was given up: given back", "run_id", claim.ID, "attempt", claim.Attempts)
		}
		return err == nil || errors.Is(err, kv.ErrConflict) // a conflict: written over meanwhile (a takeover, a cancel)
	case kv.Superseded:
		return true // someone else's write
	case kv.NotLanded, kv.Gone:
		// Not landed, or read as missing (a leader just cut off answers
		// from a store that never had the record): asked again for 3 s.
		if notLanded.IsZero() {
			*notLanded = time.Now()
		}
		return time.Since(*notLanded) > 3*time.Second
	}
	return false // unread: read again
}

// readLeader reads run id's record from the runs stream's leader only (a
// giveback must not decide on a replica's word: the read waits for the
// leader instead).
func (w *Worker) readLeader(ctx context.Context, id string) (*jetflow.Run, bool, error) {
	return w.store.Decide(ctx, id)
}
