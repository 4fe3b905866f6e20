package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// ContinueAsNewError is what ContinueAsNew returns: the workflow function
// returns it as its error to end its run and start the next.
type ContinueAsNewError struct {
	input json.RawMessage
}

func (e *ContinueAsNewError) Error() string { return "workflow: continue as new" }

// ContinueAsNew ends the workflow's current run and starts a fresh one of
// the same workflow (same id and record) with input in and an empty
// journal, for a workflow that would otherwise wait without end (an
// entity: a subscription, a conversation): return its result as the
// workflow function's error,
//
//	return 0, workflow.ContinueAsNew(wf, state)
//
// From outside it is one workflow: its record stays in progress (Get,
// Result and Cancel see one workflow), events and updates sent meanwhile
// are kept for the next run (those its runs consumed are not taken
// again), and queries answer from the current run. Steps of the ended run
// are removed from the journal; branches it left waiting are abandoned.
// A JSON encoding error of in fails the workflow with jetflow.ErrBadArgs.
func ContinueAsNew[In any](wf *Context, in In) error {
	raw, err := json.Marshal(in)
	if err != nil {
		wf.seg.failWorkflow(jetflow.Permanent(fmt.Errorf("%w: continue as new: %v", jetflow.ErrBadArgs, err)))
	}
	return &ContinueAsNewError{input: raw}
}

// continueAsNew ends the current run of the workflow and starts the next:
// the cursor moves, by compare-and-swap, to the next run (its input in
// it) and says this segment parked, then the next segment is enqueued. A
// segment that dies between the two is retried and, holding the cursor
// again, runs the next run itself. The ended run's steps are purged
// after the cursor moved (best effort: the next run reads only its own).
func (s *segment) continueAsNew(ctx context.Context, input json.RawMessage) error {
	if err := s.claim(ctx); errors.Is(err, kv.ErrTerminal) {
		return nil // canceled
	} else if err != nil {
		return err
	}
	if s.cur.rev == 0 {
		retention := engine.Of(s.d.p).Streams().Retention
		if err := armJanitor(ctx, s.d.p, s.def.Name(), s.wf, time.Now().Add(retention)); err != nil {
			return err
		}
	}
	next := s.cur.continued(input)
	ok, err := s.jr.putCursor(ctx, s.wf, next)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("workflow %s: cursor changed under segment %d", s.wf, s.n)
	}
	if st, err := s.jr.stream(ctx); err == nil {
		// Best effort: the next run reads only its own steps (generation);
		// what is left is purged with the journal at its retention.
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(streams.KVSubject(s.jr.bucket, s.wf+".s.>")), jetstream.WithPurgeSequence(next.rev)); err != nil {
			slog.Debug("workflow: purge of the ended run's steps; the journal's janitor purges them", "workflow", s.wf, "error", err)
		}
		s.dropConsumed(ctx, st)
	}
	s.d.keep(s.wf, &stickyJournal{rev: next.rev, steps: map[string]*Entry{}, claims: s.claims})
	return resume(ctx, s.d.p, s.jr, s.def.Name(), s.wf)
}

// endedRuns is what a segment's claim removes from the workflow record's
// children: the segment before (it parked), and the runs and timers of
// steps that ended, whose Cancel would do nothing. So the record holds
// what may still run, not one id per segment and call: a workflow of n
// waits writes O(n) bytes of record, not O(n²).
func endedRuns(wf string, n int, steps map[string]*Entry) map[string]bool {
	drop := map[string]bool{}
	if n > 2 {
		drop[SegmentID(wf, n-1)] = true
	}
	for id, e := range steps {
		if !e.ended() {
			continue
		}
		if e.Waits != nil && e.Waits.Run != "" {
			drop[e.Waits.Run] = true
		}
		if e.Waits != nil && !e.Waits.Until.IsZero() {
			drop[runID(wf, "timer", id)] = true
		}
	}
	return drop
}

// asNew is err as a ContinueAsNewError, nil when it is not one.
func asNew(err error) *ContinueAsNewError {
	var c *ContinueAsNewError
	if errors.As(err, &c) {
		return c
	}
	return nil
}

// currentRun is the steps of snapshot snap's current run, with the ids a
// first run has (Restart starts the run again as a new workflow's first).
func currentRun(snap *snapshot) map[string]*Entry {
	g := snap.cur.gen()
	steps := generation(snap.steps, g)
	if g == 1 {
		return steps
	}
	out := make(map[string]*Entry, len(steps))
	cut := len(genPath(g)) + 1
	for id, e := range steps {
		c := *e
		c.Step = id[cut:]
		out[c.Step] = &c
	}
	return out
}

// dropConsumed removes the events and updates the workflow's runs
// consumed, each before its claim (an event whose claim went first would
// be taken again), so that a workflow that continues as new does not read
// every event of its life at each replay. Best effort: what stays is read
// and skipped as before.
func (s *segment) dropConsumed(ctx context.Context, st jetstream.Stream) {
	keys := map[uint64]string{} // the events and updates still stored
	for _, filter := range []string{s.wf + ".ev.>", s.wf + ".up.>"} {
		err := s.jr.scan(ctx, filter, func(e jetstream.KeyValueEntry) error {
			keys[e.Revision()] = e.Key()
			return nil
		})
		if err != nil {
			return
		}
	}
	s.mu.Lock()
	seqs := make([]uint64, 0, len(s.claims))
	for seq := range s.claims {
		seqs = append(seqs, seq)
	}
	s.mu.Unlock()
	subject := func(key string) jetstream.StreamPurgeOpt {
		return jetstream.WithPurgeSubject(streams.KVSubject(s.jr.bucket, key))
	}
	for _, seq := range seqs {
		if key, ok := keys[seq]; ok && st.Purge(ctx, subject(key)) != nil {
			continue
		}
		if st.Purge(ctx, subject(claimKey(s.wf, seq))) != nil {
			continue
		}
		s.mu.Lock()
		delete(s.claims, seq)
		s.mu.Unlock()
	}
}
