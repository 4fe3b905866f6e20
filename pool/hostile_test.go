package pool_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/pool"
)

// Keys that finished cost the dispatcher nothing: after items of many
// distinct keys have run, it holds no per-key queue.
func TestManyKeysForgotten(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	cfg := testConfig("manykeys")
	cfg.MaxParallelism = 20
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	const n = 200
	entries := make([]pool.Entry, n)
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("k%d", i)
		entries[i] = pool.Entry{Call: Work.With(WorkArgs{Key: ids[i]}),
			Options: []pool.Option{pool.WithID(ids[i]), pool.WithKey(fmt.Sprintf("tenant-%d", i)), onComplete(ids[i])}}
	}
	batch(t, pl, entries)
	items := e.waitFinished(t, pl, ids)
	for id, it := range items {
		if it.State != jetflow.Success {
			t.Errorf("item %s: %s: %s", id, it.State, it.Error)
		}
	}
	testserver.Eventually(t, 10*time.Second, "dispatcher forgets finished keys", func() bool {
		return pl.Stats().Keys == 0
	})
}
