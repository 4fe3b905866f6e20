package worker

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/nats-io/nats.go"
)

// A claim is a write its runner waits for. It goes out with a reply subject
// of the worker's own and its runner waits for the server's reply on a
// channel: no context, timer of the client's request machinery or JSON
// decoding of the acknowledgement on the way of every run claimed first. A
// write the server refuses (a conflict, a marker to write over, no stream)
// stored nothing: the claim is then written again the usual way, which
// tells why.

// claims tracks the claims in flight, by reply token.
type claims struct {
	mu      sync.Mutex
	inbox   string // <inbox>.<token> is a claim's reply subject
	next    uint64
	pending map[uint64]chan *nats.Msg
}

func (w *Worker) startClaims() (*nats.Subscription, error) {
	w.claims.inbox = w.nc.NewInbox()
	w.claims.pending = make(map[uint64]chan *nats.Msg)
	return w.nc.Subscribe(w.claims.inbox+".*", w.claimReply)
}

// claimReply hands the server's reply to a claim to its runner.
func (w *Worker) claimReply(msg *nats.Msg) {
	tok, err := strconv.ParseUint(msg.Subject[len(w.claims.inbox)+1:], 10, 64)
	if err != nil {
		return
	}
	if ch := w.takeClaim(tok); ch != nil {
		ch <- msg // buffered: never blocks
	}
}

func (w *Worker) takeClaim(tok uint64) chan *nats.Msg {
	w.claims.mu.Lock()
	defer w.claims.mu.Unlock()
	ch := w.claims.pending[tok]
	delete(w.claims.pending, tok)
	return ch
}

// claim writes r, the claim of a run whose record was in state from at
// revision rev (0: no record yet, created create-only), as writeRecord
// does, and returns the new revision. Errors as writeRecord's.
func (w *Worker) claim(ctx context.Context, from jetflow.State, r *jetflow.Run, rev uint64) (uint64, error) {
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
	w.claims.mu.Lock()
	w.claims.next++
	tok := w.claims.next
	w.claims.pending[tok] = ch
	w.claims.mu.Unlock()
	msg.Reply = w.claims.inbox + "." + strconv.FormatUint(tok, 10)
	if err := w.nc.PublishMsg(msg); err != nil {
		w.takeClaim(tok)
		return w.writeRecord(ctx, engine.Claim, from, r, rev) // nothing was sent
	}
	// As long as the JetStream handle's requests wait (its
	// DefaultTimeout, 5 s unless the user set another).
	wait := w.js.Options().DefaultTimeout
	if wait <= 0 {
		wait = 5 * time.Second
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case reply := <-ch:
		if seq, ok := storedSeq(reply); ok {
			r.Revision = seq
			return seq, nil
		}
		// Refused or unanswered (no responders): nothing was stored.
		return w.writeRecord(ctx, engine.Claim, from, r, rev)
	case <-t.C:
		w.takeClaim(tok)
		return 0, fmt.Errorf("kv: write run %s: %w", r.ID, nats.ErrTimeout)
	case <-ctx.Done():
		w.takeClaim(tok)
		return 0, fmt.Errorf("kv: write run %s: %w", r.ID, ctx.Err())
	}
}
