package telemetry

import (
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestTracingOnlyOnceAProviderIsInstalled(t *testing.T) {
	if Tracing() {
		t.Fatal("tracing on before the application installed a provider")
	}
	otel.SetTracerProvider(noop.NewTracerProvider())
	if !Tracing() {
		t.Fatal("tracing off with a provider installed")
	}
	if Tracer() == nil {
		t.Fatal("no tracer")
	}
}
