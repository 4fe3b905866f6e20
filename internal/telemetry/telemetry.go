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

const scope = "github.com/jetflow-dev/jetflow"

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
	c := &tracerOf{p: p, t: p.Tracer(scope), on: fmt.Sprintf("%T", p) != "*global.tracerProvider"}
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

// Metrics are jetflow's instruments.
type Metrics struct {
	Started, Succeeded, Failed, Retried, Canceled metric.Int64Counter
	// SettleFailed counts acks, naks and terms the server did not take.
	SettleFailed metric.Int64Counter
	Lateness     metric.Float64Histogram
}

var (
	once sync.Once
	m    Metrics
)

// M returns the instruments, created once from the global MeterProvider.
func M() *Metrics {
	once.Do(func() {
		meter := otel.Meter(scope)
		m.Started, _ = meter.Int64Counter("jetflow.runs.started", metric.WithDescription("runs started by a worker"))
		m.Succeeded, _ = meter.Int64Counter("jetflow.runs.succeeded")
		m.Failed, _ = meter.Int64Counter("jetflow.runs.failed")
		m.Retried, _ = meter.Int64Counter("jetflow.runs.retried")
		m.Canceled, _ = meter.Int64Counter("jetflow.runs.canceled")
		m.SettleFailed, _ = meter.Int64Counter("jetflow.deliveries.settle_failed",
			metric.WithDescription("acks, naks and terms of deliveries that failed"))
		m.Lateness, _ = meter.Float64Histogram("jetflow.runs.lateness", metric.WithUnit("s"),
			metric.WithDescription("start time minus scheduled time"))
	})
	return &m
}

// Fn is the attribute set naming a function.
func Fn(name string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("function", name))
}

// Seconds converts a duration for histograms.
func Seconds(d time.Duration) float64 { return d.Seconds() }
