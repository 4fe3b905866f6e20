package worker

import (
	"context"
	"time"

	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// What becomes of a delivery once the worker has decided: every ack, nak
// and term goes through settle, which logs and counts the ones that fail
// (the server then redelivers the message after AckWait, and the record's
// compare-and-swap keeps that harmless; a rise in the count says the
// connection or the server is in trouble).

type action uint8

const (
	ack      action = iota // done with: the run is over or not to be run
	nak                    // give back at once, unharmed (a worker stopping)
	nakDelay               // give back, to be delivered again after delay
	term                   // never deliver again (recorded as a dead letter first)
)

var actionNames = [...]string{ack: "ack", nak: "nak", nakDelay: "nak-delay", term: "term"}

func (a action) String() string { return actionNames[a] }

type verdict struct {
	do    action
	delay time.Duration // nakDelay
	why   string        // for the log, when settling fails
}

var (
	ackIt  = verdict{do: ack}
	nakIt  = verdict{do: nak}
	termIt = verdict{do: term}
)

// nakAfter gives a message back to be delivered again after d.
func nakAfter(d time.Duration) verdict { return verdict{do: nakDelay, delay: d} }

// settle applies v to m.
func (w *Worker) settle(m jetstream.Msg, v verdict) {
	var err error
	switch v.do {
	case ack:
		err = m.Ack()
	case nak:
		err = m.Nak()
	case nakDelay:
		err = m.NakWithDelay(v.delay)
	case term:
		if v.why != "" {
			err = m.TermWithReason(v.why)
		} else {
			err = m.Term()
		}
	}
	if err != nil {
		w.log.Warn("settling a delivery failed; the server redelivers it after AckWait",
			"action", v.do.String(), "subject", m.Subject(), "reason", v.why, "error", err)
		telemetry.M().SettleFailed.Add(context.Background(), 1,
			metric.WithAttributes(attribute.String("jetflow.action", v.do.String())))
	}
}
