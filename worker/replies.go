package worker

import (
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
)

// replies are the writes in flight that wait for the server's reply on an
// inbox of the worker's own (under the connection's inbox prefix), by reply
// token: the success writes (outcome.go) and the claims (claim.go). A value
// is taken once: by its reply, or by whoever gives up on it first.
type replies[T any] struct {
	mu      sync.Mutex
	inbox   string // <inbox>.<token> is a write's reply subject
	next    uint64
	pending map[uint64]T
}

// start subscribes to the replies; on gets each reply with the value its
// write was sent with (a reply to a value taken already is dropped).
func (r *replies[T]) start(nc *nats.Conn, on func(v T, reply *nats.Msg)) (*nats.Subscription, error) {
	r.inbox = nc.NewInbox()
	r.pending = make(map[uint64]T)
	return nc.Subscribe(r.inbox+".*", func(msg *nats.Msg) {
		tok, err := strconv.ParseUint(msg.Subject[len(r.inbox)+1:], 10, 64)
		if err != nil {
			return
		}
		if v, ok := r.take(tok); ok {
			on(v, msg)
		}
	})
}

// add registers v and returns the reply subject of its write and its token.
func (r *replies[T]) add(v T) (subject string, tok uint64) {
	r.mu.Lock()
	r.next++
	tok = r.next
	r.pending[tok] = v
	r.mu.Unlock()
	return r.inbox + "." + strconv.FormatUint(tok, 10), tok
}

// take removes and returns the value of tok, if it is still there.
func (r *replies[T]) take(tok uint64) (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.pending[tok]
	delete(r.pending, tok)
	return v, ok
}

// takeIf removes and returns the values drop says to.
func (r *replies[T]) takeIf(drop func(T) bool) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []T
	for tok, v := range r.pending {
		if drop(v) {
			delete(r.pending, tok)
			out = append(out, v)
		}
	}
	return out
}
