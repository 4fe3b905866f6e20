package runindex

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/internal/puback"
	"github.com/nats-io/nats.go"
)

// entries publishes a term's index entries with a reply subject of the
// term's own and counts their acknowledgements, read without a JSON decoder
// (puback): nats.go's asynchronous publish would decode each one, a
// microsecond or so per record write on a deployment's hot path. At most
// max are in flight; the first failure (an error reply, or no stream to
// answer) is kept and fails the next checkpoint, and the next term
// publishes again every entry after the last one (the server drops those it
// has by their Nats-Msg-Id).
type entries struct {
	nc    *nats.Conn
	sub   *nats.Subscription
	inbox string
	slots chan struct{} // one per entry in flight

	mu   sync.Mutex
	n    int           // in flight
	idle chan struct{} // closed while n is 0
	err  error         // the first failure
}

func newEntries(nc *nats.Conn, max int) (*entries, error) {
	e := &entries{nc: nc, inbox: nc.NewInbox(), slots: make(chan struct{}, max), idle: make(chan struct{})}
	close(e.idle)
	sub, err := nc.Subscribe(e.inbox, e.reply)
	if err != nil {
		return nil, err
	}
	e.sub = sub
	return e, nil
}

// publish sends one entry, waiting while max are in flight.
func (e *entries) publish(ctx context.Context, m *nats.Msg) error {
	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	e.mu.Lock()
	if e.n == 0 {
		e.idle = make(chan struct{})
	}
	e.n++
	e.mu.Unlock()
	m.Reply = e.inbox
	if err := e.nc.PublishMsg(m); err != nil {
		e.done(fmt.Errorf("runindex: index entry %s: %w", m.Header.Get(nats.MsgIdHdr), err))
		return err
	}
	return nil
}

// reply counts an acknowledgement.
func (e *entries) reply(msg *nats.Msg) {
	if _, ok := puback.Seq(msg); ok {
		e.done(nil)
		return
	}
	why := string(msg.Data)
	if msg.Header.Get("Status") == "503" {
		why = "no responders: the index stream has no leader"
	}
	e.done(fmt.Errorf("runindex: index entry not stored: %s", why))
}

func (e *entries) done(err error) {
	e.mu.Lock()
	if err != nil && e.err == nil {
		e.err = err
	}
	if e.n > 0 {
		e.n--
		if e.n == 0 {
			close(e.idle)
		}
		<-e.slots
	}
	e.mu.Unlock()
}

// wait returns once every entry published is acknowledged, with the first
// failure if any; an error after d with entries still unanswered.
func (e *entries) wait(ctx context.Context, d time.Duration) error {
	e.mu.Lock()
	idle := e.idle
	e.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
		return errors.New("runindex: index entries not acknowledged")
	case <-ctx.Done():
		return ctx.Err()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

func (e *entries) close() { _ = e.sub.Unsubscribe() }
