package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// otelOnce installs an SDK TracerProvider and MeterProvider for the whole
// package: the global providers cannot be taken back, so every test sees
// them; the tests below pick their spans out by run id.
var (
	otelOnce     sync.Once
	spanExporter *tracetest.InMemoryExporter
	metricReader *sdkmetric.ManualReader
)

func installOTel() {
	otelOnce.Do(func() {
		spanExporter = tracetest.NewInMemoryExporter()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spanExporter)))
		metricReader = sdkmetric.NewManualReader()
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metricReader)))
	})
}

func attrOf(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// spanOf waits for the span of run id named name (publish/process).
func spanOf(t *testing.T, id, name string) tracetest.SpanStub {
	t.Helper()
	var found tracetest.SpanStub
	testserver.Eventually(t, 10*time.Second, name+" span of "+id, func() bool {
		for _, s := range spanExporter.GetSpans() {
			if v, ok := attrOf(s, "jetflow.run_id"); ok && v.AsString() == id && strings.HasPrefix(s.Name, name+" ") {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

var (
	otelParent = jetflow.Define[echoArgs]("otel.parent")
	otelChild  = jetflow.Define[echoArgs]("otel.child")
	otelFlaky  = jetflow.Define[echoArgs]("otel.flaky")
	otelClaim  = jetflow.Define[echoArgs]("otel.claimed")
)

// Enqueue -> run -> child run is one trace: the producer span (kind
// producer) is the parent of the run's span (kind consumer), whose child is
// the publish span of the child run, the parent of the child's run span;
// each with the messaging conventions' attributes beside jetflow's.
func TestTraceOfEnqueueRunAndChildRun(t *testing.T) {
	installOTel()
	e := setup(t, worker.Config{})
	childID := make(chan string, 1)
	worker.Handle(e.W, otelParent, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		id, err := j.Enqueue(ctx, otelChild.With(echoArgs{N: 2}))
		childID <- id
		return err
	})
	worker.Handle(e.W, otelChild, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	e.start(t)

	ctx, root := otel.Tracer("test").Start(context.Background(), "test root")
	id, err := e.P.Enqueue(ctx, otelParent.With(echoArgs{N: 1}))
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	e.wait(t, id)
	kid := <-childID
	e.wait(t, kid)

	pub, run := spanOf(t, id, "publish"), spanOf(t, id, "process")
	kidPub, kidRun := spanOf(t, kid, "publish"), spanOf(t, kid, "process")
	tid := root.SpanContext().TraceID()
	for _, c := range []struct {
		what   string
		s      tracetest.SpanStub
		kind   trace.SpanKind
		parent trace.SpanID
		op     string
		id     string
		fn     string
	}{
		{"publish parent", pub, trace.SpanKindProducer, root.SpanContext().SpanID(), "publish", id, "otel.parent"},
		{"run parent", run, trace.SpanKindConsumer, pub.SpanContext.SpanID(), "process", id, "otel.parent"},
		{"publish child", kidPub, trace.SpanKindProducer, run.SpanContext.SpanID(), "publish", kid, "otel.child"},
		{"run child", kidRun, trace.SpanKindConsumer, kidPub.SpanContext.SpanID(), "process", kid, "otel.child"},
	} {
		if c.s.SpanContext.TraceID() != tid {
			t.Errorf("%s: trace %s, want %s (one trace)", c.what, c.s.SpanContext.TraceID(), tid)
		}
		if c.s.Parent.SpanID() != c.parent {
			t.Errorf("%s: parent span %s, want %s", c.what, c.s.Parent.SpanID(), c.parent)
		}
		if c.s.SpanKind != c.kind {
			t.Errorf("%s: kind %s, want %s", c.what, c.s.SpanKind, c.kind)
		}
		if c.s.Name != c.op+" "+c.fn {
			t.Errorf("%s: name %q", c.what, c.s.Name)
		}
		want := map[string]string{
			"messaging.system": "nats", "messaging.operation.type": c.op, "messaging.message.id": c.id,
			"messaging.destination.name": "jetflow.fn." + c.fn + "." + c.id,
			"jetflow.run_id":             c.id, "jetflow.function": c.fn,
		}
		for k, v := range want {
			if got, ok := attrOf(c.s, k); !ok || got.String() != v {
				t.Errorf("%s: %s = %q, want %q", c.what, k, got.String(), v)
			}
		}
		if c.op == "process" {
			if got, ok := attrOf(c.s, "jetflow.attempt"); !ok || got.AsInt64() != 1 {
				t.Errorf("%s: jetflow.attempt = %v", c.what, got.String())
			}
		}
		if c.s.InstrumentationScope.Name != "github.com/jetflow-dev/jetflow" || c.s.InstrumentationScope.Version == "" {
			t.Errorf("%s: scope %+v, want jetflow's with its version", c.what, c.s.InstrumentationScope)
		}
	}
}

// A retry's span is a child of the same producer span and links to the
// earlier attempts' spans; the run's children do not inherit the links.
func TestRetrySpanLinksEarlierAttempts(t *testing.T) {
	installOTel()
	e := setup(t, worker.Config{})
	worker.Handle(e.W, otelFlaky, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		if j.Attempt() < 3 {
			return jetflow.RetryAfter(time.Millisecond, errors.New("not yet"))
		}
		return nil
	}, worker.Options{MaxAttempts: 3})
	e.start(t)
	ctx, root := otel.Tracer("test").Start(context.Background(), "test root")
	id, err := e.P.Enqueue(ctx, otelFlaky.With(echoArgs{}))
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 3 {
		t.Fatalf("run = %+v", r)
	}
	pub := spanOf(t, id, "publish")
	var attempts [4]tracetest.SpanStub
	testserver.Eventually(t, 10*time.Second, "3 attempt spans", func() bool {
		n := 0
		for _, s := range spanExporter.GetSpans() {
			if v, ok := attrOf(s, "jetflow.run_id"); ok && v.AsString() == id && strings.HasPrefix(s.Name, "process ") {
				a, _ := attrOf(s, "jetflow.attempt")
				attempts[a.AsInt64()] = s
				n++
			}
		}
		return n == 3
	})
	for a := 1; a <= 3; a++ {
		s := attempts[a]
		if s.Parent.SpanID() != pub.SpanContext.SpanID() || s.SpanContext.TraceID() != pub.SpanContext.TraceID() {
			t.Errorf("attempt %d: parent %s, want the publish span %s", a, s.Parent.SpanID(), pub.SpanContext.SpanID())
		}
		if len(s.Links) != a-1 {
			t.Fatalf("attempt %d: %d links, want %d: %+v", a, len(s.Links), a-1, s.Links)
		}
		for i, l := range s.Links {
			if l.SpanContext.SpanID() != attempts[i+1].SpanContext.SpanID() {
				t.Errorf("attempt %d: link %d to %s, want attempt %d's span %s", a, i, l.SpanContext.SpanID(), i+1, attempts[i+1].SpanContext.SpanID())
			}
		}
		if s.SpanContext.TraceState().Get("jetflow") != "" {
			t.Errorf("attempt %d: its span context carries the attempts list: %s", a, s.SpanContext.TraceState())
		}
	}
}

// The handler-duration and queue-wait histograms are in seconds, with
// descriptions, under jetflow's scope with its version; so is the claim
// wait, recorded for a run claimed before its handler starts only.
func TestHistograms(t *testing.T) {
	installOTel()
	e := setup(t, worker.Config{})
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	worker.Handle(e.W, otelClaim, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil },
		worker.Options{ClaimAfter: -1})
	e.start(t)
	var observed atomic.Int64
	stop := telemetry.ObserveClaims(func(d time.Duration) {
		if d > 0 {
			observed.Add(1)
		}
	})
	defer stop()
	for _, c := range []jetflow.Call{echo.With(echoArgs{}), otelClaim.With(echoArgs{N: 1}), otelClaim.With(echoArgs{N: 2})} {
		id, err := e.P.Enqueue(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		e.wait(t, id)
	}
	if n := observed.Load(); n != 2 {
		t.Errorf("%d claim waits observed, want 2 (the claimed-first runs')", n)
	}
	var rm metricdata.ResourceMetrics
	if err := metricReader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/jetflow-dev/jetflow" {
			continue
		}
		if sm.Scope.Version == "" {
			t.Errorf("scope %+v has no version", sm.Scope)
		}
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				continue
			}
			if m.Unit != "s" || m.Description == "" {
				t.Errorf("%s: unit %q, description %q", m.Name, m.Unit, m.Description)
			}
			for _, dp := range h.DataPoints {
				if v, ok := dp.Attributes.Value("jetflow.function"); ok && dp.Count > 0 {
					seen[m.Name+" "+v.AsString()] = true
					if m.Name == "jetflow.runs.claim_wait" && v.AsString() == otelClaim.Name() && dp.Count != 2 {
						t.Errorf("%s of %s: %d data, want 2", m.Name, v.AsString(), dp.Count)
					}
				}
			}
		}
	}
	for _, name := range []string{"jetflow.runs.duration", "jetflow.runs.queue_wait"} {
		if !seen[name+" "+echo.Name()] {
			t.Errorf("no %s data point for %s", name, echo.Name())
		}
	}
	if !seen["jetflow.runs.claim_wait "+otelClaim.Name()] {
		t.Errorf("no jetflow.runs.claim_wait data point for %s", otelClaim.Name())
	}
	if seen["jetflow.runs.claim_wait "+echo.Name()] {
		t.Errorf("a claim wait recorded for %s, whose runs are claimed late", echo.Name())
	}
}

// Every item of a Batch, and a run of EnqueueAsync, has its own producer
// span, the parent of its run's span.
func TestBatchAndAsyncPublishSpans(t *testing.T) {
	installOTel()
	e := setup(t, worker.Config{})
	worker.Handle(e.W, otelChild, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	e.start(t)
	ctx := context.Background()
	ids, err := e.P.Batch(ctx, []producer.Item{{Call: otelChild.With(echoArgs{N: 1})}, {Call: otelChild.With(echoArgs{N: 2}), At: time.Now().Add(50 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := e.P.EnqueueAsync(ctx, otelChild.With(echoArgs{N: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if err := pd.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range append(ids, pd.ID()) {
		e.wait(t, id)
		pub, run := spanOf(t, id, "publish"), spanOf(t, id, "process")
		if pub.SpanKind != trace.SpanKindProducer || run.Parent.SpanID() != pub.SpanContext.SpanID() ||
			run.SpanContext.TraceID() != pub.SpanContext.TraceID() {
			t.Errorf("run %s: publish span %s (%s), run span's parent %s", id, pub.SpanContext.SpanID(), pub.SpanKind, run.Parent.SpanID())
		}
	}
}
