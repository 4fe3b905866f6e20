// Package elect runs one leader among processes: the one elector of
// jetflow, used by the scheduler and by each work pool's dispatcher.
//
// A candidate holds a kv.Lease (a KV key with a TTL, renewed by
// compare-and-swap) and renews it every TTL/5. Its term (the lead function)
// runs while it holds the lease and ends when:
//   - another process holds the lease (kv.ErrNotLeader), or
//   - no renewal succeeded for 3/4 of the TTL (a slow server, an election
//     of the leases bucket): the term ends before the lease can pass to
//     another, so that two terms never overlap by design. The same
//     candidate takes its lease back at once when it can renew again
//     (nobody else could take it meanwhile), and a new term starts.
//   - lead returns by itself (its work failed): a new term starts at the
//     next renewal.
//
// Correctness never depends on one leader only (publishes are deduplicated
// and record writes are compare-and-swap): an overlap costs work.
package elect

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jetflow-dev/jetflow/kv"
)

// Elector campaigns for a lease.
type Elector struct {
	Lease *kv.Lease
	// TTL of the lease.
	TTL time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Log for term changes. Default: discard.
	Log *slog.Logger
	// Name says what is led, in logs.
	Name string
	// OnTerm is called with true when a term starts and false when it
	// ends (optional).
	OnTerm func(leader bool)
	// OnAttempt is called after each try to take or renew the lease with
	// its error: nil (held), kv.ErrNotLeader (another holds it) or why
	// the lease could not be read (optional; health probes read it).
	OnAttempt func(err error)
}

// Run campaigns until ctx ends, running lead for each term with a ctx
// that is canceled when the term ends; Run waits for lead to return before
// a new term and before it returns. It releases the lease on the way out.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context)) {
	now := e.Now
	if now == nil {
		now = time.Now
	}
	log := e.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	every := e.TTL / 5
	t := time.NewTicker(every)
	defer t.Stop()
	type term struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var (
		cur     *term
		renewed time.Time // last successful acquire or renewal
	)
	end := func() {
		if cur == nil {
			return
		}
		cur.cancel()
		<-cur.done
		cur = nil
		if e.OnTerm != nil {
			e.OnTerm(false)
		}
	}
	defer func() {
		end()
		rctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		if err := e.Lease.Release(rctx); err != nil {
			log.Debug("lease release", "error", err)
		}
		c()
	}()
	for {
		actx, c := context.WithTimeout(ctx, e.TTL/2)
		err := e.Lease.Acquire(actx)
		c()
		if e.OnAttempt != nil {
			e.OnAttempt(err)
		}
		if cur != nil {
			select {
			case <-cur.done: // the term ended by itself
				end()
			default:
			}
		}
		switch {
		case err == nil:
			renewed = now()
			if cur == nil {
				tctx, cancel := context.WithCancel(ctx)
				cur = &term{cancel: cancel, done: make(chan struct{})}
				if e.OnTerm != nil {
					e.OnTerm(true)
				}
				log.Info("leader", "of", e.Name)
				go func(done chan struct{}) {
					defer close(done)
					lead(tctx)
				}(cur.done)
			}
		case cur != nil && (errors.Is(err, kv.ErrNotLeader) || now().Sub(renewed) > e.TTL*3/4):
			log.Warn("lost the lease; term ends", "of", e.Name, "error", err)
			end()
		case cur != nil:
			log.Debug("lease renewal failed; retrying", "of", e.Name, "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
