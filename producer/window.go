package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/internal/puback"
	"github.com/nats-io/nats.go"
)

// The first try of an Enqueue whose run is published without a record (a
// direct run) goes through a window shared by every producer on the same
// connection: the connection's pipelined (asynchronous) publishes, each
// caller waiting for its own message's acknowledgement. Concurrent calls
// so share the connection's writes and the server's replies instead of
// each making a request of its own; a web service enqueueing one run per
// request, from many goroutines, gets near raw JetStream's publish rate.
//
// Each caller still returns only after its own message is stored (its
// acknowledgement, not a neighbour's), and gets its own error. A try that
// failed (a message the stream refused, a connection lost, no
// acknowledgement within rideAttempt, a full window) goes on alone through
// ride, as a publish whose answer was lost does: it looks whether its run
// landed and publishes it again, deduplicated, if not.
//
// Measured (docs/scaling.md): with 1000 goroutines enqueueing, a pipelined
// window per caller cost less than a coalesced atomic batch (the server
// stages an atomic batch in a store of its own, per batch), so the window
// is the connection's pipeline, not a batch. Its publishes carry reply
// subjects of the window's own, each caller waiting for its token's reply.
type window struct {
	nc      *nats.Conn
	slots   chan struct{} // one per publish waiting for its acknowledgement
	replies puback.Replies[chan error]
}

// windows holds one window per connection, removed when the connection
// closes: producers made and dropped on one connection share it.
var windows sync.Map // *nats.Conn -> *window

// windowOf returns the window of nc, making it on first use.
func windowOf(nc *nats.Conn) (*window, error) {
	if w, ok := windows.Load(nc); ok {
		return w.(*window), nil
	}
	w := &window{nc: nc, slots: make(chan struct{}, windowPending)}
	// Replies are read without a JSON decoder (puback), on a subscription
	// of the window's own (made before any caller can publish in it):
	// nats.go's asynchronous publish would decode each.
	sub, err := w.replies.Start(nc, w.reply)
	if err != nil {
		return nil, err
	}
	if v, loaded := windows.LoadOrStore(nc, w); loaded {
		_ = sub.Unsubscribe()
		return v.(*window), nil
	}
	closed := nc.StatusChanged(nats.CLOSED)
	go func() {
		<-closed
		windows.Delete(nc)
		_ = sub.Unsubscribe()
	}()
	if nc.IsClosed() {
		windows.Delete(nc)
	}
	return w, nil
}

// windowPending bounds the acknowledgements a window waits for; a caller
// that finds it full waits for room (up to rideAttempt and its ctx), then
// publishes alone.
const windowPending = 4096

// errWindowFull and errWindowTimeout send a try on alone (publishDirect).
var (
	errWindowFull    = errors.New("producer: enqueue window full")
	errWindowTimeout = errors.New("producer: no acknowledgement in the enqueue window")
)

// publish sends m in the window and waits until it is acknowledged or
// failed, or until ctx ends.
func (w *window) publish(ctx context.Context, m *nats.Msg) error {
	stall := rideAttempt
	if d, ok := ctx.Deadline(); ok {
		stall = max(min(stall, time.Until(d)), time.Millisecond)
	}
	select {
	case w.slots <- struct{}{}:
	default:
		t := time.NewTimer(stall)
		select {
		case w.slots <- struct{}{}:
			t.Stop()
		case <-t.C:
			return errWindowFull
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	defer func() { <-w.slots }()
	ch := make(chan error, 1)
	var tok uint64
	m.Reply, tok = w.replies.Add(ch)
	if err := w.nc.PublishMsg(m); err != nil {
		w.replies.Take(tok)
		return err
	}
	t := time.NewTimer(rideAttempt)
	defer t.Stop()
	select {
	case err := <-ch:
		return err
	case <-t.C:
		w.replies.Take(tok)
		return errWindowTimeout
	case <-ctx.Done():
		w.replies.Take(tok)
		return ctx.Err()
	}
}

// reply hands a publish's acknowledgement to its caller (buffered: it
// never blocks).
func (w *window) reply(ch chan error, msg *nats.Msg) {
	if _, ok := puback.Seq(msg); ok {
		ch <- nil
		return
	}
	why := string(msg.Data)
	if msg.Header.Get("Status") == "503" {
		why = "no responders"
	}
	ch <- fmt.Errorf("producer: enqueue window: %s", why)
}
