package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

func decodeArgs(data []byte, v any) error {
	if len(data) == 0 {
		data = []byte("null")
	}
	return json.Unmarshal(data, v)
}

// dispatch is called by the consumer for each message; it hands the message
// to one of the function's Concurrency runner goroutines, waiting for one to
// be free.
func (w *Worker) dispatch(e *fnEntry, m jetstream.Msg) {
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		_ = m.Nak() // stopping: back to the stream, unharmed
		return
	}
	w.inflight.Add(1)
	w.mu.Unlock()
	select {
	case e.work <- m:
	case <-w.stopCh:
		_ = m.Nak()
		w.inflight.Done()
	}
}

// runner runs the messages dispatch hands it until the worker stops. Long-
// lived runners keep their grown stacks: no goroutine start per run.
func (w *Worker) runner(e *fnEntry) {
	for {
		select {
		case m := <-e.work:
			w.process(e, m)
			w.inflight.Done()
		case <-w.stopCh:
			return
		}
	}
}

// delivered reads the delivery count from a message's ack subject,
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending> or
// $JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.… , without
// the allocations of Metadata (once per run on the hot path). It reports
// false for any other shape.
func delivered(m jetstream.Msg) (uint64, bool) { return deliveredFrom(m.Reply()) }

func deliveredFrom(reply string) (uint64, bool) {
	tokens := strings.Count(reply, ".") + 1
	var at int
	switch {
	case tokens == 9:
		at = 4
	case tokens >= 11:
		at = 6
	default:
		return 0, false
	}
	for range at {
		i := strings.IndexByte(reply, '.')
		reply = reply[i+1:]
	}
	if i := strings.IndexByte(reply, '.'); i >= 0 {
		reply = reply[:i]
	}
	n, err := strconv.ParseUint(reply, 10, 64)
	return n, err == nil && n > 0
}

func (w *Worker) process(e *fnEntry, m jetstream.Msg) {
	ctx := context.Background()
	var md *jetstream.MsgMetadata
	metadata := func() (*jetstream.MsgMetadata, error) {
		if md != nil {
			return md, nil
		}
		var err error
		md, err = m.Metadata()
		return md, err
	}
	numDelivered, ok := delivered(m)
	if !ok {
		md, err := metadata()
		if err != nil {
			_ = m.Term()
			return
		}
		numDelivered = md.NumDelivered
	}
	env, perr := w.scfg.ParseMessage(m.Subject(), m.Headers(), m.Data())
	if perr == nil {
		if err := jetflow.ValidateRunID(env.ID); err != nil {
			perr = err
		} else if mid := m.Headers().Get(streams.HeaderMsgID); mid != "" && mid != env.MsgID() {
			perr = fmt.Errorf("Nats-Msg-Id %q does not match the run id %q of the subject", mid, env.ID)
		}
	}
	if perr == nil && (env.Scheduled.IsZero() || env.Created.IsZero()) {
		md, err := metadata()
		if err != nil {
			_ = m.Term()
			return
		}
		if env.Scheduled.IsZero() {
			env.Scheduled = md.Timestamp.UTC()
		}
		if env.Created.IsZero() {
			env.Created = md.Timestamp.UTC()
		}
	}
	if perr != nil {
		md, err := metadata()
		if err != nil {
			_ = m.Term()
			return
		}
		w.deadLetter(ctx, e, m, md, perr)
		return
	}
	j := &jobCore{w: w, fn: e, env: env}
	// The record as it must be if the message is current. Redeliveries,
	// messages of other producers (their ids may be reused) and runs whose
	// record has more than the message carries are checked against the
	// stored record first. A first delivery of ours is not: its message
	// names the record's revision, or says the id is new (Jetflow-New): the
	// message is then the pending record and the claim or outcome creates
	// the stored one (create-only: a Cancel that recorded it first wins).
	if w.swapMsg(env.ID, env.Attempt, m) {
		// A duplicate of a run running here, claimed or not (a
		// redelivery, a recreated consumer, a second publish): its outcome
		// acknowledges the newest message; the other is acknowledged when
		// redelivered, the run being over by then.
		return
	}
	if numDelivered > 1 || env.Reload || env.Rev == 0 && (!env.New || env.Attempt > 1) {
		ok := w.reconcile(ctx, j, m)
		if !ok {
			return
		}
	} else {
		j.rec = &jetflow.Run{
			ID: env.ID, Name: env.Function, Kind: e.kind, Args: env.Args, State: jetflow.Pending,
			ScheduledTime: env.Scheduled, CreationTime: env.Created, Attempts: env.Attempt - 1,
			MaxAttempts: env.MaxAttempts, Timeout: env.Timeout, Parent: env.Parent, Trace: env.Trace,
			Revision: env.Rev,
		}
		j.rev = env.Rev
	}
	if w.isCanceled(env.ID) {
		_ = m.Ack()
		return
	}
	j.started = w.now().UTC()
	// A redelivery is claimed before it starts: its first delivery may have
	// crashed its worker before a late claim, and from here on each lost
	// attempt counts (a handler that kills its process every time fails
	// after MaxAttempts instead of being redelivered forever).
	if e.claimFirst() || numDelivered > 1 && !e.opts.NoClaim {
		r := *j.rec
		r.State = jetflow.InProgress
		r.Attempts = env.Attempt
		r.StartedTime = j.started
		r.Owner = w.cfg.ID
		r.Heartbeat = j.started
		rev, err := w.writeRecord(ctx, &r, j.rev)
		if err != nil {
			// Canceled, or another worker claimed it: not ours to run.
			w.log.Debug("claim lost", "function", e.name, "run_id", env.ID, "error", err)
			if !errors.Is(err, kv.ErrConflict) {
				_ = m.NakWithDelay(time.Second)
				return
			}
			// Ack only what is over: the message may be the one another
			// worker is running now (acks go by stream sequence).
			if cur, gerr := w.store.Get(ctx, env.ID); gerr == nil && (cur.State.Terminal() || env.Attempt < cur.Attempts ||
				cur.State == jetflow.Pending && env.Attempt <= cur.Attempts) {
				_ = m.Ack()
			}
			return
		}
		r.Revision = rev
		j.rec, j.rev = &r, rev
	}
	w.execute(ctx, j, m)
}

// reconcile reads the stored record and decides whether the message is to be
// run. It acks and returns false for stale messages and runs already ended.
func (w *Worker) reconcile(ctx context.Context, j *jobCore, m jetstream.Msg) bool {
	env := j.env
	r, err := w.store.Get(ctx, env.ID)
	if errors.Is(err, jetflow.ErrNotFound) {
		// A run published by another producer: create its record.
		r = &jetflow.Run{
			ID: env.ID, Name: env.Function, Kind: j.fn.kind, Args: validJSON(env.Args), State: jetflow.Pending,
			ScheduledTime: env.Scheduled, CreationTime: env.Created, Attempts: env.Attempt - 1,
			MaxAttempts: env.MaxAttempts, Timeout: env.Timeout, Parent: env.Parent, Trace: env.Trace,
		}
		if _, err := w.store.Create(ctx, r); err != nil {
			_ = m.NakWithDelay(time.Second)
			return false
		}
	} else if err != nil {
		_ = m.NakWithDelay(time.Second)
		return false
	}
	if !r.State.Terminal() && env.Attempt < r.Attempts {
		// A message of an older attempt (a lost ack): that attempt is over.
		_ = m.Ack()
		return false
	}
	if r.State == jetflow.InProgress {
		if w.swapMsg(env.ID, env.Attempt, m) {
			return false // a duplicate delivery of a run running here
		}
		last := r.Heartbeat
		if r.StartedTime.After(last) {
			last = r.StartedTime
		}
		if r.Owner != "" && w.now().Sub(last) < w.cfg.LostAfter {
			// Its worker is alive (it heartbeats every AckWait/3): look again later.
			_ = m.NakWithDelay(w.cfg.AckWait / 2)
			return false
		}
	}
	switch {
	case r.State.Terminal():
		_ = m.Ack()
		return false
	case r.State == jetflow.InProgress && j.fn.kind == jetflow.AtMostOnce:
		// Claimed by a worker that is gone (or a zombie): never run twice.
		r.State = jetflow.Failed
		r.Error = jetflow.ErrWorkerLost.Error()
		r.CompletedTime = w.now().UTC()
		if _, err := w.store.Write(ctx, r, r.Revision); err == nil {
			telemetry.M().Failed.Add(ctx, 1, j.fn.attr)
			w.complete(ctx, r)
		}
		_ = m.Ack()
		return false
	case r.State == jetflow.InProgress && env.Attempt <= r.Attempts:
		// Taking over from a lost worker: its attempt counts, so a handler
		// that kills its process every time ends failed after MaxAttempts
		// instead of being redelivered forever.
		j.env.Attempt = r.Attempts + 1
		if j.env.Attempt > j.maxAttempts() {
			r.State, r.CompletedTime = jetflow.Failed, w.now().UTC()
			r.Error = fmt.Sprintf("%v: attempt %d lost, no attempts left", jetflow.ErrWorkerLost, r.Attempts)
			if _, err := w.store.Write(ctx, r, r.Revision); err == nil {
				telemetry.M().Failed.Add(ctx, 1, j.fn.attr)
				w.complete(ctx, r)
			}
			_ = m.Ack()
			return false
		}
	case env.Attempt <= r.Attempts && r.State == jetflow.Pending:
		// A message of an attempt that already ran; the next one is scheduled.
		_ = m.Ack()
		return false
	}
	j.rec, j.rev = r, r.Revision
	return true
}

func validJSON(b []byte) json.RawMessage {
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

// deadLetter records a message jetflow cannot use as a failed run with the
// reason, then terminates it, so nothing is silently dropped.
func (w *Worker) deadLetter(ctx context.Context, e *fnEntry, m jetstream.Msg, md *jetstream.MsgMetadata, reason error) {
	_, id, _ := w.scfg.ParseFunctionSubject(m.Subject())
	if jetflow.ValidateRunID(id) != nil || m.Headers().Get(streams.HeaderMsgID) != "" && m.Headers().Get(streams.HeaderMsgID) != id {
		id = fmt.Sprintf("dlq-%s-%d", md.Stream, md.Sequence.Stream)
	}
	now := w.now().UTC()
	r := &jetflow.Run{
		ID: id, Name: e.name, Kind: e.kind, Args: validJSON(m.Data()), State: jetflow.Failed,
		ScheduledTime: md.Timestamp.UTC(), CreationTime: md.Timestamp.UTC(), CompletedTime: now,
		Error: fmt.Sprintf("%v: subject %s: %v", jetflow.ErrBadMessage, m.Subject(), reason),
	}
	if old, err := w.store.Get(ctx, id); err == nil && !old.State.Terminal() {
		r.Revision = old.Revision
	}
	if _, err := w.store.Write(ctx, r, r.Revision); err != nil && !errors.Is(err, kv.ErrExists) {
		w.log.Warn("dead letter write failed", "function", e.name, "run_id", id, "error", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	w.log.Warn("bad message recorded as failed run", "function", e.name, "run_id", id, "reason", reason)
	telemetry.M().Failed.Add(ctx, 1, e.attr)
	_ = m.Term()
}

func (w *Worker) execute(bg context.Context, j *jobCore, m jetstream.Msg) {
	e, env := j.fn, j.env
	ctx := telemetry.Extract(bg, env.Trace)
	span := trace.SpanFromContext(ctx) // records nothing unless tracing is on
	if telemetry.Tracing() {
		ctx, span = telemetry.Tracer().Start(ctx, "jetflow.run "+e.name, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("jetflow.run_id", env.ID), attribute.Int("jetflow.attempt", env.Attempt)))
		defer span.End()
	}
	met := telemetry.M()
	met.Started.Add(ctx, 1, e.attr)
	met.Lateness.Record(ctx, j.started.Sub(env.Scheduled).Seconds(), e.attr)

	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timeout := e.opts.Timeout
	if env.Timeout > 0 {
		timeout = env.Timeout
	}
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	w.mu.Lock()
	w.running[env.ID] = &active{cancel: cancel, msg: m, job: j}
	if _, ok := w.canceled[env.ID]; ok {
		// The notice came after the check in process: cancel now.
		cancel(jetflow.ErrCanceled)
	}
	w.mu.Unlock()
	handedOff := false // to the asynchronous success write, which finishes it
	defer func() {
		if !handedOff {
			w.finish(j, m)
		}
	}()

	var herr error
	if timer == nil {
		herr = w.call(hctx, j)
	} else {
		// The handler may ignore its context: wait for it or the timeout.
		done := make(chan error, 1)
		go func() { done <- w.call(hctx, j) }()
		select {
		case herr = <-done:
		case <-timer:
			cancel(jetflow.ErrTimeout)
			herr = jetflow.Permanent(fmt.Errorf("%w after %s", jetflow.ErrTimeout, timeout))
		}
	}
	m = w.currentMsg(env.ID, m)
	if cause := context.Cause(hctx); errors.Is(cause, jetflow.ErrCanceled) {
		// Cancel already wrote the terminal record; anything else is discarded.
		met.Canceled.Add(ctx, 1, e.attr)
		w.releaseHeld(bg, j, false)
		_ = m.Ack()
		return
	} else if errors.Is(cause, errWorkerStopping) && herr != nil {
		// Stopping: leave the message for another worker, unharmed.
		w.releaseHeld(bg, j, false)
		_ = m.Nak()
		return
	}
	_ = j.flushProgress(bg)
	if herr == nil {
		handedOff = true
		w.succeed(j, m)
		return
	}
	span.RecordError(herr)
	span.SetStatus(codes.Error, herr.Error())
	w.fail(bg, j, m, herr)
}

// call runs the handler, turning a panic into a permanent failure with its
// stack.
func (w *Worker) call(ctx context.Context, j *jobCore) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = jetflow.Permanent(fmt.Errorf("%w: %v\n%s", jetflow.ErrPanic, p, debug.Stack()))
		}
	}()
	return j.fn.run(ctx, j)
}

// succeed writes the success of j's attempt; the write completes
// asynchronously (succeedAsync).
func (w *Worker) succeed(j *jobCore, m jetstream.Msg) {
	j.mu.Lock()
	r := j.rec // no other write of the record follows: it becomes the outcome
	r.State = jetflow.Success
	r.Attempts = j.env.Attempt
	r.CompletedTime = w.now().UTC()
	r.Error = ""
	r.HeldBy = ""
	r.Result = j.result
	r.Progress = j.progress
	r.Children = append([]string(nil), j.kids...)
	if r.StartedTime.IsZero() {
		r.StartedTime = j.started
	}
	rev := j.rev
	j.closed = true // no heartbeat or progress write may slip in before the outcome
	j.mu.Unlock()
	// The run stays in w.running until its outcome is stored, so that its
	// message keeps its heartbeat and a duplicate delivery finds it.
	w.inflight.Add(1)
	w.succeedAsync(j, m, r, rev)
}

// writeOutcome writes the outcome of an attempt (retried: a write of it may
// have landed already), retrying through a server
// restart or a leader election (the run stays in w.running meanwhile, so its
// message keeps its heartbeat): a handler that finished is not run again
// because the write of its outcome failed once. A conflict whose stored
// record is the one this worker wrote (a write that landed but whose reply
// was lost) counts as written.
func (w *Worker) writeOutcome(ctx context.Context, r *jetflow.Run, rev uint64, retried bool) (uint64, error) {
	delay := 50 * time.Millisecond
	deadline := w.now().Add(2 * time.Minute)
	for {
		n, err := w.writeRecord(ctx, r, rev)
		if err == nil {
			return n, nil
		}
		if errors.Is(err, kv.ErrConflict) {
			if retried {
				if cur, gerr := w.store.Get(ctx, r.ID); gerr == nil && sameOutcome(cur, r) {
					r.Revision = cur.Revision
					return cur.Revision, nil
				}
			}
			return 0, err
		}
		if w.isStopping() || w.now().After(deadline) {
			return 0, err
		}
		retried = true
		w.log.Debug("outcome write failed; retrying", "run_id", r.ID, "error", err)
		select {
		case <-time.After(delay):
		case <-w.stopCh:
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// writeRecord writes r over revision rev of its record; rev 0 creates the
// record (a run whose message was its only record so far). Losing the race
// is ErrConflict either way.
func (w *Worker) writeRecord(ctx context.Context, r *jetflow.Run, rev uint64) (uint64, error) {
	if rev != 0 {
		return w.store.Write(ctx, r, rev)
	}
	if r.State != jetflow.Success {
		// The args of a run published without a record are whatever its
		// producer sent; a success means the handler decoded them.
		r.Args = validJSON(r.Args)
	}
	n, err := w.store.Create(ctx, r)
	if errors.Is(err, kv.ErrExists) {
		return 0, fmt.Errorf("%w: %w", kv.ErrConflict, err)
	}
	return n, err
}

func sameOutcome(a, b *jetflow.Run) bool {
	return a.State == b.State && a.Attempts == b.Attempts && a.CompletedTime.Equal(b.CompletedTime) &&
		a.ScheduledTime.Equal(b.ScheduledTime) && a.Error == b.Error
}

// outcomeLost handles a terminal write that lost its compare-and-swap: the
// run was canceled, timed out elsewhere, or a newer attempt owns it. The
// newer state stands; this result is discarded.
func (w *Worker) outcomeLost(ctx context.Context, j *jobCore, m jetstream.Msg, err error) {
	if errors.Is(err, kv.ErrConflict) {
		w.log.Info("outcome discarded: run changed meanwhile", "function", j.fn.name, "run_id", j.env.ID, "attempt", j.env.Attempt)
		w.releaseHeld(ctx, j, false)
		_ = m.Ack()
		return
	}
	w.log.Warn("outcome write failed; run will be redelivered", "function", j.fn.name, "run_id", j.env.ID, "error", err)
	_ = m.NakWithDelay(time.Second)
}

// releaseHeld dispatches (commit) or cancels the children a retryable
// attempt scheduled.
func (w *Worker) releaseHeld(ctx context.Context, j *jobCore, commit bool) {
	if j.fn.kind == jetflow.AtMostOnce {
		return
	}
	j.mu.Lock()
	kids := append([]string(nil), j.kids...)
	j.mu.Unlock()
	for _, id := range kids {
		if commit {
			r, err := w.store.Get(ctx, id)
			if err != nil || r.State != jetflow.Pending {
				continue
			}
			if err := w.p.Release(ctx, r); err != nil {
				w.log.Warn("dispatch child; repair sweep will", "run_id", id, "error", err)
			}
			continue
		}
		_, _ = w.store.Transition(ctx, id, func(r *jetflow.Run) bool {
			if r.HeldBy == "" {
				return false
			}
			r.State = jetflow.Canceled
			r.Error = "parent attempt did not succeed"
			r.CompletedTime = w.now().UTC()
			return true
		})
	}
}

func (w *Worker) fail(ctx context.Context, j *jobCore, m jetstream.Msg, herr error) {
	met := telemetry.M()
	j.mu.Lock()
	r := *j.rec
	r.Attempts = j.env.Attempt
	r.Error = herr.Error()
	r.Progress = j.progress
	r.Children = append([]string(nil), j.kids...)
	if r.StartedTime.IsZero() {
		r.StartedTime = j.started
	}
	rev := j.rev
	j.closed = true // no heartbeat or progress write may slip in before the outcome
	j.mu.Unlock()
	var ra *jetflow.RetryAfterError
	retry := j.fn.kind == jetflow.Retryable && !jetflow.IsPermanent(herr) && j.env.Attempt < j.maxAttempts()
	if !retry {
		r.State = jetflow.Failed
		r.Permanent = jetflow.IsPermanent(herr)
		r.CompletedTime = w.now().UTC()
		if _, err := w.writeOutcome(ctx, &r, rev, false); err != nil {
			w.outcomeLost(ctx, j, m, err)
			return
		}
		met.Failed.Add(ctx, 1, j.fn.attr)
		w.releaseHeld(ctx, j, false)
		w.complete(ctx, &r)
		_ = m.Ack()
		return
	}
	delay := j.fn.opts.Backoff.Delay(j.env.Attempt)
	if errors.As(herr, &ra) {
		delay = ra.Delay
	}
	r.State = jetflow.Pending
	r.ScheduledTime = w.now().UTC().Add(delay)
	r.StartedTime = time.Time{}
	r.Children = nil
	newRev, err := w.writeOutcome(ctx, &r, rev, false)
	if err != nil {
		w.outcomeLost(ctx, j, m, err)
		return
	}
	r.Revision = newRev
	w.releaseHeld(ctx, j, false)
	if err := w.p.Dispatch(ctx, &r); err != nil {
		w.log.Warn("schedule retry; repair sweep will", "run_id", r.ID, "error", err)
	}
	met.Retried.Add(ctx, 1, j.fn.attr)
	_ = m.Ack()
}

// complete schedules the run's on-complete callback; the repair sweep covers
// a crash before it.
func (w *Worker) complete(ctx context.Context, r *jetflow.Run) {
	if r.OnComplete == nil {
		return
	}
	if err := w.p.Complete(ctx, r); err != nil {
		w.log.Warn("on-complete; repair sweep will", "run_id", r.ID, "error", err)
	}
}
