package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/puback"
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
	var tok uint64
	msg.Reply, tok = w.claims.Add(ch)
	if err := w.nc.PublishMsg(msg); err != nil {
		w.claims.Take(tok)
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
