package worker

import (
	"context"
	"time"

	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Run is what middleware sees of the run a handler is called for.
type Run interface {
	ID() string
	Name() string
	Attempt() int
	MaxAttempts() int
	ScheduledTime() time.Time
	CreationTime() time.Time
	Parent() string
}

// HandlerFunc is a handler as middleware sees it: the typed handler
// registered with Handle, its args already decoded.
type HandlerFunc func(ctx context.Context, run Run) error

// Middleware wraps every handler of a worker (Config.Middleware), as River's
// worker middleware and Watermill's do: logging, metrics, tracing, auth
// context, rate limits. It must call next to run the handler (or return an
// error instead: the run then fails or is retried as if the handler had
// returned it), and must return next's error unless it means to change the
// outcome. A panic in middleware is recovered like one in a handler.
type Middleware func(next HandlerFunc) HandlerFunc

// chain returns h wrapped in mws, the first outermost.
func chain(h HandlerFunc, mws ...Middleware) HandlerFunc {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// telemetryMiddleware is jetflow's own: a span per attempt (when the
// application installed a TracerProvider; OpenTelemetry's messaging
// conventions, kind consumer, a child of the producer's span and linked to
// the run's earlier attempts), the started counter, the queue-wait and the
// handler-duration histograms. It wraps the application's middleware.
func telemetryMiddleware(next HandlerFunc) HandlerFunc {
	return func(ctx context.Context, run Run) error {
		j := run.(*jobCore)
		if telemetry.Tracing() {
			var span trace.Span
			var nextTrace map[string]string
			j.mu.Lock()
			var cur map[string]string
			if j.rec != nil {
				cur = j.rec.Trace
			}
			j.mu.Unlock()
			if cur == nil {
				cur = j.env.Trace
			}
			ctx, span, nextTrace = telemetry.StartProcess(ctx, telemetry.Process{
				Function: j.fn.name, RunID: j.env.ID, Attempt: j.env.Attempt,
				Subject: j.w.scfg.FunctionSubject(j.fn.name, j.env.ID),
			}, cur)
			if len(nextTrace) > 0 && len(cur) > 0 {
				// A retry's record and message carry this attempt's span
				// (tracestate), for the next attempt's link. Copy on write:
				// the record's writers read the map under j.mu.
				j.mu.Lock()
				if j.rec != nil {
					r := *j.rec
					r.Trace = nextTrace
					j.rec = &r
				}
				j.mu.Unlock()
			}
			defer span.End()
			defer func() {
				if p := recover(); p != nil {
					span.SetStatus(codes.Error, "panic")
					panic(p)
				}
			}()
			err := telemetryCount(ctx, j, next, run)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		}
		return telemetryCount(ctx, j, next, run)
	}
}

var (
	outcomeSuccess = metric.WithAttributes(attribute.String(telemetry.AttrOutcome, "success"))
	outcomeError   = metric.WithAttributes(attribute.String(telemetry.AttrOutcome, "error"))
)

func telemetryCount(ctx context.Context, j *jobCore, next HandlerFunc, run Run) error {
	met := telemetry.M()
	met.Started.Add(ctx, 1, j.fn.addAttr...)
	met.QueueWait.Record(ctx, j.started.Sub(j.env.Scheduled).Seconds(), j.fn.recAttr...)
	start := time.Now()
	err := next(ctx, run)
	outcome := j.fn.recOK
	if err != nil {
		outcome = j.fn.recErr
	}
	met.Duration.Record(ctx, time.Since(start).Seconds(), outcome...)
	return err
}
