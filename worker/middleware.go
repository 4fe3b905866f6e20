package worker

import (
	"context"
	"time"

	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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

// telemetryMiddleware is jetflow's own: a span per run (when the
// application installed a TracerProvider), the started counter and the
// lateness histogram. It wraps the application's middleware.
func telemetryMiddleware(next HandlerFunc) HandlerFunc {
	return func(ctx context.Context, run Run) error {
		j := run.(*jobCore)
		if telemetry.Tracing() {
			var span trace.Span
			ctx, span = telemetry.Tracer().Start(ctx, "jetflow.run "+j.fn.name, trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(attribute.String("jetflow.run_id", j.env.ID), attribute.Int("jetflow.attempt", j.env.Attempt)))
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

func telemetryCount(ctx context.Context, j *jobCore, next HandlerFunc, run Run) error {
	met := telemetry.M()
	met.Started.Add(ctx, 1, j.fn.attr)
	met.Lateness.Record(ctx, j.started.Sub(j.env.Scheduled).Seconds(), j.fn.attr)
	return next(ctx, run)
}
