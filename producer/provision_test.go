package producer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// ProvisionOff writes nothing: on a server without jetflow's streams New
// fails with ErrNotProvisioned at once. ProvisionAuto creates them, and
// after that ProvisionOff finds them.
func TestNewProvisioning(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := producer.New(ctx, ts.JS, producer.Config{Provision: producer.ProvisionOff})
	if !errors.Is(err, streams.ErrNotProvisioned) {
		t.Fatalf("ProvisionOff on an empty server: %v, want ErrNotProvisioned", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s", d)
	}
	if _, err := ts.JS.Stream(ctx, "JETFLOW_FN"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("ProvisionOff created the function stream: %v", err)
	}
	if _, err := producer.New(ctx, ts.JS, producer.Config{}); err != nil {
		t.Fatalf("ProvisionAuto: %v", err)
	}
	if err := streams.Check(ctx, ts.JS, streams.Config{}); err != nil {
		t.Fatalf("after ProvisionAuto: %v", err)
	}
	p, err := producer.New(ctx, ts.JS, producer.Config{Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatalf("ProvisionOff on a provisioned server: %v", err)
	}
	if _, err := p.Enqueue(ctx, jetflow.RawCall("x.y", []byte(`{}`))); err != nil {
		t.Fatal(err)
	}
}

// CancelRun says whether it canceled the run or the run had ended.
func TestCancelRunSaysWhich(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, enqueue := range map[string]func() (string, error){
		"delayed": func() (string, error) { return p.RunAfter(ctx, time.Hour, jetflow.RawCall("x.later", []byte(`{}`))) },
		"due now": func() (string, error) { return p.Enqueue(ctx, jetflow.RawCall("x.now", []byte(`{}`))) },
	} {
		id, err := enqueue()
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.CancelRun(ctx, id)
		if err != nil || !res.Canceled || res.Run == nil || res.Run.State != jetflow.Canceled || res.Run.ID != id {
			t.Fatalf("%s: first cancel = %+v, %v; want canceled", name, res, err)
		}
		res, err = p.CancelRun(ctx, id)
		if err != nil || res.Canceled || res.Run == nil || res.Run.State != jetflow.Canceled {
			t.Fatalf("%s: second cancel = %+v, %v; want not canceled, already ended", name, res, err)
		}
		if err := p.Cancel(ctx, id); err != nil {
			t.Fatalf("%s: Cancel of an ended run: %v, want nil", name, err)
		}
	}
	if _, err := p.CancelRun(ctx, "nope"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
	// The delayed entry is gone: nothing is left for the scheduler.
	st, err := ts.JS.Stream(ctx, streams.KVStream("jetflow_delayed"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("delayed entries left: %+v, %v", info.State, err)
	}
}
