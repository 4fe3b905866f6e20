package scheduler_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The backlog gauges and the scaling endpoint report a known backlog: 2
// runs in flight and 3 ready for ops.busy, 2 delayed runs due in 30 s and 3
// in 5 minutes. Not parallel: it installs the global MeterProvider.
func TestBacklogGaugesAndScalingEndpoint(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(prev) })

	ts := testserver.Start(t)
	ctx := context.Background()
	busy := jetflow.Define[int]("ops.busy")
	w, err := worker.New(ctx, ts.JS, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hold, started := make(chan struct{}), make(chan struct{}, 5)
	worker.Handle(w, busy, func(ctx context.Context, _ *worker.Job[int]) error {
		started <- struct{}{}
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return nil
	}, worker.Options{MaxParallel: 2, Concurrency: 2})
	s, err := scheduler.New(ctx, ts.JS, scheduler.Config{LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(hold)
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
		_ = s.Stop(sctx)
	})
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := p.Enqueue(ctx, busy.With(i)); err != nil {
			t.Fatal(err)
		}
	}
	<-started
	<-started
	// A pool with no dispatcher: its item waits in its queue.
	pl, err := pool.New(ctx, p, pool.Config{Name: "opspool", MaxParallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pl.Enqueue(ctx, busy.With(99)); err != nil {
		t.Fatal(err)
	}
	for i, after := range []time.Duration{30 * time.Second, 30 * time.Second, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute} {
		if _, err := p.RunAfter(ctx, after, busy.With(10+i)); err != nil {
			t.Fatal(err)
		}
	}
	testserver.Eventually(t, 10*time.Second, "scheduler leads", s.IsLeader)

	var got map[string]map[string]float64
	testserver.Eventually(t, 15*time.Second, "gauges report the backlog", func() bool {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		got = gauges(rm)
		return got["jetflow.runs.ready"]["ops.busy"] == 3 && got["jetflow.runs.due"]["10m"] == 5 && got["jetflow.pool.queued"]["opspool"] == 1
	})
	want := map[string]map[string]float64{
		"jetflow.runs.ready":     {"ops.busy": 3},
		"jetflow.runs.in_flight": {"ops.busy": 2},
		"jetflow.runs.due":       {"1m": 2, "10m": 5},
		"jetflow.runs.unserved":  {"": 0},
		"jetflow.pool.queued":    {"opspool": 1},
		"jetflow.pool.running":   {"opspool": 0},
	}
	for name, byKey := range want {
		for k, v := range byKey {
			if got[name][k] != v {
				t.Errorf("%s{%s} = %v, want %v (all: %v)", name, k, got[name][k], v, got)
			}
		}
	}
	if age := got["jetflow.runs.oldest_ready_age"]["ops.busy"]; age <= 0 || age > 60 {
		t.Errorf("oldest ready age %v s", age)
	}

	rec := httptest.NewRecorder()
	s.ScalingHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/scaling?function=ops.busy&target=2", nil))
	var fn struct {
		Ready, InFlight, Waiting, DesiredWorkers int
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &fn); rec.Code != 200 || err != nil {
		t.Fatalf("scaling endpoint: %d %v %s", rec.Code, err, rec.Body.String())
	}
	if fn.Ready != 3 || fn.InFlight != 2 || fn.Waiting != 5 || fn.DesiredWorkers != 3 {
		t.Errorf("scaling endpoint for ops.busy: %+v (%s)", fn, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	s.ScalingHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/scaling?target=0", nil))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("target 0: %d", rec.Code)
	}
}

// gauges returns each gauge's values by the function, or the due window,
// of their attributes ("" for none).
func gauges(rm metricdata.ResourceMetrics) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	key := func(s attribute.Set) string {
		if v, ok := s.Value("jetflow.function"); ok {
			return v.AsString()
		}
		if v, ok := s.Value("jetflow.due_within"); ok {
			return v.AsString()
		}
		if v, ok := s.Value("jetflow.pool"); ok {
			return v.AsString()
		}
		return ""
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			vals := map[string]float64{}
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					vals[key(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					vals[key(p.Attributes)] = p.Value
				}
			default:
				continue
			}
			out[m.Name] = vals
		}
	}
	return out
}
