package producer

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
// is the connection's pipeline, not a batch.
type window struct {
	js jetstream.JetStream // the connection's asynchronous publisher
}

// windows holds one window per connection, removed when the connection
// closes: producers made and dropped on one connection share it.
var windows sync.Map // *nats.Conn -> *window

// windowOf returns the window of nc, making it on first use.
func windowOf(nc *nats.Conn) (*window, error) {
	if w, ok := windows.Load(nc); ok {
		return w.(*window), nil
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncTimeout(rideAttempt),
		jetstream.WithPublishAsyncMaxPending(windowPending))
	if err != nil {
		return nil, err
	}
	w, loaded := windows.LoadOrStore(nc, &window{js: js})
	if !loaded {
		closed := nc.StatusChanged(nats.CLOSED)
		go func() {
			<-closed
			windows.Delete(nc)
		}()
		if nc.IsClosed() {
			windows.Delete(nc)
		}
	}
	return w.(*window), nil
}

// windowPending bounds the acknowledgements a window waits for; a caller
// that finds it full waits for room (up to rideAttempt and its ctx), then
// publishes alone.
const windowPending = 4096

// publish sends m in the window and waits until it is acknowledged or
// failed, or until ctx ends.
func (w *window) publish(ctx context.Context, m *nats.Msg) error {
	stall := rideAttempt
	if d, ok := ctx.Deadline(); ok {
		stall = max(min(stall, time.Until(d)), time.Millisecond)
	}
	f, err := w.js.PublishMsgAsync(m, jetstream.WithStallWait(stall))
	if err != nil {
		return err
	}
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
