package dashboard

import (
	"context"
	"testing"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
)

// A right is probed once and its answer kept rightsTTL: pages loaded
// meanwhile ask the server nothing. Each right has its own answer.
func TestRightsProbedOncePerTTL(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := New(p, Config{}).(*handler)
	if !h.mayWrite(ctx, writeRuns) {
		t.Fatal("an unrestricted user may not write runs")
	}
	asked := h.rights.asked[writeRuns]
	if asked.IsZero() || !h.rights.asked[writePaused].IsZero() {
		t.Fatalf("asked after one probe: %v", h.rights.asked)
	}
	for range 3 {
		if !h.mayWrite(ctx, writeRuns) || h.rights.asked[writeRuns] != asked {
			t.Fatalf("probed again within %v: %v", rightsTTL, h.rights.asked)
		}
	}
	h.rights.asked[writeRuns] = asked.Add(-rightsTTL) // a minute later
	if !h.mayWrite(ctx, writeRuns) || !h.rights.asked[writeRuns].After(asked) {
		t.Fatalf("not probed again after %v: %v", rightsTTL, h.rights.asked)
	}
}
