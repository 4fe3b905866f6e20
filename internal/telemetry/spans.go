package telemetry

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys: OpenTelemetry's messaging semantic conventions beside
// jetflow's own, namespaced under jetflow.
const (
	AttrMessagingSystem      = "messaging.system"           // "nats"
	AttrDestinationName      = "messaging.destination.name" // the run's subject
	AttrDestinationTemplate  = "messaging.destination.template"
	AttrOperationType        = "messaging.operation.type" // "publish" or "process"
	AttrOperationName        = "messaging.operation.name"
	AttrMessageID            = "messaging.message.id" // the run id
	AttrRunID                = "jetflow.run_id"
	AttrFunction             = "jetflow.function"
	AttrAttempt              = "jetflow.attempt"
	AttrScheduledTime        = "jetflow.scheduled_time"
	AttrOutcome              = "jetflow.outcome"
	traceStateKey            = "jetflow" // earlier attempts' span ids, in tracestate
	maxLinkedAttempts        = 14        // what fits in one tracestate value (256 bytes)
	operationPublish         = "publish"
	operationProcess         = "process"
	messagingSystemNATS      = "nats"
	traceStateSpanIDsDivider = "."
)

// Publish is the producer span of one run being scheduled. Its zero value
// (tracing off) does nothing.
type Publish struct{ span trace.Span }

// StartPublish starts the producer span of a run of function fn, when the
// application installed a TracerProvider. The returned ctx carries the
// span: the run's trace context is taken from it, so the run's spans are
// the span's children.
func StartPublish(ctx context.Context, fn string) (context.Context, Publish) {
	if !Tracing() {
		return ctx, Publish{}
	}
	ctx, span := Tracer().Start(ctx, operationPublish+" "+fn, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String(AttrMessagingSystem, messagingSystemNATS),
			attribute.String(AttrOperationType, operationPublish),
			attribute.String(AttrOperationName, operationPublish),
			attribute.String(AttrFunction, fn),
		))
	return ctx, Publish{span: span}
}

// On reports whether the span records (tracing is on).
func (p Publish) On() bool { return p.span != nil }

// Retrying notes on the span of ctx, if it records, that a request failed
// with a transient error and is tried again after delay.
func Retrying(ctx context.Context, err error, delay time.Duration) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("retry", trace.WithAttributes(attribute.String("error.message", err.Error()),
		attribute.Float64("jetflow.retry_delay_s", delay.Seconds())))
}

// End ends the span of run id published on subject (or stored to be
// published then, for a delayed run) with err, its outcome.
func (p Publish) End(id, subject string, err error) {
	if p.span == nil {
		return
	}
	if id != "" {
		p.span.SetAttributes(attribute.String(AttrMessageID, id), attribute.String(AttrRunID, id))
	}
	if subject != "" {
		p.span.SetAttributes(attribute.String(AttrDestinationName, subject))
	}
	if err != nil {
		p.span.RecordError(err)
		p.span.SetStatus(codes.Error, err.Error())
	}
	p.span.End()
}

// Process describes the attempt a run span is started for.
type Process struct {
	Function, RunID, Subject string
	Attempt                  int
}

// StartProcess starts the consumer span of one attempt of a run, a child of
// the producer's span found in ctx (Extract). Earlier attempts of the run,
// listed in the run's tracestate by AttemptTrace, become links. The
// returned trace map is the run's trace context for its next attempt: the
// producer's, its tracestate naming this attempt's span too. Call it only
// when Tracing().
func StartProcess(ctx context.Context, p Process, trace0 map[string]string) (context.Context, trace.Span, map[string]string) {
	parent := trace.SpanContextFromContext(ctx)
	ts := parent.TraceState()
	earlier := ts.Get(traceStateKey)
	var links []trace.Link
	if earlier != "" {
		// This list is the run's own: the span and the runs it schedules
		// must not inherit it.
		ts = ts.Delete(traceStateKey)
		parent = parent.WithTraceState(ts)
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		for i, hex := range strings.Split(earlier, traceStateSpanIDsDivider) {
			sid, err := trace.SpanIDFromHex(hex)
			if err != nil {
				continue
			}
			links = append(links, trace.Link{
				SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: parent.TraceID(), SpanID: sid, TraceFlags: parent.TraceFlags(), Remote: true,
				}),
				Attributes: []attribute.KeyValue{attribute.String("jetflow.link", "earlier_attempt"), attribute.Int(AttrAttempt, i+1)},
			})
		}
	}
	ctx, span := Tracer().Start(ctx, operationProcess+" "+p.Function, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String(AttrMessagingSystem, messagingSystemNATS),
			attribute.String(AttrOperationType, operationProcess),
			attribute.String(AttrOperationName, operationProcess),
			attribute.String(AttrDestinationName, p.Subject),
			attribute.String(AttrMessageID, p.RunID),
			attribute.String(AttrRunID, p.RunID),
			attribute.String(AttrFunction, p.Function),
			attribute.Int(AttrAttempt, p.Attempt),
		))
	next := trace0
	if sc := span.SpanContext(); sc.IsValid() && parent.IsValid() && len(trace0) > 0 {
		ids := sc.SpanID().String()
		if earlier != "" {
			list := strings.Split(earlier, traceStateSpanIDsDivider)
			if len(list) >= maxLinkedAttempts {
				list = append(list[:1], list[len(list)-maxLinkedAttempts+2:]...) // keep the first
			}
			ids = strings.Join(append(list, ids), traceStateSpanIDsDivider)
		}
		if nts, err := ts.Insert(traceStateKey, ids); err == nil {
			next = make(map[string]string, len(trace0)+1)
			for k, v := range trace0 {
				next[k] = v
			}
			next["tracestate"] = nts.String()
		}
	}
	return ctx, span, next
}
