package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
)

// The dispatcher's Start returns at once; it runs until Stop,
// StopAndCancel or the end of Start's ctx, and a standby takes over each
// time.
func TestDispatcherLifecycle(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, how := range []string{"ctx end", "Stop", "StopAndCancel"} {
		cfg := testConfig("life")
		a, b := e.newPool(t, cfg), e.newPool(t, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		testserver.Eventually(t, 10*time.Second, how+": a leads", func() bool { return a.Stats().Leader })
		if err := b.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		var err error
		switch how {
		case "ctx end":
			cancel()
		case "Stop":
			err = a.Stop(context.Background())
		case "StopAndCancel":
			err = a.StopAndCancel(context.Background())
		}
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		select {
		case <-a.Stopped():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not stopped", how)
		}
		if a.Stats().Leader {
			t.Fatalf("%s: still leader after stopping", how)
		}
		testserver.Eventually(t, 10*time.Second, how+": the standby takes over", func() bool { return b.Stats().Leader })
		if err := b.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}
