package producer

import (
	"time"

	"github.com/jetflow-dev/jetflow"
)

// Option tunes one scheduled run.
type Option func(*options)

type options struct {
	id          string
	maxAttempts int
	timeout     time.Duration
	parent      string
	hold        bool
	onComplete  *jetflow.Call
	pool        string
	priority    int
}

// WithID gives the run its id, an idempotency key (e.g.
// "order-123-payment-check"). Scheduling an id that exists returns that id
// and ErrAlreadyExists, never a second run. Default: a generated id.
func WithID(id string) Option { return func(o *options) { o.id = id } }

// WithMaxAttempts overrides the function's max attempts for this run.
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// WithTimeout overrides the function's timeout for this run.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithParent records the run that scheduled this one. Workers set it for
// runs scheduled inside a handler.
func WithParent(id string) Option { return func(o *options) { o.parent = id } }

// WithHold writes the run's record without dispatching it: it waits for its
// parent (set with WithParent) to succeed. The worker uses it for runs that a
// retryable handler schedules; Dispatch releases them.
func WithHold() Option { return func(o *options) { o.hold = true } }

func collect(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithPool marks the run as an item of work pool name at priority prio (the
// pool package sets these).
func WithPool(name string, prio int) Option {
	return func(o *options) { o.pool, o.priority = name, prio }
}
