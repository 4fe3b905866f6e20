// Package telemetry is the one place jetflow touches OpenTelemetry: W3C
// trace context in message headers, spans around handlers, and counters.
// Everything goes through the global providers, so it costs next to nothing
// until the application installs a TracerProvider or MeterProvider.
package telemetry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// scope is the name of jetflow's instrumentation scope; its version is
// Version().
const scope = Module

var prop = propagation.TraceContext{}

// Inject returns the W3C trace context of ctx as headers, or nil when ctx
// carries no valid span.
func Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	prop.Inject(ctx, c)
	if len(c) == 0 {
		return nil
	}
	return c
}

// Extract returns ctx with the remote span context found in h.
func Extract(ctx context.Context, h map[string]string) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return prop.Extract(ctx, propagation.MapCarrier(h))
}

// tracerOf caches the tracer of the global provider it came from.
type tracerOf struct {
	p  trace.TracerProvider
	t  trace.Tracer
	on bool // an SDK is installed: spans are recorded
}

var cachedTracer atomic.Pointer[tracerOf]

func tracerNow() *tracerOf {
	p := otel.GetTracerProvider()
	if c := cachedTracer.Load(); c != nil && c.p == p {
		return c
	}
	// Until the application installs a provider, the global one is OTel's
	// own delegating placeholder, whose spans record nothing.
	c := &tracerOf{p: p, t: p.Tracer(scope, trace.WithInstrumentationVersion(Version())), on: fmt.Sprintf("%T", p) != "*global.tracerProvider"}
	cachedTracer.Store(c)
	return c
}

// Tracer is jetflow's tracer from the global provider (looked up once per
// provider: it is asked for once per run).
func Tracer() trace.Tracer { return tracerNow().t }

// Tracing reports whether the application installed a TracerProvider; until
// it does, the hot path skips creating spans that would record nothing
// (trace context still travels in headers).
func Tracing() bool { return tracerNow().on }

// Metrics are jetflow's instruments. Their attribute is jetflow.function.
type Metrics struct {
	Started, Succeeded, Failed, Retried, Canceled metric.Int64Counter
	// SettleFailed counts acks, naks and terms the server did not take.
	SettleFailed metric.Int64Counter
	// QueueWait is the time from a run's scheduled time to the start of
	// its attempt (s): what a run waited for a worker.
	QueueWait metric.Float64Histogram
	// Duration is the time one attempt's handler ran (s), with its outcome
	// (jetflow.outcome: success or error).
	Duration metric.Float64Histogram
	// ClaimWait is the time a run claimed before its handler starts waited
	// for its claim to be stored (s): a replicated write's round trip,
	// and the server's queue when it is busy.
	ClaimWait metric.Float64Histogram
}

// secondsBuckets are the histogram bounds (s): from a millisecond to an
// hour, where runs' waits and durations fall.
var secondsBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// claimBuckets are ClaimWait's bounds (s): a stored write takes from a
// fraction of a millisecond to tens of milliseconds on a busy cluster.
var claimBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

var (
	once sync.Once
	m    Metrics
)

// M returns the instruments, created once from the global MeterProvider.
func M() *Metrics {
	once.Do(func() {
		meter := otel.Meter(scope, metric.WithInstrumentationVersion(Version()))
		m.Started, _ = meter.Int64Counter("jetflow.runs.started", metric.WithDescription("runs started by a worker"))
		m.Succeeded, _ = meter.Int64Counter("jetflow.runs.succeeded", metric.WithDescription("runs ended success"))
		m.Failed, _ = meter.Int64Counter("jetflow.runs.failed", metric.WithDescription("runs ended failed"))
		m.Retried, _ = meter.Int64Counter("jetflow.runs.retried", metric.WithDescription("attempts failed and retried"))
		m.Canceled, _ = meter.Int64Counter("jetflow.runs.canceled", metric.WithDescription("attempts canceled while running"))
		m.SettleFailed, _ = meter.Int64Counter("jetflow.deliveries.settle_failed",
			metric.WithDescription("acks, naks and terms of deliveries that failed"))
		m.QueueWait, _ = meter.Float64Histogram("jetflow.runs.queue_wait", metric.WithUnit("s"),
			metric.WithDescription("time from a run's scheduled time to the start of its attempt"),
			metric.WithExplicitBucketBoundaries(secondsBuckets...))
		m.Duration, _ = meter.Float64Histogram("jetflow.runs.duration", metric.WithUnit("s"),
			metric.WithDescription("time the handler of one attempt ran"),
			metric.WithExplicitBucketBoundaries(secondsBuckets...))
		m.ClaimWait, _ = meter.Float64Histogram("jetflow.runs.claim_wait", metric.WithUnit("s"),
			metric.WithDescription("time a run claimed before its handler starts waited for its claim to be stored"),
			metric.WithExplicitBucketBoundaries(claimBuckets...))
	})
	return &m
}

// Fn is the attribute set naming a function.
func Fn(name string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String(AttrFunction, name))
}

// Seconds converts a duration for histograms.
func Seconds(d time.Duration) float64 { return d.Seconds() }

// claimObserver, when set, is handed every claim wait recorded.
var claimObserver atomic.Pointer[func(time.Duration)]

// ObserveClaims hands f every claim wait recorded (ClaimWaited) until stop
// is called: the bench's percentiles of claim waits, which the histogram's
// buckets are too coarse for. One observer at a time; f must be safe for
// concurrent use.
func ObserveClaims(f func(time.Duration)) (stop func()) {
	claimObserver.Store(&f)
	return func() { claimObserver.Store(nil) }
}

// ClaimWaited records the wait of a claim written before its run's handler
// starts.
func ClaimWaited(ctx context.Context, d time.Duration, attrs ...metric.RecordOption) {
	M().ClaimWait.Record(ctx, d.Seconds(), attrs...)
	if f := claimObserver.Load(); f != nil {
		(*f)(d)
	}
}
