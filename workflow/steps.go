package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
)

// StepError is the error of a step that failed, as the journal keeps it:
// on replay the workflow gets the same error back. errors.Is matches
// ErrEventTimeout, jetflow.ErrWorkerLost, jetflow.ErrCanceled,
// ErrResultTooLarge, producer.ErrArgsTooLarge or jetflow.ErrBadArgs (a
// call or child workflow refused for its args), jetflow.ErrInvalidName (a
// call of a function whose name is not valid) and ErrDefinitionInactive
// (a child workflow of a deprecated or deleted definition) through it,
// and, for an inline step, any sentinel given to RegisterError that the
// step's error matched.
type StepError struct {
	Step string
	Name string
	Kind StepKind
	Msg  string
	code string
}

func (e *StepError) Error() string { return e.Msg }

// Unwrap returns the sentinel the step's failure stands for, if any (see
// RegisterError).
func (e *StepError) Unwrap() error { return errorOfCode(e.code) }

// outcome turns an ended entry into the step's return values.
func outcome[T any](wf *Context, e *Entry) (T, error) {
	var v T
	if e.State == StepFailed {
		return v, &StepError{Step: e.Step, Name: e.Name, Kind: e.Kind, Msg: e.Error, code: e.Code}
	}
	res, err := wf.seg.resolve(e.Result)
	if err != nil {
		wf.seg.failWorkflow(fmt.Errorf("step %s (%s %q): result: %w", e.Step, e.Kind, e.Name, err))
	}
	if len(res) > 0 {
		if err := json.Unmarshal(res, &v); err != nil {
			wf.seg.failWorkflow(fmt.Errorf("%w: step %s (%s %q): result %s: %v", jetflow.ErrBadArgs, e.Step, e.Kind, e.Name, e.Result, err))
		}
	}
	return v, nil
}

// StepOptions tune an inline step.
type StepOptions struct {
	// Kind: jetflow.Retryable (default) journals the step's outcome once;
	// if the segment dies before, the step runs again on replay.
	// jetflow.AtMostOnce journals "started" before it runs; a replay that
	// finds it started without an outcome fails it with
	// jetflow.ErrWorkerLost instead of running it again.
	Kind jetflow.Kind
	// MaxAttempts of the step in this segment, first included. Default 1.
	// AtMostOnce steps have one.
	MaxAttempts int
	// Backoff between attempts (jetflow.Backoff defaults: 1 s initial, base
	// 2, max 1 h, full jitter). An error made by jetflow.Permanent stops
	// retrying.
	Backoff jetflow.Backoff
}

// Step runs fn inline, in the segment, and journals its outcome: on replay
// it returns the journaled result (or error) without running fn. fn gets
// the segment's context (canceled with cause jetflow.ErrCanceled when the
// workflow is canceled). name identifies the step in the journal: replay
// checks it.
func Step[T any](wf *Context, name string, fn func(ctx context.Context) (T, error), opts ...StepOptions) (T, error) {
	var o StepOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	s := wf.seg
	id := wf.begin()
	e := wf.entry(id, name, KindStep)
	if e != nil && e.ended() {
		return outcome[T](wf, e)
	}
	atMostOnce := o.Kind == jetflow.AtMostOnce
	if e != nil && e.State == StepStarted {
		// Started by a segment that died before journaling its outcome.
		e.State, e.Code, e.Completed = StepFailed, codeWorkerLost, time.Now().UTC()
		e.Error = fmt.Sprintf("%v: at-most-once step %s %q started in segment %d, no outcome", jetflow.ErrWorkerLost, id, name, e.Segment)
		return outcome[T](wf, s.put(e))
	}
	ne := &Entry{Step: id, Name: name, Kind: KindStep, Started: time.Now().UTC()}
	if atMostOnce {
		ne.State, ne.Attempts = StepStarted, 1
		if stored := s.put(ne); stored != ne {
			if stored.ended() {
				return outcome[T](wf, stored)
			}
			// Another writer started it: never run it twice.
			stored.State, stored.Code, stored.Completed = StepFailed, codeWorkerLost, time.Now().UTC()
			stored.Error = fmt.Sprintf("%v: at-most-once step %s %q started elsewhere", jetflow.ErrWorkerLost, id, name)
			return outcome[T](wf, s.put(stored))
		}
	}
	maxAttempts := max(o.MaxAttempts, 1)
	if atMostOnce {
		maxAttempts = 1
	}
	ctx := s.ctx
	var v T
	var err error
	for attempt := 1; ; attempt++ {
		v, err = callStep(ctx, fn)
		ne.Attempts = attempt
		if noRetry(err, attempt, maxAttempts) || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(o.Backoff.Delay(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if ctx.Err() != nil {
		// Canceled or stopping: nothing is journaled (an at-most-once step
		// stays started, and fails as lost if it is ever replayed).
		s.abort(context.Cause(ctx))
	}
	ne.Completed = time.Now().UTC()
	if err != nil {
		ne.State, ne.Error, ne.Code = StepFailed, err.Error(), codeOf(err)
	} else {
		b, merr := json.Marshal(v)
		if merr != nil {
			ne.State, ne.Error = StepFailed, fmt.Sprintf("%v: result: %v", jetflow.ErrBadArgs, merr)
		} else {
			ne.State, ne.Result = StepDone, b
		}
	}
	return outcome[T](wf, s.put(ne))
}

func callStep[T any](ctx context.Context, fn func(context.Context) (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = jetflow.Permanent(fmt.Errorf("%w: %v", jetflow.ErrPanic, p))
		}
	}()
	return fn(ctx)
}

// runID is the id of a run a step starts: "<workflow>-<what><step>".
func runID(wf, what, step string) string {
	return jetflow.DerivedID(wf + "-" + what + strings.ReplaceAll(step, ".", "_"))
}

// Call calls a function as a child run on the worker fleet, with that
// function's kind, retries and timeout, and returns its result (what its
// handler gave SetResult) decoded into T. The workflow waits for the run
// durably (its goroutine at most in its worker's bounded cache of
// executions): the run's completion resumes it. A failed
// run returns a *StepError with its error; a canceled one matches
// jetflow.ErrCanceled.
//
//	receipt, err := workflow.Call[Receipt](wf, Charge.With(ChargeArgs{Amount: 42}))
func Call[T any](wf *Context, c jetflow.Call) (T, error) {
	id := wf.begin()
	return untilEnded(func() (T, bool, error) { return call[T](wf, id, c) })
}

// call is Call's check of step id: it ends it, or starts its run and
// waits (ended false once resumed).
func call[T any](wf *Context, id string, c jetflow.Call) (T, bool, error) {
	s := wf.seg
	e := wf.entry(id, c.Name, KindCall)
	if e != nil && e.ended() {
		return ended(outcome[T](wf, e))
	}
	run := runID(s.wf, "call", id)
	if e == nil {
		e = s.put(&Entry{Step: id, Name: c.Name, Kind: KindCall, State: StepWaiting, Started: time.Now().UTC(), Waits: &Waits{Run: run}})
		if e.ended() {
			return ended(outcome[T](wf, e))
		}
	}
	return awaitRun[T](wf, e, func(ctx context.Context) error {
		_, err := s.d.p.Enqueue(ctx, c, producer.WithID(run), producer.WithParent(s.wf),
			producer.WithOnComplete(wakeCallback(s.def.Name(), s.wf)))
		return err
	})
}

// ended is a step's outcome, ended (untilEnded).
func ended[T any](v T, err error) (T, bool, error) { return v, true, err }

// awaitRun finishes a waiting step whose run has ended, or starts the run
// if it is not there yet and suspends (ended false once resumed).
func awaitRun[T any](wf *Context, e *Entry, start func(ctx context.Context) error) (T, bool, error) {
	s := wf.seg
	run := e.Waits.Run
	// Its record (a call's and a child workflow's are written before
	// their message): see armTimer.
	r, err := engine.Of(s.d.p).Store().Show(s.ctx, run)
	switch {
	case errors.Is(err, jetflow.ErrNotFound):
		// Once started, a run is listed among the workflow's children
		// even if a Cancel ends the segment's context meanwhile (adopt
		// then cancels it): it is never left running, orphaned.
		sctx, cancel := s.detached()
		err := start(sctx)
		cancel()
		if code := refused(err); code != "" {
			// Args that no retry makes acceptable: the step fails.
			e.State, e.Error, e.Code, e.Completed = StepFailed, err.Error(), code, time.Now().UTC()
			return ended(outcome[T](wf, s.put(e)))
		}
		if err != nil && !errors.Is(err, producer.ErrAlreadyExists) {
			s.abort(err)
		}
		s.adopt(run)
	case err != nil:
		s.abort(err)
	case r.State.Terminal():
		e.Completed = time.Now().UTC()
		switch r.State {
		case jetflow.Success:
			e.State, e.Result = StepDone, r.Result
		case jetflow.Canceled:
			e.State, e.Error, e.Code = StepFailed, r.Error, codeCanceled
		default:
			e.State, e.Error = StepFailed, r.Error
		}
		e.Attempts = r.Attempts
		return ended(outcome[T](wf, s.put(e)))
	default:
		s.adopt(run) // again: a segment that died before may not have
	}
	wf.suspend(wait{step: e.Step, kind: e.Kind, run: run})
	var zero T
	return zero, false, nil
}

// refused returns the error code of a run or child workflow refused for
// its args (larger than a run holds, or not encodable), its function's
// name, or its definition's state (deprecated or deleted), whose start
// would be refused again: "" for any other err. Retrying the segment
// would replay into the same refusal for as long as its attempts last,
// the workflow stuck meanwhile.
func refused(err error) string {
	switch {
	case errors.Is(err, jetflow.ErrInvalidName):
		return codeInvalidName
	case errors.Is(err, ErrDefinitionInactive):
		return codeInactive
	case errors.Is(err, producer.ErrArgsTooLarge):
		return codeArgsTooLarge
	case errors.Is(err, jetflow.ErrBadArgs):
		return codeBadArgs
	}
	return ""
}

// Sleep suspends the workflow for d, durably: a timer run in the delayed
// store resumes it (a scheduler must run), and nothing stays in memory
// but the execution its worker may keep (sticky execution, bounded). On
// replay the wake time is the journaled one.
func (wf *Context) Sleep(d time.Duration) { wf.sleep(time.Now().Add(d)) }

// SleepUntil suspends the workflow until t (see Sleep).
func (wf *Context) SleepUntil(t time.Time) { wf.sleep(t) }

func (wf *Context) sleep(t time.Time) {
	id := wf.begin()
	for !wf.slept(id, t) {
	}
}

// slept is sleep's check of step id: it reports whether the sleep ended,
// or arms its timer and waits (false once resumed).
func (wf *Context) slept(id string, t time.Time) bool {
	s := wf.seg
	e := wf.entry(id, "sleep", KindSleep)
	if e != nil && e.ended() {
		return true
	}
	if e == nil && !streams.TimeFits(t) {
		if now := time.Now(); t.Before(now) {
			t = now // the past: no sleep
		} else {
			// Neither the journal nor a timer's record holds it: the
			// segment would be retried into the same refusal.
			s.failWorkflow(jetflow.Permanent(fmt.Errorf("%w: step %s (sleep): until %s: a timer holds years 0 through 9999",
				jetflow.ErrBadArgs, id, t.UTC().Format(time.RFC3339))))
		}
	}
	if e == nil {
		e = s.put(&Entry{Step: id, Name: "sleep", Kind: KindSleep, State: StepWaiting, Started: time.Now().UTC(), Waits: &Waits{Until: t.UTC()}})
		if e.ended() {
			return true
		}
	}
	until := e.Waits.Until
	if !time.Now().Before(until) {
		e.State, e.Completed = StepDone, time.Now().UTC()
		s.put(e)
		return true
	}
	s.timer(id, until)
	wf.suspend(wait{step: id, kind: KindSleep, until: until})
	return false
}

// timer makes sure a wake run is due at until for step id: the step's
// timer, or, when that one has fired already (early, by the clocks), one
// of this segment's.
func (s *segment) timer(step string, until time.Time) {
	base := runID(s.wf, "timer", step)
	for _, id := range []string{base, jetflow.DerivedID(fmt.Sprintf("%s-%d", base, s.n))} {
		fired, err := s.armTimer(id, until)
		if err != nil {
			s.abort(err)
		}
		if !fired {
			return
		}
	}
}

// armTimer creates timer id, a wake run due at until among the workflow's
// children, unless it exists; it reports whether the timer has fired
// (ended). A timer has a record from its creation on (RunAt with an id):
// its record is all there is to read (a Get of a run that has none would
// look for a message in every function's subjects, a wildcard lookup whose
// cost grows with the messages queued: the first segments of thousands of
// workflows starting).
func (s *segment) armTimer(id string, until time.Time) (fired bool, err error) {
	st := engine.Of(s.d.p).Store()
	r, err := st.Show(s.ctx, id)
	if err == nil {
		return r.State.Terminal(), nil
	}
	if !errors.Is(err, jetflow.ErrNotFound) {
		return false, err
	}
	sctx, cancel := s.detached()
	_, err = s.d.p.RunAt(sctx, until, wakeCall(s.def.Name(), s.wf), producer.WithID(id), producer.WithParent(s.wf))
	cancel()
	if errors.Is(err, producer.ErrAlreadyExists) {
		// There after all (a replica behind answered the get): the
		// leader says whether it fired.
		if r, _, err = st.Decide(s.ctx, id); err != nil {
			return false, err
		}
		if r.State.Terminal() {
			return true, nil
		}
	} else if err != nil {
		return false, err
	}
	s.adopt(id)
	return false, nil
}

// AwaitEvent waits for an event named name sent to this workflow
// (SendEvent) and returns its payload decoded into T. Events sent before
// the await are kept; each event is consumed by exactly one await (the
// journal records which), in the order they were sent. With timeout > 0,
// an await that gets no event in time returns an error matching
// ErrEventTimeout. A negative timeout does not wait: it consumes an event
// sent already, or returns ErrEventTimeout ("unless an event arrived").
func AwaitEvent[T any](wf *Context, name string, timeout time.Duration) (T, error) {
	if err := validEventName(name); err != nil {
		wf.seg.failWorkflow(err)
	}
	id := wf.begin()
	return untilEnded(func() (T, bool, error) { return awaitEvent[T](wf, id, name, timeout) })
}

// awaitEvent is AwaitEvent's check of step id: it ends it (an event, or
// the timeout), or waits (ended false once resumed).
func awaitEvent[T any](wf *Context, id, name string, timeout time.Duration) (T, bool, error) {
	s := wf.seg
	e := wf.entry(id, name, KindEvent)
	if e != nil && e.ended() {
		return ended(outcome[T](wf, e))
	}
	if e == nil {
		w := &Waits{Event: name}
		if timeout != 0 {
			w.Until = time.Now().Add(max(timeout, 0)).UTC()
		}
		e = s.put(&Entry{Step: id, Name: name, Kind: KindEvent, State: StepWaiting, Started: time.Now().UTC(), Waits: w})
		if e.ended() {
			return ended(outcome[T](wf, e))
		}
	}
	evs, err := s.jr.events(s.ctx, s.wf, name, s.readFloor(KindEvent, name, id))
	if err != nil {
		s.abort(err)
	}
	for _, ev := range evs {
		s.mu.Lock()
		owner, claimed := s.claims[ev.seq]
		s.mu.Unlock()
		if claimed && owner != id {
			continue
		}
		ok, err := s.jr.claim(s.ctx, s.wf, ev.seq, id)
		if err != nil {
			s.abort(err)
		}
		if !ok {
			continue
		}
		s.addClaim(ev.seq, id)
		e.State, e.Result, e.Completed = StepDone, ev.Payload, time.Now().UTC()
		e.Waits.Seq = ev.seq
		return ended(outcome[T](wf, s.put(e)))
	}
	until := e.Waits.Until
	if !until.IsZero() && !time.Now().Before(until) {
		e.State, e.Code, e.Completed = StepFailed, codeEventTimeout, time.Now().UTC()
		e.Error = fmt.Sprintf("%v: no event %q within %s", ErrEventTimeout, name, until.Sub(e.Started).Round(time.Millisecond))
		return ended(outcome[T](wf, s.put(e)))
	}
	if !until.IsZero() {
		s.timer(id, until)
	}
	wf.suspend(wait{step: id, kind: KindEvent, event: name, until: until})
	var zero T
	return zero, false, nil
}

func validEventName(name string) error { return wfwire.ValidEventName(name) }

// RunChild starts workflow def as a child of this one and waits for its
// result. Canceling this workflow cancels the child.
func RunChild[In, Out any](wf *Context, def *Workflow[In, Out], in In) (Out, error) {
	id := wf.begin()
	return untilEnded(func() (Out, bool, error) { return runChild(wf, id, def, in) })
}

// runChild is RunChild's check of step id: it ends it, or starts the
// child and waits (ended false once resumed).
func runChild[In, Out any](wf *Context, id string, def *Workflow[In, Out], in In) (Out, bool, error) {
	s := wf.seg
	e := wf.entry(id, def.name, KindChild)
	if e != nil && e.ended() {
		return ended(outcome[Out](wf, e))
	}
	child := runID(s.wf, "wf", id)
	if e == nil {
		e = s.put(&Entry{Step: id, Name: def.name, Kind: KindChild, State: StepWaiting, Started: time.Now().UTC(), Waits: &Waits{Run: child}})
		if e.ended() {
			return ended(outcome[Out](wf, e))
		}
	}
	return awaitRun[Out](wf, e, func(ctx context.Context) error {
		_, err := Start(ctx, s.d.p, def, in, WithID(child), withParent(s.wf), WithOnComplete(wakeCallback(s.def.Name(), s.wf)))
		return err
	})
}

// StartChild starts workflow def as a child of this one without waiting
// for it and returns its id. Canceling this workflow cancels the child.
func StartChild[In, Out any](wf *Context, def *Workflow[In, Out], in In) (string, error) {
	s := wf.seg
	id := wf.begin()
	e := wf.entry(id, def.name, KindChild)
	if e != nil && e.ended() {
		return outcome[string](wf, e)
	}
	child := runID(s.wf, "wf", id)
	sctx, cancel := s.detached()
	_, err := Start(sctx, s.d.p, def, in, WithID(child), withParent(s.wf))
	cancel()
	now := time.Now().UTC()
	if code := refused(err); code != "" {
		return outcome[string](wf, s.put(&Entry{Step: id, Name: def.name, Kind: KindChild, State: StepFailed, Started: now, Completed: now,
			Error: err.Error(), Code: code, Waits: &Waits{Run: child}}))
	}
	if err != nil && !errors.Is(err, producer.ErrAlreadyExists) {
		s.abort(err)
	}
	s.adopt(child)
	b, _ := json.Marshal(child)
	return outcome[string](wf, s.put(&Entry{Step: id, Name: def.name, Kind: KindChild, State: StepDone, Started: now, Completed: now, Result: b, Waits: &Waits{Run: child}}))
}

// Patched reports whether this execution runs the code after patch id
// (DBOS's and Temporal's versioning): true for executions that reach this
// point after the patch was deployed, false for those whose journal
// already holds another step here (they started with the old code). A
// patched execution journals a marker, so its replays say true again.
//
//	if workflow.Patched(wf, "send-sms") {
//		_, err = workflow.Call[struct{}](wf, SendSMS.With(args))
//	} else {
//		_, err = workflow.Call[struct{}](wf, SendEmail.With(args))
//	}
func Patched(wf *Context, patch string) bool {
	s := wf.seg
	id := wf.peek()
	e := s.entryAt(id)
	if e != nil && (e.Kind != KindPatch || e.Name != patch) {
		return false
	}
	wf.begin()
	s.visit(id)
	if e == nil {
		s.stopReadOnly()
		now := time.Now().UTC()
		s.put(&Entry{Step: id, Name: patch, Kind: KindPatch, State: StepDone, Started: now, Completed: now, Result: json.RawMessage("true")})
	}
	return true
}

// Future is the result of a branch started with Go.
type Future[T any] struct {
	b   *branch
	v   T
	err error
}

// Go runs fn in a branch of its own, in parallel with the caller: steps in
// it get ids from the branch's place in the caller's program order and
// their order within the branch, never from goroutine scheduling, so a
// replay finds the same steps. Workflow code must not share state between
// branches other than through their results, and must not block on
// anything but steps and Futures.
func Go[T any](wf *Context, fn func(wf *Context) (T, error)) *Future[T] {
	id := wf.begin()
	child := &Context{seg: wf.seg, path: id}
	f := &Future[T]{}
	f.b = wf.seg.x.spawn(child, func() (json.RawMessage, error) {
		f.v, f.err = fn(child)
		return nil, f.err
	})
	return f
}

// Get waits for the branch and returns its result. If the branch waits
// (a sleep, a call, an event), the caller waits too: the workflow resumes
// from the journal when it can go on.
func (f *Future[T]) Get() (T, error) {
	f.b.x.await(f.b)
	if !f.b.out.returned {
		runtime.Goexit()
	}
	return f.v, f.err
}

func (f *Future[T]) wait() error {
	_, err := f.Get()
	return err
}

// Waiter is a Future of any type, for Wait.
type Waiter interface{ wait() error }

// Wait waits for every future and returns the first error among them, in
// argument order.
func Wait(futures ...Waiter) error {
	var first error
	for _, f := range futures {
		if err := f.wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Now returns the current time, journaled: a replay gets the same time
// back. Workflow code must not read the clock itself for decisions.
func Now(wf *Context) time.Time {
	t, _ := Step(wf, "now", func(context.Context) (time.Time, error) { return time.Now().UTC(), nil })
	return t
}

// noRetry reports whether a step's attempt that returned err is its last:
// it succeeded, it was the last of maxAttempts, or its error is permanent.
func noRetry(err error, attempt, maxAttempts int) bool {
	return err == nil || attempt >= maxAttempts || jetflow.IsPermanent(err)
}
