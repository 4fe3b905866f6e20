package producer

import (
	"github.com/jetflow-dev/jetflow"
)

// WithOnComplete runs c once when this run ends (success, failed or
// canceled). c's function receives a jetflow.Completion: the finished record
// and c's args as Context. It runs exactly once: its run id is
// jetflow.CompletionID(run id), and the repair sweep schedules it if the
// process that ended the run died before it could. Typed: define the
// callback as jetflow.Define[jetflow.CompletionOf[C]] and pass
// jetflow.OnCompleteCall(fn, c); its handler gets the context as a C.
func WithOnComplete(c jetflow.Call) Option {
	return func(o *options) { o.onComplete = &c }
}
