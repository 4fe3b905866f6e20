package puback

import (
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
)

// Replies are the writes in flight that wait for the server's reply on an
// inbox of their own (under the connection's inbox prefix), by reply token:
// the worker's success writes and claims, the producer's enqueue window. A
// value is taken once: by its reply, or by whoever gives up on it first.
type Replies[T any] struct {
	mu      sync.Mutex
	inbox   string // <inbox>.<token> is a write's reply subject
	next    uint64
	pending map[uint64]T
}

// Start subscribes to the replies; on gets each reply with the value its
// write was sent with (a reply to a value taken already is dropped).
func (r *Replies[T]) Start(nc *nats.Conn, on func(v T, reply *nats.Msg)) (*nats.Subscription, error) {
	r.inbox = nc.NewInbox()
	r.pending = make(map[uint64]T)
	return nc.Subscribe(r.inbox+".*", func(msg *nats.Msg) {
		tok, err := strconv.ParseUint(msg.Subject[len(r.inbox)+1:], 10, 64)
		if err != nil {
			return
		}
		if v, ok := r.Take(tok); ok {
			on(v, msg)
		}
	})
}

// Add registers v and returns the reply subject of its write and its token.
func (r *Replies[T]) Add(v T) (subject string, tok uint64) {
	r.mu.Lock()
	r.next++
	tok = r.next
	r.pending[tok] = v
	r.mu.Unlock()
	return r.inbox + "." + strconv.FormatUint(tok, 10), tok
}

// Take removes and returns the value of tok, if it is still there.
func (r *Replies[T]) Take(tok uint64) (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.pending[tok]
	delete(r.pending, tok)
	return v, ok
}

// TakeIf removes and returns the values drop says to.
func (r *Replies[T]) TakeIf(drop func(T) bool) []T {
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
