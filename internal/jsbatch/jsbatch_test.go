package jsbatch_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jetflow-dev/jetflow/internal/jsbatch"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestPublishAllOrNone(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	st, err := ts.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "B", Subjects: []string{"b.>"}, AllowAtomicPublish: true})
	if err != nil {
		t.Fatal(err)
	}
	msgs := func(keys ...string) []*nats.Msg {
		out := make([]*nats.Msg, len(keys))
		for i, k := range keys {
			out[i] = &nats.Msg{Subject: "b." + k, Data: []byte(k), Header: nats.Header{}}
		}
		return out
	}
	last, err := jsbatch.Publish(ctx, ts.NC, msgs("x", "y", "z"))
	if err != nil || last != 3 {
		t.Fatalf("first batch: last %d, %v", last, err)
	}
	// One message whose condition fails: none of the batch is stored, and
	// the error is the server's, as for a single publish.
	bad := msgs("p", "q")
	bad[1].Header.Set("Nats-Expected-Last-Subject-Sequence", "0")
	bad = append(bad, msgs("x")...)
	bad[2].Header.Set("Nats-Expected-Last-Subject-Sequence", "0") // b.x exists
	if _, err := jsbatch.Publish(ctx, ts.NC, bad); !kv.IsWrongSequence(err) {
		t.Fatalf("refused batch: %v, want a wrong-sequence error", err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 3 {
		t.Fatalf("stream holds %d messages after a refused batch (%v), want 3", info.State.Msgs, err)
	}
	// Messages without headers get them.
	m := &nats.Msg{Subject: "b.w", Data: []byte("w")}
	if last, err := jsbatch.Publish(ctx, ts.NC, []*nats.Msg{m}); err != nil || last != 4 {
		t.Fatalf("one-message batch: last %d, %v", last, err)
	}
	if _, err := jsbatch.Publish(ctx, ts.NC, nil); !errors.Is(err, jsbatch.ErrEmpty) {
		t.Fatalf("empty batch: %v", err)
	}
}
