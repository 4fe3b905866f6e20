package telemetry

import (
	"context"

	"github.com/jetflow-dev/jetflow/internal/backlog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attributes of the backlog gauges.
const (
	// AttrConsumerGroup is OpenTelemetry's messaging attribute for the
	// consumer a function's workers share.
	AttrConsumerGroup = "messaging.consumer.group.name"
	// AttrDueWithin is the window of jetflow.runs.due: "1m" or "10m".
	AttrDueWithin = "jetflow.due_within"
	// AttrPool names a work pool, AttrTrigger a trigger.
	AttrPool    = "jetflow.pool"
	AttrTrigger = "jetflow.trigger"
)

// Backlog gauge names (docs/telemetry.md lists them with their units and
// attributes).
const (
	GaugeReady          = "jetflow.runs.ready"
	GaugeInFlight       = "jetflow.runs.in_flight"
	GaugeRedelivered    = "jetflow.runs.redelivered"
	GaugeOldestReadyAge = "jetflow.runs.oldest_ready_age"
	GaugeDeadLettered   = "jetflow.runs.dead_lettered"
	GaugeDue            = "jetflow.runs.due"
	GaugeUnserved       = "jetflow.runs.unserved"
	GaugePoolQueued     = "jetflow.pool.queued"
	GaugePoolRunning    = "jetflow.pool.running"
	GaugeTriggerReady   = "jetflow.trigger.ready"
	GaugeTriggerFlight  = "jetflow.trigger.in_flight"
)

// backlogGauges are the instruments ObserveBacklog reports.
type backlogGauges struct {
	ready, inFlight, redelivered, dead, due, unserved metric.Int64ObservableGauge
	poolQueued, poolRunning, trigReady, trigFlight    metric.Int64ObservableGauge
	age                                               metric.Float64ObservableGauge
}

// ObserveBacklog registers the backlog gauges on the global MeterProvider:
// at each collection, while active() is true, they report what read
// returns (one read per collection; read caches). active lets only one
// process of a deployment report them (the scheduler's leader), so that
// the series are not duplicated by every replica. stop unregisters them.
func ObserveBacklog(read func(ctx context.Context) (*backlog.Figures, error), active func() bool) (stop func() error, err error) {
	meter := otel.Meter(scope, metric.WithInstrumentationVersion(Version()))
	gauge := func(name, unit, desc string) (metric.Int64ObservableGauge, error) {
		return meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	}
	var g backlogGauges
	for _, x := range []struct {
		dst              *metric.Int64ObservableGauge
		name, unit, desc string
	}{
		{&g.poolQueued, GaugePoolQueued, "{item}", "items in a work pool's queue: waiting for a slot, a rate-limit token, or the end of a backoff or debounce"},
		{&g.poolRunning, GaugePoolRunning, "{item}", "items holding one of a work pool's slots"},
		{&g.trigReady, GaugeTriggerReady, "{message}", "messages of a trigger's source not yet delivered to a runner (its consumer's num_pending)"},
		{&g.trigFlight, GaugeTriggerFlight, "{message}", "messages delivered to a trigger's runner and not yet made runs (num_ack_pending)"},
		{&g.ready, GaugeReady, "{run}", "runs published and not yet delivered to a worker (the consumer's num_pending)"},
		{&g.inFlight, GaugeInFlight, "{run}", "runs delivered and not yet acknowledged (the consumer's num_ack_pending)"},
		{&g.redelivered, GaugeRedelivered, "{run}", "runs in flight delivered more than once"},
		{&g.dead, GaugeDeadLettered, "{run}", "runs ended failed and kept for the retention period (from the run index)"},
		{&g.due, GaugeDue, "{run}", "runs in the delayed store due within the window (jetflow.due_within), up to a minute overdue included"},
		{&g.unserved, GaugeUnserved, "{run}", "runs waiting for a function no worker has served yet (no consumer)"},
	} {
		if *x.dst, err = gauge(x.name, x.unit, x.desc); err != nil {
			return nil, err
		}
	}
	g.age, err = meter.Float64ObservableGauge(GaugeOldestReadyAge, metric.WithUnit("s"),
		metric.WithDescription("how long the oldest ready run has waited since it was published"))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if !active() {
			return nil
		}
		f, err := read(ctx)
		if f == nil {
			return err
		}
		g.observe(o, f)
		return err
	}, g.ready, g.inFlight, g.redelivered, g.dead, g.due, g.unserved, g.age, g.poolQueued, g.poolRunning, g.trigReady, g.trigFlight)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// observe reports one read of the backlog.
func (g *backlogGauges) observe(o metric.Observer, f *backlog.Figures) {
	for _, fn := range f.Functions {
		attrs := metric.WithAttributes(attribute.String(AttrFunction, fn.Name), attribute.String(AttrConsumerGroup, fn.Consumer))
		o.ObserveInt64(g.ready, int64(fn.Ready), attrs)
		o.ObserveInt64(g.inFlight, int64(fn.InFlight), attrs)
		o.ObserveInt64(g.redelivered, int64(fn.Redelivered), attrs)
		o.ObserveFloat64(g.age, fn.OldestReadyAge, attrs)
		if fn.Failed >= 0 {
			o.ObserveInt64(g.dead, fn.Failed, attrs)
		}
	}
	o.ObserveInt64(g.due, int64(f.Due1m), metric.WithAttributes(attribute.String(AttrDueWithin, "1m")))
	o.ObserveInt64(g.due, int64(f.Due10m), metric.WithAttributes(attribute.String(AttrDueWithin, "10m")))
	o.ObserveInt64(g.unserved, int64(f.Unserved))
	for _, p := range f.Pools {
		attrs := metric.WithAttributes(attribute.String(AttrPool, p.Name))
		o.ObserveInt64(g.poolQueued, int64(p.Queued), attrs)
		o.ObserveInt64(g.poolRunning, int64(p.Running), attrs)
	}
	for _, tr := range f.Triggers {
		attrs := metric.WithAttributes(attribute.String(AttrTrigger, tr.Name), attribute.String(AttrConsumerGroup, tr.Consumer))
		o.ObserveInt64(g.trigReady, int64(tr.Ready), attrs)
		o.ObserveInt64(g.trigFlight, int64(tr.InFlight), attrs)
	}
}
