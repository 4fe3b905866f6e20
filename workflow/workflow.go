package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/nats-io/nuid"
)

// Errors. Each is matched with errors.Is.
var (
	// ErrNondeterministic: a replay reached a step whose journaled name or
	// kind differs from what the code asks now (the code changed under a
	// running workflow), or whose code ends before a step the journal
	// holds. The workflow fails with it; the error names the steps. Use
	// Patched to change a workflow's code safely.
	ErrNondeterministic = errors.New("workflow: nondeterministic replay")
	// ErrEventTimeout: AwaitEvent's timeout passed before an event came.
	ErrEventTimeout = errors.New("workflow: event timeout")
	// ErrBadRecord: the run under a workflow id is not that workflow's.
	ErrBadRecord = errors.New("workflow: not a record of this workflow")
	// ErrResultTooLarge: a step's result (a Step's value, a Call's or a
	// child workflow's result, an event's payload) larger than a journal
	// entry holds (the server's max payload less 4 KB). The step fails
	// with it (a *StepError, journaled as the step's failure), having run
	// once.
	ErrResultTooLarge = errors.New("workflow: result too large for the journal")
	// ErrInvalidEventName: an event name that is not one token of letters,
	// digits, '_' and '-'.
	ErrInvalidEventName = wfwire.ErrInvalidEventName
	// ErrInvalidStepName: a step name (Step's, or a Call's function name
	// as its step's name) longer than MaxStepName bytes or not valid
	// UTF-8 (the journal, JSON, would keep another name, and every replay
	// would find a step of another name). The workflow fails with it
	// before the step runs.
	ErrInvalidStepName = errors.New("workflow: invalid step name")
)

// MaxStepName is the longest step name, in bytes.
const MaxStepName = 1024

// Workflow is a workflow definition: a name and a function of In to Out,
// replayed from its journal. Producers and workers share one value, as
// they share a jetflow.Function.
type Workflow[In, Out any] struct {
	name string
	fn   func(wf *Context, in In) (Out, error)
}

// Define returns a workflow definition. It panics on an invalid name (one
// that jetflow.ValidateName refuses, or too long to carry the ".segment"
// and ".wake" suffixes of its internal functions), for package-level
// declarations:
//
//	var Onboard = workflow.Define("users.onboard", onboard)
func Define[In, Out any](name string, fn func(wf *Context, in In) (Out, error)) *Workflow[In, Out] {
	if err := jetflow.ValidateName(name); err != nil {
		panic(err)
	}
	if err := jetflow.ValidateName(SegmentFunction(name)); err != nil {
		panic(err)
	}
	if fn == nil {
		panic("workflow: Define " + name + " with a nil function")
	}
	return &Workflow[In, Out]{name: name, fn: fn}
}

// Name is the workflow's name: the name of its run record.
func (w *Workflow[In, Out]) Name() string { return w.name }

// SegmentFunction is the internal function whose runs execute workflow
// name's code: "<name>.segment".
func SegmentFunction(name string) string { return wfwire.SegmentFunction(name) }

// WakeFunction is the internal function that resumes a waiting workflow
// when a child run ends or a timer fires: "<name>.wake".
func WakeFunction(name string) string { return wfwire.WakeFunction(name) }

// run is the untyped form of the workflow function.
func (w *Workflow[In, Out]) run(wf *Context, raw json.RawMessage) (json.RawMessage, error) {
	var in In
	raw, err := wf.seg.resolve(raw)
	if err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, jetflow.Permanent(fmt.Errorf("%w: %v", jetflow.ErrBadArgs, err))
	}
	out, err := w.fn(wf, in)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("%w: result: %v", jetflow.ErrBadArgs, err)
	}
	return wf.seg.offload("result", b), nil
}

// definition is what the internal functions need of a Workflow.
type definition interface {
	Name() string
	run(wf *Context, raw json.RawMessage) (json.RawMessage, error)
}

// StartOption tunes one Start.
type StartOption func(*startOptions)

type startOptions struct {
	id         string
	at         time.Time
	after      time.Duration // After: resolved on the producer's clock at Start
	parent     string
	onComplete *jetflow.Call
	fork       *forkOf // Restart: the journal it copies, before the first segment
	event      []byte  // SendEventWithStart: stored before the first segment
	eventName  string
}

// WithID gives the workflow its id, an idempotency key: starting an id that
// exists returns that id and an error matching producer.ErrAlreadyExists.
// Default: a generated id.
func WithID(id string) StartOption { return func(o *startOptions) { o.id = id } }

// At starts the workflow at t instead of now (a past t means now).
func At(t time.Time) StartOption { return func(o *startOptions) { o.at, o.after = t, 0 } }

// After starts the workflow d after Start is called (on the producer's
// clock, producer.Config.Now).
func After(d time.Duration) StartOption {
	return func(o *startOptions) {
		if d > 0 {
			o.at, o.after = time.Time{}, d
		}
	}
}

// WithOnComplete runs c once when the workflow ends (success, failed or
// canceled), as producer.WithOnComplete does for a run: c's function
// receives a jetflow.Completion whose Run is the workflow's record.
func WithOnComplete(c jetflow.Call) StartOption { return func(o *startOptions) { o.onComplete = &c } }

// withParent records the workflow that started this one (child workflows).
func withParent(id string) StartOption { return func(o *startOptions) { o.parent = id } }

// segArgs are the arguments of a segment run.
type segArgs = wfwire.SegArgs

// wakeContext is the context of a wake run (child completion or timer).
type wakeContext = wfwire.WakeContext

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// SegmentID is the run id of segment n (from 1) of workflow id.
func SegmentID(id string, n int) string { return wfwire.SegmentID(id, n) }

func segmentCall(name string, a segArgs) jetflow.Call {
	return jetflow.Call{Name: SegmentFunction(name), Kind: jetflow.Retryable, Args: a}
}

func wakeCall(name, id string) jetflow.Call { return wfwire.WakeCall(name, id) }

func wakeCallback(name, id string) jetflow.Call {
	return jetflow.Call{Name: WakeFunction(name), Kind: jetflow.Retryable, Args: wakeContext{WF: id}}
}

// Start starts workflow def with input in and returns its id once the
// workflow is durable: its record is written, pending (the idempotency
// point), and its first segment published (or stored in the delayed store
// for At and After: a scheduler must run for a delayed start, as for any
// delayed run). Should Start die between the two, the scheduler's repair
// sweep publishes the first segment. Errors: jetflow.ErrBadArgs,
// producer.ErrArgsTooLarge (an input above 32 MiB; it matches
// jetflow.ErrBadArgs too; one above a quarter of the server's max payload
// goes to the payloads bucket, docs/wire-format.md "Large payloads"),
// jetflow.ErrInvalidRunID, ErrDefinitionInactive, producer.ErrAlreadyExists
// (with the id) when the id was started before.
func Start[In, Out any](ctx context.Context, p *producer.Producer, def *Workflow[In, Out], in In, opts ...StartOption) (string, error) {
	raw, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", jetflow.ErrBadArgs, def.name, err)
	}
	return start(ctx, p, def.name, raw, opts...)
}

// start starts a workflow; a request the server denies (a user without the
// workflows block of docs/permissions.md) fails it at once with the
// server's permissions violation, not at ctx's deadline.
func start(ctx context.Context, p *producer.Producer, name string, raw json.RawMessage, opts ...StartOption) (string, error) {
	var id string
	eng := engine.Of(p)
	err := natsperm.Do(ctx, eng.Conn(), func(ctx context.Context) error {
		var err error
		id, err = startWorkflow(ctx, p, name, raw, opts...)
		return err
	}, "$JS.", "$KV.", eng.Streams().WithDefaults().Prefix+".")
	return id, err
}

func startWorkflow(ctx context.Context, p *producer.Producer, name string, raw json.RawMessage, opts ...StartOption) (string, error) {
	var o startOptions
	for _, f := range opts {
		f(&o)
	}
	id := o.id
	if id == "" {
		id = nuid.Next()
	} else if err := jetflow.ValidateRunID(id); err != nil {
		return "", err
	}
	eng := engine.Of(p)
	// The producer's clock, as its Enqueue uses (a fixed one in the wire
	// format's vectors, streams/testdata/vectors).
	now := eng.Now().UTC()
	if o.after > 0 {
		o.at = now.Add(o.after)
	}
	sched := o.at.UTC()
	if o.at.IsZero() || sched.Before(now) {
		sched = now
	}
	raw, oerr := offloadInput(ctx, p, id, raw)
	if oerr != nil {
		return "", oerr
	}
	a := segArgs{WF: id, N: 1, Input: raw, Scheduled: sched, Created: now, Parent: o.parent}
	if o.fork != nil {
		a.Forked, a.Fork = true, o.fork.src
	}
	if o.onComplete != nil {
		cargs, err := o.onComplete.Encode()
		if err != nil {
			return "", fmt.Errorf("workflow: on-complete: %w", err)
		}
		a.OnComplete = &jetflow.Callback{Function: o.onComplete.Name, Args: cargs}
	}
	// The first segment's args carry the input (and the rest of a): a
	// segment the worker cannot take would be dead-lettered, and the
	// workflow's record would stay pending for good.
	segRaw := mustJSON(a)
	if max := eng.Conn().MaxPayload(); max > 0 && len(segRaw) > kv.ArgsLimit(max) {
		return "", fmt.Errorf("%w (%w): workflow %s: %d bytes of input, %d with its first segment's args, more than a run holds (%d)",
			producer.ErrArgsTooLarge, jetflow.ErrBadArgs, name, len(raw), len(segRaw), kv.ArgsLimit(max))
	}
	if _, err := startable(ctx, p, name); err != nil {
		return "", err
	}
	rec := recordOf(name, a)
	rec.Trace = telemetry.Inject(ctx)
	jr, err := openJournal(ctx, p)
	if err != nil {
		return "", err
	}
	// The record first, create-only: the idempotency point (Get, Watch and
	// Cancel find the workflow at once); then the first segment, without
	// a record of its own, published once, after the create that only one
	// Start wins. The repair sweep publishes it if this process dies
	// between the two.
	st := wfwire.Start{Record: rec, SegArgs: segRaw, CallerID: o.id != "", Event: o.event, EventName: o.eventName}
	if o.fork != nil {
		st.Fork = forkHook(p, o.fork, id)
	}
	err = st.Do(ctx, eng, jr.kv)
	switch {
	case errors.Is(err, kv.ErrExists):
		return id, fmt.Errorf("workflow %s: %w", id, producer.ErrAlreadyExists)
	case errors.Is(err, wfwire.ErrNotPublished):
		return id, err
	case err != nil:
		return "", err
	}
	return id, nil
}

// recordOf is the pending record of a workflow, from its first segment's args.
func recordOf(name string, a segArgs) *jetflow.Run { return wfwire.RecordOf(name, a) }
