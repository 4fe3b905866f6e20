package pool_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
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

// Keys made of what subjects and terminals treat specially run like any
// other, each its own key; keys and limits out of range are refused with
// typed errors.
func TestHostileKeysAndLimits(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	ctx := context.Background()
	cfg := testConfig("hostile")
	cfg.KeyLimit = 1
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	keys := []string{"", "*", ">", "a.b", "a.*.>", " ", "tenant 1", "\x00", "\x1b[2J", "\r\n", "\u2028", strings.Repeat("é", pool.MaxKeyLen/2)}
	var ids []string
	for i, k := range keys {
		for j := range 2 {
			id := fmt.Sprintf("h%d-%d", i, j)
			enqueue(t, pl, id, WorkArgs{Group: k}, pool.WithKey(k))
			ids = append(ids, id)
		}
	}
	items := e.waitFinished(t, pl, ids)
	for i, k := range keys {
		for j := range 2 {
			if it := items[fmt.Sprintf("h%d-%d", i, j)]; it.State != jetflow.Success || it.Key != k {
				t.Errorf("key %+q: %s %+q %s", k, it.State, it.Key, it.Error)
			}
		}
		if k != "" {
			if m := e.tr.group(k).max.Load(); m != 1 {
				t.Errorf("key %+q: %d ran at once, limit 1", k, m)
			}
		}
	}
	for _, k := range []string{strings.Repeat("k", 10<<20), "\xff", strings.Repeat("é", pool.MaxKeyLen/2) + "x"} {
		if _, err := pl.Enqueue(ctx, Work.With(WorkArgs{}), pool.WithKey(k)); !errors.Is(err, pool.ErrInvalidKey) {
			t.Errorf("key of %d bytes: %v, want ErrInvalidKey", len(k), err)
		}
	}
	for _, err := range []error{
		pl.SetMaxParallelism(ctx, -1), pl.SetMaxParallelism(ctx, math.MaxInt), pl.SetKeyLimit(ctx, -1, pool.Queue),
		pl.SetKeyLimit(ctx, math.MaxInt, pool.Queue), pl.SetRateLimit(ctx, pool.RateLimit{N: -1, Per: time.Second}),
		pl.SetRateLimit(ctx, pool.RateLimit{N: math.MaxInt, Per: time.Second}), pl.SetKeyRate(ctx, pool.RateLimit{N: 1, Per: -time.Second}),
	} {
		if !errors.Is(err, pool.ErrInvalidConfig) {
			t.Errorf("limit out of range: %v, want ErrInvalidConfig", err)
		}
	}
	for _, p := range []pool.Priority{pool.MaxPriority + 1, math.MinInt} {
		if _, err := pl.Enqueue(ctx, Work.With(WorkArgs{}), pool.WithPriority(p)); !errors.Is(err, pool.ErrInvalidConfig) {
			t.Errorf("priority %d: %v", p, err)
		}
	}
	for _, id := range []string{"", "a.b", "*", ">", "a b", strings.Repeat("x", 201)} {
		if _, err := pl.Enqueue(ctx, Work.With(WorkArgs{}), pool.WithID(id)); id != "" && !errors.Is(err, jetflow.ErrInvalidRunID) {
			t.Errorf("id %q: %v", id, err)
		}
		if _, err := pl.Status(ctx, id); !errors.Is(err, jetflow.ErrInvalidRunID) {
			t.Errorf("status %q: %v", id, err)
		}
		if err := pl.Cancel(ctx, id); !errors.Is(err, jetflow.ErrInvalidRunID) {
			t.Errorf("cancel %q: %v", id, err)
		}
	}
}
