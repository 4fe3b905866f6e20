package producer

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
)

type existingArgs struct {
	N int `json:"n"`
}

// A create refused because the run exists is followed by a background
// dispatch of that record if it is not queued. A read that does not find
// the record then is behind the create's answer (on a cluster, a deposed
// runs leader resumed from a pause answers before it learns of the new
// term): it is made again, not taken for "nothing to do". Here the record
// appears only after the first reads: it is dispatched all the same.
func TestDispatchExistingReadsAgainARecordNotFoundYet(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := New(ctx, ts.JS, Config{})
	if err != nil {
		t.Fatal(err)
	}
	fn := jetflow.Define[existingArgs]("existing.work")
	r, _, err := p.prepare(ctx, time.Time{}, fn.With(existingArgs{N: 1}), []Option{WithID("existing-1")})
	if err != nil {
		t.Fatal(err)
	}
	p.dispatchExisting(r.ID)
	time.Sleep(time.Second) // the background reads find nothing yet
	if _, err := p.d.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 20*time.Second, "run "+r.ID+" queued", func() bool {
		q, err := p.store.Queued(ctx, r.Name, r.ID)
		return err == nil && q
	})
}
