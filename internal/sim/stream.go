package sim

import (
	"fmt"
	"slices"
	"time"
)

// msg is a message of the work-queue stream: one attempt of a run.
type msg struct {
	seq       uint64
	id        string
	attempt   int
	rev       uint64 // the revision of the pending record it carries
	amo       bool
	stored    time.Duration
	notBefore time.Duration // nak or retry delay
	delivered uint64        // delivery count
	owner     int           // the worker it is in flight to; -1: none
	sentAt    time.Duration // last delivery or in-progress ack
}

// stream is the function stream with its one work-queue consumer.
type stream struct {
	w      *World
	next   uint64
	msgs   []*msg          // unacknowledged, in stream order
	dedupe map[string]bool // Nats-Msg-Id window (unbounded here)
}

func newStream(w *World) *stream {
	return &stream{w: w, dedupe: map[string]bool{}}
}

// publish stores a message unless its id/attempt was stored before; a
// publish may be dropped or its reply lost (errTimeout).
func (s *stream) publish(id string, attempt int, rev uint64, amo bool, delay time.Duration) error {
	return s.publishAs(fmt.Sprintf("%s/%d", id, attempt), id, attempt, rev, amo, delay)
}

// publishAs is publish with a Nats-Msg-Id of the caller's.
func (s *stream) publishAs(key, id string, attempt int, rev uint64, amo bool, delay time.Duration) error {
	r := s.w.rng.Float64()
	if r < pDrop {
		return errTimeout
	}
	if !s.dedupe[key] {
		s.dedupe[key] = true
		s.next++
		s.msgs = append(s.msgs, &msg{seq: s.next, id: id, attempt: attempt, rev: rev, amo: amo,
			stored: s.w.now, notBefore: s.w.now + delay, owner: -1})
		s.w.tracef("stored message %d: %s attempt %d rev %d", s.next, id, attempt, rev)
	}
	if r < pDrop+pLostReply {
		return errTimeout
	}
	return nil
}

// queued reports whether a message of run id is unacknowledged.
func (s *stream) queued(id string) bool {
	for _, m := range s.msgs {
		if m.id == id {
			return true
		}
	}
	return false
}

// expire hands back deliveries not acknowledged within AckWait.
func (s *stream) expire() {
	for _, m := range s.msgs {
		if m.owner >= 0 && s.w.now-m.sentAt >= ackWait {
			s.w.tracef("message %d (%s) not acknowledged in AckWait: redelivered", m.seq, m.id)
			m.owner = -1
		}
	}
}

// deliver sends one available message to worker i (paused or not: its
// pull was outstanding, the message waits in its socket).
func (s *stream) deliver(i int) (msg, bool) {
	for _, m := range s.msgs {
		if m.owner < 0 && m.notBefore <= s.w.now {
			m.owner, m.sentAt = i, s.w.now
			m.delivered++
			return *m, true
		}
	}
	return msg{}, false
}

func (s *stream) ack(seq uint64) {
	s.msgs = slices.DeleteFunc(s.msgs, func(m *msg) bool { return m.seq == seq })
}

func (s *stream) find(seq uint64) (*msg, bool) {
	for _, m := range s.msgs {
		if m.seq == seq {
			return m, true
		}
	}
	return nil, false
}

// touch is an in-progress acknowledgement: AckWait starts again.
func (s *stream) touch(seq uint64, i int) {
	if m, ok := s.find(seq); ok && m.owner == i {
		m.sentAt = s.w.now
	}
}

func (s *stream) nak(seq uint64, i int, delay time.Duration) {
	if m, ok := s.find(seq); ok && m.owner == i {
		m.owner, m.notBefore = -1, s.w.now+delay
	}
}

// crash restarts the server: the messages in flight are delivered again
// as first deliveries (the consumer's state did not reach the disk).
func (s *stream) crash() {
	for _, m := range s.msgs {
		if m.owner >= 0 {
			m.owner, m.delivered = -1, 0
		}
	}
}
