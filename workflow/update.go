package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/producer"
)

// Update sends update name with input in to workflow id and waits, until
// ctx ends (its deadline is the update's timeout), for its answer, decoded
// into Out. The update is stored in the journal like an event and resumes
// the workflow; its code takes it at its next AwaitUpdate of that name,
// validates it, handles it, journals it, and then answers: an answered
// update is never handled again. Errors: producer.ErrNotWorkflow, ErrEnded,
// ErrInvalidEventName (the name), producer.ErrArgsTooLarge,
// ErrUpdateRejected (the validator refused it: nothing changed), the
// handler's error (errors.Is-able through its code, as for Result),
// ErrUpdateTimeout (once stored, any failure to get the answer: ctx ended
// first, the resume or the answer's watch failed, or its store went
// unanswered; the update stays stored and may still be handled, so
// sending it again may apply it twice). A store whose reply is lost is
// made again on the same key, so one call stores the update once; any
// other error means nothing was stored, and the update may be sent again.
func Update[In, Out any](ctx context.Context, p *producer.Producer, id, name string, in In) (Out, error) {
	var out Out
	raw, err := json.Marshal(in)
	if err != nil {
		return out, fmt.Errorf("%w: update %s: %v", jetflow.ErrBadArgs, name, err)
	}
	var a *wfwire.Answer
	err = watchDenied(ctx, p, func(ctx context.Context) error {
		a, err = sendUpdate(ctx, p, id, name, raw)
		return err
	})
	if err != nil {
		return out, err
	}
	if err := a.Err(errorOfCode); err != nil {
		return out, err
	}
	if len(a.Result) > 0 {
		if err := json.Unmarshal(a.Result, &out); err != nil {
			return out, fmt.Errorf("%w: workflow %s: update %s: %v", jetflow.ErrBadArgs, id, name, err)
		}
	}
	return out, nil
}

func sendUpdate(ctx context.Context, p *producer.Producer, id, name string, raw json.RawMessage) (*wfwire.Answer, error) {
	if err := validEventName(name); err != nil {
		return nil, err
	}
	if limit := wfwire.EventLimit(engine.Of(p).Conn().MaxPayload()); len(raw) > limit {
		return nil, fmt.Errorf("%w: update %s: %d bytes of input, more than an await's journal entry holds (%d)",
			producer.ErrArgsTooLarge, name, len(raw), limit)
	}
	r, err := p.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !wfwire.IsWorkflow(r) {
		return nil, fmt.Errorf("run %s (%s): %w", id, r.Name, producer.ErrNotWorkflow)
	}
	if r.State.Terminal() {
		return nil, fmt.Errorf("workflow %s is %s: %w", id, r.State, ErrEnded)
	}
	jr, err := openJournal(ctx, p)
	if err != nil {
		return nil, err
	}
	return wfwire.SendUpdate(ctx, jr.kv, id, name, raw, time.Now(), func(ctx context.Context) error {
		return resume(ctx, p, jr, r.Name, id)
	})
}

// AwaitUpdate waits for an update named name (Update) and handles it:
// validate (nil: every update is valid) refuses one with an error, which
// its caller gets as ErrUpdateRejected, and the await goes on to the
// next; handle runs for a valid one, in the workflow's code (it may change
// the workflow's state: it runs again, with the same input, on every
// replay), and its result or error is the caller's answer, sent once the
// update is journaled. It returns handle's error. timeout as AwaitEvent's:
// ErrEventTimeout when no valid update came in time.
func AwaitUpdate[In, Out any](wf *Context, name string, timeout time.Duration, handle func(in In) (Out, error), validate func(in In) error) error {
	if err := validEventName(name); err != nil {
		wf.seg.failWorkflow(err)
	}
	id := wf.begin()
	_, err := untilEnded(func() (struct{}, bool, error) { return awaitUpdate(wf, id, name, timeout, handle, validate) })
	return err
}

// awaitUpdate is AwaitUpdate's check of step id: it ends it (an update
// handled, or the timeout), or waits (ended false once resumed).
func awaitUpdate[In, Out any](wf *Context, id, name string, timeout time.Duration, handle func(in In) (Out, error), validate func(in In) error) (struct{}, bool, error) {
	s := wf.seg
	e := wf.entry(id, name, KindUpdate)
	if e != nil && e.ended() {
		return ended(struct{}{}, replayUpdate(wf, e, handle))
	}
	if e == nil {
		w := &Waits{Event: name}
		if timeout != 0 {
			w.Until = time.Now().Add(max(timeout, 0)).UTC()
		}
		e = s.put(&Entry{Step: id, Name: name, Kind: KindUpdate, State: StepWaiting, Started: time.Now().UTC(), Waits: w})
		if e.ended() {
			return ended(struct{}{}, replayUpdate(wf, e, handle))
		}
	}
	ups, err := s.jr.updates(s.ctx, s.wf, name, s.readFloor(KindUpdate, name, id))
	if err != nil {
		s.abort(err)
	}
	for _, up := range ups {
		in, ok := takeUpdate(s, id, up, validate)
		if !ok {
			continue
		}
		e.State, e.Result, e.Completed = StepDone, up.Payload, time.Now().UTC()
		e.Waits.Seq, e.Waits.Update = up.seq, wfwire.UpdateUnique(up.key)
		s.put(e)
		out, herr := handle(in)
		s.answer(e.Waits.Update, out, herr)
		return ended(struct{}{}, herr)
	}
	until := e.Waits.Until
	if !until.IsZero() && !time.Now().Before(until) {
		e.State, e.Code, e.Completed = StepFailed, codeEventTimeout, time.Now().UTC()
		e.Error = fmt.Sprintf("%v: no update %q within %s", ErrEventTimeout, name, until.Sub(e.Started).Round(time.Millisecond))
		return ended(outcome[struct{}](wf, s.put(e)))
	}
	if !until.IsZero() {
		s.timer(id, until)
	}
	wf.suspend(wait{step: id, kind: KindUpdate, event: name, until: until})
	return struct{}{}, false, nil
}

// takeUpdate claims update up for step id: its input when it is valid;
// an invalid one is claimed for nobody ("-") and answered rejected.
func takeUpdate[In any](s *segment, id string, up event, validate func(in In) error) (In, bool) {
	var in In
	s.mu.Lock()
	owner, claimed := s.claims[up.seq]
	s.mu.Unlock()
	if claimed && owner != id {
		return in, false
	}
	payload := up.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	verr := json.Unmarshal(payload, &in)
	if verr == nil && validate != nil {
		verr = validate(in)
	}
	if verr != nil {
		if ok, err := s.jr.claim(s.ctx, s.wf, up.seq, "-"); err != nil {
			s.abort(err)
		} else if ok {
			s.answerErr(wfwire.UpdateUnique(up.key), &wfwire.Answer{
				Error: fmt.Sprintf("%v: %v", ErrUpdateRejected, verr), Code: wfwire.CodeRejected})
		}
		return in, false
	}
	ok, err := s.jr.claim(s.ctx, s.wf, up.seq, id)
	if err != nil {
		s.abort(err)
	}
	if ok {
		s.addClaim(up.seq, id)
	}
	return in, ok
}

// replayUpdate replays an update's handling from its journal entry: the
// handler runs again with the journaled input (the workflow's state is
// rebuilt); a segment retried after it journaled the update answers again
// (the answer may not have been written).
func replayUpdate[In, Out any](wf *Context, e *Entry, handle func(in In) (Out, error)) error {
	if e.State == StepFailed {
		_, err := outcome[struct{}](wf, e)
		return err
	}
	var in In
	if err := json.Unmarshal(e.Result, &in); err != nil {
		wf.seg.failWorkflow(fmt.Errorf("%w: step %s (update %q): input %s: %v", jetflow.ErrBadArgs, e.Step, e.Name, e.Result, err))
	}
	out, herr := handle(in)
	if s := wf.seg; !s.readOnly && e.Segment == s.n && e.Waits != nil {
		s.answer(e.Waits.Update, out, herr)
	}
	return herr
}

// answer writes the answer to update unique: handle's result or error.
func (s *segment) answer(unique string, out any, herr error) {
	a := &wfwire.Answer{}
	if herr != nil {
		a.Error, a.Code = herr.Error(), codeOf(herr)
	} else if b, err := json.Marshal(out); err != nil {
		a.Error, a.Code = fmt.Sprintf("%v: update result: %v", jetflow.ErrBadArgs, err), codeBadArgs
	} else {
		a.Result = b
	}
	s.answerErr(unique, a)
}

// answerErr writes answer a to update unique; an error stops the segment
// (retried: its replay answers again).
func (s *segment) answerErr(unique string, a *wfwire.Answer) {
	b, _ := json.Marshal(a)
	if _, err := s.jr.kv.Put(s.ctx, wfwire.AnswerKey(s.wf, unique), b); err != nil {
		s.abort(fmt.Errorf("workflow %s: answer update %s: %w", s.wf, unique, err))
	}
}
