package kv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// silent is a real JetStream context whose publishes are never answered,
// as a request sent just before its server died: nats.go waits for the
// request's ctx to end.
type silent struct{ jetstream.JetStream }

func (silent) PublishMsg(ctx context.Context, _ *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A record write whose request goes unanswered fails as a timeout within
// one request's wait, not at the end of the caller's longer ctx: the
// caller's retries (a segment's, a worker's) go on while it still has time.
func TestWriteWhoseRequestIsNeverAnsweredEndsBeforeTheCallersCtx(t *testing.T) {
	t.Parallel()
	ts, _ := provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := kv.Open(ctx, silent{ts.JS}, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &jetflow.Run{ID: "silent-1", Name: "f", State: jetflow.Pending}
	_, err = st.Create(ctx, r)
	if !errors.Is(err, context.DeadlineExceeded) || !kv.Transient(err) {
		t.Fatalf("unanswered write: %v, want a transient timeout", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the write waited for the caller's whole ctx")
	}
}
