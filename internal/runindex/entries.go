package runindex

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow/internal/puback"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// entries publishes a term's messages to the index stream (its entries and
// its checkpoints) as one chain: each carries a Nats-Msg-Id and expects the
// stream's last message to be the term's previous one
// (Nats-Expected-Last-Msg-Id). The stream therefore holds the entries in
// revision order with no gaps (an entry is left out only when a later
// write of its run replaced it before it was sent: staged.go): once a message is refused or lost (an
// election, a reconnect, a message of another publisher in between), no
// later one of the term can be stored (the one it expects is not the last),
// the term ends, and the next resumes after the last entry stored
// (resumePoint): the chain starts with a marker the term stores right after
// the stream's last message as read from its leader. Without
// the chain, entries of a term sent after a refused one could be stored,
// leaving a hole no later term fills; and entries sent again after a
// checkpoint needed the duplicate window to be dropped, holding an entry
// per record write in the server's memory for two minutes. The index
// stream's window is a second (ProvisionIndex): nothing is sent twice.
//
// Entries are published with a reply subject of the term's own and their
// acknowledgements counted, read without a JSON decoder (puback): nats.go's
// asynchronous publish would decode each one. At most max are in flight;
// the first failure is kept: it ends the term (failed) and fails the next
// checkpoint.
type entries struct {
	nc       *nats.Conn
	sub      *nats.Subscription
	inbox    string
	slots    chan struct{} // one per entry in flight
	patience time.Duration // how long a publish waits for a slot, and wait for every acknowledgement
	last     string        // the Nats-Msg-Id the next message expects last

	mu     sync.Mutex
	n      int           // in flight
	idle   chan struct{} // closed while n is 0
	err    error         // the first failure
	failed atomic.Bool   // err is set
}

// newEntries starts a term's chain after the message whose Nats-Msg-Id is
// last (the term's marker); a publish waits up to patience for room.
func newEntries(nc *nats.Conn, max int, last string, patience time.Duration) (*entries, error) {
	e := &entries{nc: nc, inbox: nc.NewInbox(), slots: make(chan struct{}, max), idle: make(chan struct{}),
		patience: patience, last: last}
	close(e.idle)
	sub, err := nc.Subscribe(e.inbox, e.reply)
	if err != nil {
		return nil, err
	}
	e.sub = sub
	return e, nil
}

// chain makes m the next message of the chain, with id as its Nats-Msg-Id:
// it expects the message before it to be the stream's last.
func (e *entries) chain(m *nats.Msg, id string) {
	m.Header[jetstream.MsgIDHeader] = []string{id}
	m.Header[jetstream.ExpectedLastMsgIDHeader] = []string{e.last}
	e.last = id
}

// publish sends one entry (id its Nats-Msg-Id), waiting while max are in
// flight.
func (e *entries) publish(ctx context.Context, m *nats.Msg, id string) error {
	select {
	case e.slots <- struct{}{}:
	default:
		// Full: acknowledgements slower than the writes, or publishes the
		// server drops unanswered (sent to a replica that is not the
		// stream's leader, lost in an election). Waiting for ever would
		// stall the term: it ends instead, and the next resumes.
		t := time.NewTimer(e.patience)
		select {
		case e.slots <- struct{}{}:
			t.Stop()
		case <-t.C:
			err := errors.New("runindex: index entries not acknowledged")
			e.fail(err)
			return err
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	e.mu.Lock()
	if e.n == 0 {
		e.idle = make(chan struct{})
	}
	e.n++
	e.mu.Unlock()
	m.Reply = e.inbox
	e.chain(m, id)
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

// fail keeps err as the term's first failure.
func (e *entries) fail(err error) {
	e.mu.Lock()
	e.keep(err)
	e.mu.Unlock()
}

// keep records err if it is the first failure; e.mu held.
func (e *entries) keep(err error) {
	if err != nil && e.err == nil {
		e.err = err
		e.failed.Store(true)
	}
}

// done counts an entry answered (err: how it failed, or nil).
func (e *entries) done(err error) {
	e.mu.Lock()
	e.keep(err)
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
	idle, err := e.idle, e.err
	e.mu.Unlock()
	if err != nil {
		return err
	}
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

// publishSync sends m (id its Nats-Msg-Id) after every entry is
// acknowledged, and waits for it to be stored (a checkpoint).
func (e *entries) publishSync(ctx context.Context, js jetstream.JetStream, m *nats.Msg, id string) error {
	if err := e.wait(ctx, e.patience); err != nil {
		return err
	}
	e.chain(m, id)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		e.fail(err)
		return err
	}
	return nil
}
