package runindex

import (
	"context"
	"errors"
	"sync"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go/jetstream"
)

// The runs stream is read by gets, not consumers, where a page reads few of
// its messages: the unfiltered page (every record is a row) and a filtered
// page's tail of at most shortTail writes. Creating a consumer on it (or a
// batched direct get) makes the server count the messages pending for it,
// and on a stream that keeps one message per subject (the runs bucket keeps
// one revision a run) nats-server counts them by walking its index of
// every subject: about 15 ms a consumer at 1M records, several a page. A
// get of the next message at or after a sequence (NextFromLeader) costs the
// message it returns, whatever the records kept.
const shortTail = 256

// spanChunks is how many chains of gets read a span side by side.
const spanChunks = 8

// maxSpan bounds a span of sequences read at once (its messages are held).
const maxSpan = 1 << 14

// walkBack visits the messages of stream with a sequence in (floor, below),
// newest first, until visit returns false. It reads spans of sequences
// toward the past, each by chains of gets (readSpan), the first sized for
// need() messages and the next ones from the density of messages found so
// far (nextSpan): a span's gets are about the messages it holds.
func walkBack(ctx context.Context, js jetstream.JetStream, stream string, below, floor uint64, need func() int, visit func(*jetstream.RawStreamMsg) (bool, error)) error {
	w := uint64(need()*5/4 + 8)
	var scanned, found uint64
	for hi := below; hi > floor+1; {
		lo := floor + 1
		if hi-lo > w {
			lo = hi - w
		}
		msgs, err := readSpan(ctx, js, stream, lo, hi)
		if err != nil {
			return err
		}
		for i := len(msgs) - 1; i >= 0; i-- {
			if more, err := visit(msgs[i]); err != nil || !more {
				return err
			}
		}
		scanned += hi - lo
		found += uint64(len(msgs))
		hi = lo
		w = nextSpan(w, scanned, found, uint64(max(need(), 1)))
	}
	return nil
}

// nextSpan is the size of the next span of walkBack: the sequences that
// hold about need more messages (a quarter more) at the density found so
// far (found messages in scanned sequences), at least 16, at most four
// times the last span w and maxSpan; four times w when none was found.
func nextSpan(w, scanned, found, need uint64) uint64 {
	if found == 0 {
		return min(w*4, maxSpan)
	}
	return min(max(scanned*need*5/4/found, 16), w*4, maxSpan)
}

// readSpan reads the messages of stream with a sequence in [lo, hi), in
// order: spanChunks chains of gets side by side, each walking its part of
// the span from message to message (a get returns the next message at or
// after a sequence, so deleted sequences cost nothing).
func readSpan(ctx context.Context, js jetstream.JetStream, stream string, lo, hi uint64) ([]*jetstream.RawStreamMsg, error) {
	size := max((hi-lo+spanChunks-1)/spanChunks, 8)
	n := int((hi - lo + size - 1) / size)
	parts := make([][]*jetstream.RawStreamMsg, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		from := lo + uint64(i)*size
		wg.Go(func() { parts[i], errs[i] = readChunk(ctx, js, stream, from, min(from+size, hi)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []*jetstream.RawStreamMsg
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, nil
}

// readChunk reads the messages of stream with a sequence in [from, to), in
// order, one get each (and one more that finds the next beyond to, or
// none).
func readChunk(ctx context.Context, js jetstream.JetStream, stream string, from, to uint64) ([]*jetstream.RawStreamMsg, error) {
	var out []*jetstream.RawStreamMsg
	for seq := from; seq < to; {
		m, err := kv.NextFromLeader(ctx, js, stream, seq)
		read.Add(1)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		if m.Sequence >= to {
			break
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
	return out, nil
}

// walkAhead visits the messages of stream with a sequence in [from, to],
// oldest first, one get each, until visit returns false.
func walkAhead(ctx context.Context, js jetstream.JetStream, stream string, from, to uint64, visit func(*jetstream.RawStreamMsg) (bool, error)) error {
	for seq := max(from, 1); seq <= to; {
		m, err := kv.NextFromLeader(ctx, js, stream, seq)
		read.Add(1)
		if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence > to {
			return nil
		}
		if err != nil {
			return err
		}
		if more, err := visit(m); err != nil || !more {
			return err
		}
		seq = m.Sequence + 1
	}
	return nil
}

// tailRecords is the visitor of the runs stream's tail read by gets: each
// record that matches the page's filter, and was not shown, adds a row to
// w, until full. The record is the message itself, the latest revision of
// its run when read: no second read.
func (p *pager) tailRecords(w *pageRows) func(*jetstream.RawStreamMsg) (bool, error) {
	return func(m *jetstream.RawStreamMsg) (bool, error) {
		if run := p.recordOf(m); run != nil {
			w.add(pos{class: classTail, seq: m.Sequence}, run)
		}
		return !w.full(), nil
	}
}

// recordOf is the run of message m of the runs stream if it is a record
// that fits the page and was not shown (record's rules: a record jetflow
// did not write is a row saying so in a page of every run, and none in a
// filtered one).
func (p *pager) recordOf(m *jetstream.RawStreamMsg) *jetflow.Run {
	if len(m.Subject) <= len(p.r.pfx) || m.Subject[:len(p.r.pfx)] != p.r.pfx || kv.IsMarker(m.Header) {
		return nil
	}
	id := m.Subject[len(p.r.pfx):]
	if p.seen[id] {
		return nil
	}
	run, err := kv.Decode(m.Data, m.Sequence)
	if err != nil {
		if p.q.State != "" || p.q.Function != "" {
			return nil
		}
		p.seen[id] = true
		return &jetflow.Run{ID: id, Revision: m.Sequence, Error: err.Error()}
	}
	if !p.match(run.State, run.Name) {
		return nil
	}
	p.seen[id] = true
	return run
}
