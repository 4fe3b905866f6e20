package worker

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// After a NATS server crash, the messages that were delivered but not yet
// acknowledged come back at once, and where the consumer's state had not
// reached the disk they come back as first deliveries (a delivery count of
// 1). A first delivery is otherwise run without reading its record (the
// message names the record's revision, or is the pending record itself), so
// a worker has to tell the deliveries that may be replays from the others:
//
//   - the worker watches its connection; from a disconnect on, every message
//     stored before the moment it reconnected may have been delivered before
//     (mayBeReplay), whatever its delivery count (a restarted server whose
//     consumer state did reach the disk redelivers at once too, counted).
//     Such a delivery is reconciled with its record and claimed before its
//     handler starts, as a redelivery is;
//   - a run that another live worker was running without a claim yet (a
//     late claim) leaves no trace in its record. On reconnect every worker
//     claims the runs it has in flight at once (claimNow), and a delivery
//     that may be a replay and finds its run unclaimed waits until
//     ReplayGrace after the reconnect before it claims it, so that the
//     worker running it wins the claim. It is then redelivered, counted as
//     a redelivery.
//
// The cost falls on the messages stored before a reconnect: a record read
// and a claim each, and up to ReplayGrace of delay for those found
// unclaimed. Messages stored after it take the fast path again. "After" is
// told by the function stream's last sequence, read once reconnected: a
// message of a later sequence was stored after the reconnect, whatever the
// clocks say (on a single server: a deposed cluster leader may answer
// behind). A delivery that comes before that read has answered waits for
// it, up to boundWait, so that what it runs and publishes is stored after
// the read. When the read fails, and on a cluster, by the stored time,
// widened by replaySlack for a server clock ahead of the worker's.

// DefaultReplayGrace is the default Config.ReplayGrace.
const DefaultReplayGrace = 5 * time.Second

// replaySlack widens the window of possible replays for a server clock
// ahead of the worker's (stored times are the server's).
const replaySlack = time.Second

// replayGuard is what the worker saw of its connection.
type replayGuard struct {
	// before: a first delivery of a message stored before this time (unix
	// ns) may be a replay. 0: never disconnected. MaxInt64 while
	// disconnected.
	before atomic.Int64
	// graceUntil: unclaimed possible replays wait until this time (unix ns).
	graceUntil atomic.Int64
	// claimUntil: until this time (unix ns), every run in flight here is
	// claimed at once, whatever its ClaimAfter.
	claimUntil atomic.Int64
	// bound: what the latest reconnect read of the function stream's last
	// sequence; a message of a later sequence was stored after it. Each
	// reconnect stores a new one before it moves before, so that a bound
	// read for an earlier reconnect is never taken for the latest's.
	bound atomic.Pointer[seqBound]
	// kick asks the worker's loop to claim the runs in flight now.
	kick chan struct{}
}

// seqBound is the function stream's last sequence, read after one
// reconnect.
type seqBound struct {
	read bool   // the read has ended
	ok   bool   // seq holds; false: the stored time alone tells
	seq  uint64 // the stream's last sequence
	// done closes when the read of this (unread) bound has ended.
	done chan struct{}
}

func newSeqBound() *seqBound { return &seqBound{done: make(chan struct{})} }

// boundWait is how long a delivery waits for the sequence read of the
// reconnect before it (boundAfter).
const boundWait = time.Second

// watchConnection follows nc's status until done closes.
func (w *Worker) watchConnection(nc *nats.Conn, done <-chan struct{}) {
	ch := nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING)
	go func() {
		defer nc.RemoveStatusListener(ch)
		for {
			select {
			case <-done:
				return
			case st, ok := <-ch:
				if !ok {
					return
				}
				w.noteStatus(st)
			}
		}
	}()
}

func (w *Worker) noteStatus(st nats.Status) {
	g := &w.replay
	switch st {
	case nats.DISCONNECTED, nats.RECONNECTING:
		// Anything delivered from here on may be a replay until the
		// reconnect says from when.
		g.bound.Store(newSeqBound())
		g.before.Store(math.MaxInt64)
		g.graceUntil.Store(math.MaxInt64)
		g.claimUntil.Store(math.MaxInt64)
	case nats.CONNECTED:
		w.suspectReplays()
		w.log.Info("reconnected: deliveries of messages stored before now are claimed first", "grace", w.cfg.ReplayGrace)
	}
}

// suspectReplays takes every message stored before now for a possible
// replay (a reconnect, a consumer created again): the runs in flight here
// are claimed at once, and deliveries of such messages are reconciled,
// claimed first, and wait ReplayGrace when unclaimed.
func (w *Worker) suspectReplays() {
	g := &w.replay
	now := w.now()
	b := newSeqBound()
	g.bound.Store(b)
	g.before.Store(now.Add(replaySlack).UnixNano())
	g.graceUntil.Store(now.Add(w.cfg.ReplayGrace).UnixNano())
	g.claimUntil.Store(now.Add(w.cfg.ReplayGrace).UnixNano())
	select {
	case g.kick <- struct{}{}:
	default:
	}
	go w.readSeqBound(b)
}

// readSeqBound reads the function stream's last sequence for the reconnect
// that stored b, and keeps it unless a later reconnect has stored its own
// bound since. A server just restarted may not answer yet (JetStream still
// starting): the read is tried again until ReplayGrace has passed; then,
// and on a replicated stream, the stored time alone tells.
func (w *Worker) readSeqBound(b *seqBound) {
	defer close(b.done)
	read := &seqBound{read: true}
	for deadline := time.Now().Add(w.cfg.ReplayGrace); time.Now().Before(deadline); {
		if w.replay.bound.Load() != b {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := w.js.Stream(ctx, w.scfg.FunctionStream())
		cancel()
		if err == nil {
			info := s.CachedInfo()
			// On a cluster a deposed stream leader may answer with a
			// last sequence behind the stream's.
			read.ok, read.seq = info.Config.Replicas <= 1, info.State.LastSeq
			break
		}
		w.log.Debug("reconnected: the function stream's last sequence is not read yet", "error", err)
		select {
		case <-w.stopCh:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	w.replay.bound.CompareAndSwap(b, read)
}

// boundAfter is the sequence bound of the latest reconnect, once read: a
// delivery that comes before the read has ended waits for it, up to
// boundWait (a reconnect meanwhile stores a new bound, waited for in
// turn). Were it judged by a bound read later, a message stored after the
// reconnect but before that read (a segment the first wake published)
// would count as a possible replay.
func (w *Worker) boundAfter() seqBound {
	deadline := time.Now().Add(boundWait)
	for {
		b := w.replay.bound.Load()
		if b == nil {
			return seqBound{}
		}
		wait := time.Until(deadline)
		if b.read || wait <= 0 {
			return *b
		}
		t := time.NewTimer(min(wait, 50*time.Millisecond))
		select {
		case <-b.done:
		case <-t.C:
		}
		t.Stop()
	}
}

// boundRead reports whether the latest reconnect's sequence read has ended
// (true too when the worker never reconnected).
func (w *Worker) boundRead() bool {
	b := w.replay.bound.Load()
	return b == nil || b.read
}

// mayBeReplay reports whether a delivery of m (first or not) may repeat a
// delivery made before the worker's connection broke, to a worker that may
// still be running it without a claim.
func (w *Worker) mayBeReplay(m jetstream.Msg) bool {
	before := w.replay.before.Load()
	if before == 0 {
		return false // never disconnected
	}
	// Also when the worker has not yet heard of the reconnect that brought
	// this delivery (before is MaxInt64): whatever it runs meanwhile is
	// then stored after the read.
	bound := w.boundAfter()
	if now := w.replay.before.Load(); now != before || now == math.MaxInt64 {
		return true // disconnected, or a reconnect came meanwhile: the bound may be an earlier one's
	}
	reply := m.Reply()
	seq, seqOK := seqFrom(reply)
	stored, ok := storedFrom(reply)
	if !ok || !seqOK {
		md, err := m.Metadata()
		if err != nil {
			return true // no sequence, no stored time: it may be one
		}
		stored, seq = md.Timestamp.UnixNano(), md.Sequence.Stream
	}
	return replayBefore(before, bound, seq, stored)
}

// replayBefore is mayBeReplay's rule for a message of stream sequence seq
// stored at stored (unix ns), given the guard's before and the sequence
// bound read after the latest reconnect.
func replayBefore(before int64, bound seqBound, seq uint64, stored int64) bool {
	switch {
	case before == 0:
		return false // never disconnected
	case before == math.MaxInt64:
		return true // disconnected now
	case bound.ok && seq > bound.seq:
		return false // stored after the reconnect
	}
	return stored < before
}

// replayWait is how long an unclaimed possible replay still waits for the
// worker that may be running it to claim it (0: no longer).
func (w *Worker) replayWait() time.Duration {
	until := w.replay.graceUntil.Load()
	if until == math.MaxInt64 {
		return w.cfg.ReplayGrace
	}
	return time.Duration(until - w.now().UnixNano())
}

// claimNow reports whether runs in flight are to be claimed at once
// (shortly after a reconnect).
func (w *Worker) claimNow() bool {
	return w.now().UnixNano() < w.replay.claimUntil.Load()
}

// ackToken returns token i (0-based, counted after "$JS.ACK.") of a
// JetStream ack subject, in its 9-token form
// ($JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>)
// or its 11-or-more-token form with domain and account hash before the
// stream. It reports false for any other shape.
func ackToken(reply string, i int) (string, bool) {
	tokens := strings.Count(reply, ".") + 1
	switch {
	case tokens == 9:
	case tokens >= 11:
		i += 2
	default:
		return "", false
	}
	at := i + 2 // "$JS", "ACK"
	for range at {
		k := strings.IndexByte(reply, '.')
		reply = reply[k+1:]
	}
	if k := strings.IndexByte(reply, '.'); k >= 0 {
		reply = reply[:k]
	}
	return reply, true
}

// ackNumber reads token i of an ack subject (ackToken) as a positive
// number, without the allocations of Metadata (once per run on the hot
// path).
func ackNumber(reply string, i int) (uint64, bool) {
	tok, ok := ackToken(reply, i)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(tok, 10, 64)
	return n, err == nil && n > 0
}

// deliveredFrom reads the delivery count from an ack subject.
func deliveredFrom(reply string) (uint64, bool) { return ackNumber(reply, 2) }

// seqFrom reads the message's stream sequence from an ack subject.
func seqFrom(reply string) (uint64, bool) { return ackNumber(reply, 3) }

// storedFrom reads when the message was stored (unix ns) from an ack
// subject.
func storedFrom(reply string) (int64, bool) {
	n, ok := ackNumber(reply, 5)
	return int64(n), ok && n <= math.MaxInt64
}

// deliversAfterQuorum reports whether a nats-server of version v sends a
// replicated consumer's message only once its delivery is replicated
// (nats-server 2.12 on; nats-io/nats-server#6792). A new consumer leader
// then knows of every message sent before the change, and redelivers it
// with a delivery count of 2 or more, never as a first delivery. v is
// "major.minor.patch", with an optional suffix; anything unreadable is
// taken as older.
func deliversAfterQuorum(v string) bool {
	v, _, _ = strings.Cut(v, "-")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 12
}
