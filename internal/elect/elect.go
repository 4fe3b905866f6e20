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
// A term holds its lease for 3/4 of the TTL after it sent its last
// successful renewal (by this process's monotonic clock): another process
// can take the lease only a TTL after that renewal was written, which is
// after it was sent. Holds asks that of a term's ctx, right before a
// publish only the leader may make: a process paused past that time (a
// SIGSTOP, a VM's pause) resumes with its goroutines running before its
// elector's, and would otherwise publish on a read made before the pause,
// while another process led. A renewal that comes after that time starts a
// new term (the lease may have passed meanwhile), never continues the old.
//
// Correctness never depends on one leader only (publishes are deduplicated
// and record writes are compare-and-swap): an overlap costs work.
package elect

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/kv"
)

// term is one leadership term.
type term struct {
	cancel context.CancelFunc
	done   chan struct{}
	ttl    time.Duration
	mu     sync.Mutex
	sent   time.Time // when its last successful acquire or renewal was sent (monotonic)
	over   bool
}

type termKey struct{}

// Holds reports whether ctx's term (the ctx lead was given, or one derived
// from it) certainly still holds its lease: it has not ended and its last
// successful renewal was sent less than 3/4 of the TTL ago. A ctx of no
// term holds (work done outside any term, such as a test's DispatchDue).
func Holds(ctx context.Context) bool {
	t, ok := ctx.Value(termKey{}).(*term)
	if !ok {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.over && held(time.Since(t.sent), t.ttl)
}

// held is the rule of a lease: held while its last successful renewal was
// sent less than 3/4 of the TTL ago.
func held(sinceSent, ttl time.Duration) bool { return sinceSent < ttl*3/4 }

func (t *term) renewed(sent time.Time) {
	t.mu.Lock()
	t.sent = sent
	t.mu.Unlock()
}

func (t *term) sentAt() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent
}

// Elector campaigns for a lease.
type Elector struct {
	Lease *kv.Lease
	// TTL of the lease.
	TTL time.Duration
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
	log := e.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	every := e.TTL / 5
	t := time.NewTicker(every)
	defer t.Stop()
	var cur *term
	end := func() {
		if cur == nil {
			return
		}
		cur.mu.Lock()
		cur.over = true
		cur.mu.Unlock()
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
		sent := time.Now()
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
		if cur != nil && !held(sent.Sub(cur.sentAt()), e.TTL) {
			// Sent after the term's hold ran out (this process paused, or
			// the server slow): the lease may have passed meanwhile.
			log.Warn("lease not renewed in time; term ends", "of", e.Name, "error", err)
			end()
		}
		switch {
		case err == nil && cur != nil:
			cur.renewed(sent)
		case err == nil:
			tctx, cancel := context.WithCancel(ctx)
			cur = &term{cancel: cancel, done: make(chan struct{}), ttl: e.TTL, sent: sent}
			tctx = context.WithValue(tctx, termKey{}, cur)
			if e.OnTerm != nil {
				e.OnTerm(true)
			}
			log.Info("leader", "of", e.Name)
			go func(done chan struct{}) {
				defer close(done)
				lead(tctx)
			}(cur.done)
		case cur != nil && (errors.Is(err, kv.ErrNotLeader) || !held(time.Since(cur.sentAt()), e.TTL)):
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
