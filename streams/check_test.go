package streams_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
)

// Check finds what Provision would create or change, and nothing once it
// has run.
func TestCheck(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	c := streams.Config{Prefix: "chk"}
	err := streams.Check(ctx, ts.JS, c)
	if !errors.Is(err, streams.ErrNotProvisioned) || !strings.Contains(err.Error(), "CHK_FN is missing") || !strings.Contains(err.Error(), "KV_chk_runs is missing") {
		t.Fatalf("empty server: %v", err)
	}
	if err := streams.Provision(ctx, ts.JS, c); err != nil {
		t.Fatal(err)
	}
	if err := streams.Check(ctx, ts.JS, c); err != nil {
		t.Fatalf("after Provision: %v", err)
	}
	// Zero Replicas keeps the shape; an explicit one is compared.
	if err := streams.Check(ctx, ts.JS, streams.Config{Prefix: "chk", Replicas: 1}); err != nil {
		t.Fatalf("R1: %v", err)
	}
	// A duplicate window is compared only when set.
	err = streams.Check(ctx, ts.JS, streams.Config{Prefix: "chk", DuplicateWindow: time.Minute})
	if !errors.Is(err, streams.ErrNotProvisioned) || !strings.Contains(err.Error(), "duplicate window") {
		t.Fatalf("other duplicate window: %v", err)
	}
	// A bucket without atomic publish needs Provision.
	st, err := ts.JS.Stream(ctx, streams.KVStream("chk_runs"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	if _, err := ts.JS.UpdateStream(ctx, cfg); err != nil {
		t.Skipf("cannot switch atomic publish off: %v", err)
	}
	if err := streams.Check(ctx, ts.JS, c); !errors.Is(err, streams.ErrNotProvisioned) || !strings.Contains(err.Error(), "atomic") {
		t.Fatalf("runs bucket without atomic publish: %v", err)
	}
	if err := streams.Provision(ctx, ts.JS, c); err != nil {
		t.Fatal(err)
	}
	if err := streams.Check(ctx, ts.JS, c); err != nil {
		t.Fatalf("after the second Provision: %v", err)
	}
	if err := streams.Check(ctx, ts.JS, streams.Config{Prefix: "no.dots"}); err == nil || errors.Is(err, streams.ErrNotProvisioned) {
		t.Fatalf("invalid prefix: %v", err)
	}
}

// Provision creates the pools bucket as the pool package needs it, and
// Check reports it missing, or made without what the package needs.
func TestProvisionPools(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	c := streams.Config{Prefix: "pls"}
	if err := streams.Provision(ctx, ts.JS, c); err != nil {
		t.Fatal(err)
	}
	st, err := ts.JS.Stream(ctx, streams.KVStream(c.PoolsBucket()))
	if err != nil {
		t.Fatalf("pools bucket after Provision: %v", err)
	}
	if cfg := st.CachedInfo().Config; cfg.DenyDelete || !cfg.AllowAtomicPublish || !cfg.AllowMsgTTL || !cfg.AllowDirect ||
		len(cfg.Subjects) != 1 || cfg.Subjects[0] != "$KV.pls_pools.>" {
		t.Fatalf("pools bucket: %+v", cfg)
	}
	if err := ts.JS.DeleteStream(ctx, "KV_pls_pools"); err != nil {
		t.Fatal(err)
	}
	if err := streams.Check(ctx, ts.JS, c); !errors.Is(err, streams.ErrNotProvisioned) || !strings.Contains(err.Error(), "KV_pls_pools is missing") {
		t.Fatalf("without the pools bucket: %v", err)
	}
	// One made without message TTLs (by hand): Check says so, Provision
	// allows them.
	cfg := streams.PoolsStreamConfig(c)
	cfg.AllowMsgTTL, cfg.SubjectDeleteMarkerTTL = false, 0
	if _, err := ts.JS.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := streams.Check(ctx, ts.JS, c); !errors.Is(err, streams.ErrNotProvisioned) || !strings.Contains(err.Error(), "message TTLs") {
		t.Fatalf("pools bucket without message TTLs: %v", err)
	}
	if err := streams.Provision(ctx, ts.JS, c); err != nil {
		t.Fatal(err)
	}
	if err := streams.Check(ctx, ts.JS, c); err != nil {
		t.Fatalf("after Provision: %v", err)
	}
}
