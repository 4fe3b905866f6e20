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
	hold        bool // engine.HoldOption: the worker's children of a retryable attempt
	onComplete  *jetflow.Call
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

func collect(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}
