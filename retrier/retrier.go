package retrier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nuid"
)

// Names of the retrier's internal functions and of its record.
const (
	// StartFunction writes the retrier's record and enqueues the first
	// attempt.
	StartFunction = "jetflow.retrier.start"
	// StepFunction runs when an attempt ends: it finishes the retrier or
	// schedules the next attempt.
	StepFunction = "jetflow.retrier.step"
	// StartedFunction runs when a start run ends (its on-complete
	// callback): a start run canceled or failed ends the retrier canceled
	// or failed, so that its callback runs.
	StartedFunction = "jetflow.retrier.started"
	// RecordName is the function name on the retrier's own record. No worker
	// serves it: the record is written by the retrier, never dispatched.
	RecordName = "jetflow.retrier.run"
)

// Errors.
var (
	// ErrBadRecord: a record under a retrier id is not a retrier's.
	ErrBadRecord = errors.New("retrier: not a retrier record")
	// ErrInvalidOptions: Options that Run refuses (a MaxFailures below
	// NoRetries or above MaxFailuresLimit). The root package's ErrInvalid*
	// errors are about names and run ids, so the retrier has its own, as
	// pool has ErrInvalidConfig.
	ErrInvalidOptions = errors.New("retrier: invalid options")
)

// Bounds of Options.MaxFailures.
const (
	// NoRetries as MaxFailures runs the call once: its failure is not
	// retried (0 means the default, 4).
	NoRetries = -1
	// MaxFailuresLimit is the largest MaxFailures. The retrier's record
	// lists the id of every attempt, so it grows with them; the limit
	// bounds it (and Run also refuses, with producer.ErrArgsTooLarge, a
	// MaxFailures whose attempt ids would not fit the record in the
	// server's max payload beside the args).
	MaxFailuresLimit = 1000
)

// Options are a Retrier's defaults for every run. Every zero field takes the
// default named.
type Options struct {
	// InitialBackoff scales the delay before a retry. Default 250 ms. The
	// delay after the k-th failure is InitialBackoff * Base^k (so about
	// 500 ms before the first retry with the defaults), as in Convex.
	InitialBackoff time.Duration
	// Base of the exponential backoff. Default 2; values below 1 take the
	// default.
	Base float64
	// MaxFailures is how many failures are retried: the run fails after
	// MaxFailures+1 failed attempts. Default (0) 4, so 5 attempts;
	// NoRetries (-1) for one attempt and no retry; at most
	// MaxFailuresLimit (1000). Run refuses other values with
	// ErrInvalidOptions.
	MaxFailures int
	// MaxBackoff caps one delay. Default: no cap (as in Convex).
	MaxBackoff time.Duration
	// NoJitter turns jitter off. By default every delay is multiplied by a
	// random factor in [0.5, 1.5), so that many retriers failing together do
	// not retry together.
	NoJitter bool
	// Timeout ends an attempt that runs longer as failed (jetflow.ErrTimeout),
	// which the retrier then retries. Default: the target function's.
	Timeout time.Duration
	// OnComplete is run exactly once when a run ends (success, failed or
	// canceled). Its function receives a jetflow.Completion; the call's
	// args are the Completion's Context. Default none. WithOnComplete
	// overrides it for one run.
	OnComplete *jetflow.Call
}

func (o Options) withDefaults() Options {
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = 250 * time.Millisecond
	}
	if o.Base < 1 {
		o.Base = 2
	}
	if o.MaxFailures == 0 {
		o.MaxFailures = 4
	}
	if o.MaxBackoff < 0 {
		o.MaxBackoff = 0
	}
	return o
}

// override returns o with the non-zero fields of x.
func (o Options) override(x Options) Options {
	if x.InitialBackoff > 0 {
		o.InitialBackoff = x.InitialBackoff
	}
	if x.Base >= 1 {
		o.Base = x.Base
	}
	if x.MaxFailures != 0 {
		o.MaxFailures = x.MaxFailures
	}
	if x.MaxBackoff > 0 {
		o.MaxBackoff = x.MaxBackoff
	}
	if x.NoJitter {
		o.NoJitter = true
	}
	if x.Timeout > 0 {
		o.Timeout = x.Timeout
	}
	if x.OnComplete != nil {
		o.OnComplete = x.OnComplete
	}
	return o
}

// validate reports the options Run refuses: ErrInvalidOptions.
func (o Options) validate() error {
	if o.MaxFailures < NoRetries || o.MaxFailures > MaxFailuresLimit {
		return fmt.Errorf("%w: MaxFailures %d: want 0 (the default, 4), 1 to %d, or NoRetries (-1)",
			ErrInvalidOptions, o.MaxFailures, MaxFailuresLimit)
	}
	return nil
}

// retried is the number of failures retried: MaxFailures, 0 for NoRetries.
func (o Options) retried() int { return max(o.MaxFailures, 0) }

// Delay is the wait before the next attempt after the k-th failure (k >= 1):
// InitialBackoff * Base^k, times jitter in [0.5, 1.5) unless NoJitter, capped
// at MaxBackoff when set. Zero fields take their defaults.
func (o Options) Delay(k int) time.Duration {
	o = o.withDefaults()
	if k < 1 {
		k = 1
	}
	d := float64(o.InitialBackoff) * math.Pow(o.Base, float64(k))
	if !o.NoJitter {
		d *= 0.5 + rand.Float64()
	}
	limit := time.Duration(math.MaxInt64 / 2)
	if o.MaxBackoff > 0 {
		limit = o.MaxBackoff
	}
	// Compared as floats, returned as the Duration itself: float64 of a
	// Duration near the largest rounds up to 2^63, which converts back to
	// a negative Duration (a retry at once).
	if math.IsNaN(d) || d >= float64(limit) {
		return limit
	}
	return max(time.Duration(d), 1)
}

// policy is the part of Options stored with each run.
type policy struct {
	InitialBackoff time.Duration `json:"initialBackoff"`
	Base           float64       `json:"base"`
	MaxFailures    int           `json:"maxFailures"`
	MaxBackoff     time.Duration `json:"maxBackoff,omitempty"`
	NoJitter       bool          `json:"noJitter,omitempty"`
	Timeout        time.Duration `json:"timeout,omitempty"`
}

func (p policy) options() Options {
	return Options{InitialBackoff: p.InitialBackoff, Base: p.Base, MaxFailures: p.MaxFailures,
		MaxBackoff: p.MaxBackoff, NoJitter: p.NoJitter, Timeout: p.Timeout}
}

// spec is everything a retrier run needs: the args of its start run and of
// its record.
type spec struct {
	Retrier    string            `json:"retrier"`
	Function   string            `json:"fn"`
	Kind       jetflow.Kind      `json:"kind,omitempty"`
	Args       json.RawMessage   `json:"args,omitempty"`
	Policy     policy            `json:"policy"`
	OnComplete *jetflow.Callback `json:"onComplete,omitempty"`
}

func (s spec) target() jetflow.Call {
	return jetflow.Call{Name: s.Function, Kind: s.Kind, Args: s.Args}
}

// stepContext is the context of an attempt's on-complete callback.
type stepContext struct {
	Retrier string `json:"retrier"`
	Attempt int    `json:"attempt"`
}

// Retrier runs calls with retries. It is safe for concurrent use.
type Retrier struct {
	p    *producer.Producer
	opts Options
	// internal are the worker options Register gives the internal
	// functions (internalOptions; tests shrink them).
	internal worker.Options
	// fault, set by tests only, fails an internal function's attempt: it
	// stands for NATS refusing that attempt's writes.
	fault faultFunc
}

// faultFunc is a test's failure injected into attempt attempt of internal
// run id of function fn, at its start (end false) or, once its work has
// failed, before it writes the retrier's end (end true); nil lets the
// attempt go on.
type faultFunc func(ctx context.Context, fn, id string, attempt int, end bool) error

// New returns a Retrier that schedules with p. The retrier's internal
// functions must be served by a worker: see Register. Run checks opts
// (ErrInvalidOptions).
func New(p *producer.Producer, opts Options) *Retrier {
	return &Retrier{p: p, opts: opts.withDefaults(), internal: internalOptions}
}

// Options are the retrier's defaults, with defaults filled.
func (r *Retrier) Options() Options { return r.opts }

// RunOption tunes one run.
type RunOption func(*runOptions)

type runOptions struct {
	id         string
	onComplete *jetflow.Call
	opts       Options
}

// WithID gives the retrier its id, an idempotency key: a second Run with the
// same id returns that id and an error matching producer.ErrAlreadyExists.
// Default: a generated id. The id's attempts are <id>-a1, <id>-a2, ...
func WithID(id string) RunOption { return func(o *runOptions) { o.id = id } }

// WithOnComplete sets the callback run once when this run ends, instead of
// Options.OnComplete. c's function receives a jetflow.Completion whose Run is
// the retrier's record (see FromCompletion) and whose Context is c's args.
func WithOnComplete(c jetflow.Call) RunOption {
	return func(o *runOptions) { o.onComplete = &c }
}

// WithOptions overrides the retrier's options for this run: its non-zero
// fields replace the defaults (MaxFailures NoRetries included).
func WithOptions(x Options) RunOption {
	return func(o *runOptions) { o.opts = o.opts.override(x) }
}

// Run starts c now and retries it until it succeeds, fails MaxFailures+1
// times, or is canceled. It returns the retrier id once the run is durable.
// Errors: ErrInvalidOptions (MaxFailures out of range), jetflow.ErrInvalidName,
// jetflow.ErrBadArgs, jetflow.ErrInvalidRunID, producer.ErrArgsTooLarge (the
// call's args, the callback's context and the ids of MaxFailures+1 attempts,
// with 8 KiB to spare, must fit the server's max payload: the attempts',
// the record's and the callback's messages carry them),
// producer.ErrAlreadyExists (with the id).
func (r *Retrier) Run(ctx context.Context, c jetflow.Call, opts ...RunOption) (string, error) {
	return r.RunAt(ctx, time.Time{}, c, opts...)
}

// RunAfter is Run with the first attempt after delay.
func (r *Retrier) RunAfter(ctx context.Context, delay time.Duration, c jetflow.Call, opts ...RunOption) (string, error) {
	if delay <= 0 {
		return r.RunAt(ctx, time.Time{}, c, opts...)
	}
	return r.RunAt(ctx, time.Now().Add(delay), c, opts...)
}

// RunAt is Run with the first attempt at t (a zero or past t means now).
func (r *Retrier) RunAt(ctx context.Context, t time.Time, c jetflow.Call, opts ...RunOption) (string, error) {
	o := runOptions{opts: r.opts}
	for _, f := range opts {
		f(&o)
	}
	if o.onComplete == nil {
		o.onComplete = o.opts.OnComplete
	}
	if err := o.opts.validate(); err != nil {
		return "", err
	}
	args, err := c.Encode()
	if err != nil {
		return "", err
	}
	id := o.id
	if id == "" {
		id = nuid.Next()
	} else if err := jetflow.ValidateRunID(id); err != nil {
		return "", err
	}
	kind := c.Kind
	if kind == "" {
		kind = jetflow.Retryable
	}
	pol := o.opts.withDefaults()
	s := spec{
		Retrier: id, Function: c.Name, Kind: kind, Args: args,
		Policy: policy{InitialBackoff: pol.InitialBackoff, Base: pol.Base, MaxFailures: pol.retried(),
			MaxBackoff: pol.MaxBackoff, NoJitter: pol.NoJitter, Timeout: pol.Timeout},
	}
	if o.onComplete != nil {
		cargs, err := o.onComplete.Encode()
		if err != nil {
			return "", fmt.Errorf("retrier: on-complete: %w", err)
		}
		s.OnComplete = &jetflow.Callback{Function: o.onComplete.Name, Args: cargs}
	}
	if err := checkSize(r.p, s); err != nil {
		return "", err
	}
	if o.id != "" {
		// The start run's id is free even when a run of another function
		// holds id: its start would fail, and the callback never run.
		if rec, err := r.p.Get(ctx, id); err == nil {
			return id, fmt.Errorf("retrier %s: a %s run has that id: %w", id, rec.Name, producer.ErrAlreadyExists)
		} else if !errors.Is(err, jetflow.ErrNotFound) {
			return "", err
		}
	}
	_, err = r.p.RunAt(ctx, t, startCall(s), producer.WithID(StartID(id)),
		producer.WithOnComplete(jetflow.Call{Name: StartedFunction, Kind: jetflow.Retryable}))
	if err != nil {
		if errors.Is(err, producer.ErrAlreadyExists) {
			return id, fmt.Errorf("retrier %s: %w", id, err)
		}
		return "", err
	}
	return id, nil
}

// sizeReserve is the room a retrier's spec leaves in the server's max
// payload for what is built on it: the record's other fields, an attempt's
// record and error in the step's completion, the callback's context again
// in the user's completion (as worker.Job.SetResult leaves for a record).
const sizeReserve = 8192

// checkSize refuses a spec whose derived messages would not fit the
// server's max payload: the start run's args would, but the step's
// completion (the attempt's record, args included) or the user's callback
// (the retrier's record and the callback's context) would not, and the
// retrier would stay in progress for ever.
func checkSize(p *producer.Producer, s spec) error {
	max := engine.Of(p).Conn().MaxPayload()
	if max <= 0 {
		return nil
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", jetflow.ErrBadArgs, s.Function, err)
	}
	n := len(raw)
	if s.OnComplete != nil {
		n += len(s.OnComplete.Args)
	}
	// The record lists every attempt's id (quoted, comma-separated).
	last := s.Policy.MaxFailures + 1
	kids := last * (len(AttemptID(s.Retrier, last)) + 3)
	if int64(n+kids)+sizeReserve > max {
		return fmt.Errorf("%w: retrier of %s: %d bytes of args and callback context and %d of the ids of %d attempts, server max payload %d less %d",
			producer.ErrArgsTooLarge, s.Function, n, kids, last, max, sizeReserve)
	}
	return nil
}

func startCall(s spec) jetflow.Call {
	return jetflow.Call{Name: StartFunction, Kind: jetflow.Retryable, Args: s}
}

// StartID is the id of the start run of retrier id.
func StartID(id string) string { return jetflow.DerivedID(id + "-start") }

// AttemptID is the run id of attempt n (from 1) of retrier id.
func AttemptID(id string, n int) string { return jetflow.DerivedID(id + "-a" + strconv.Itoa(n)) }
