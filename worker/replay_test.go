package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

var replayFn = jetflow.Define[echoArgs]("replay.work")

// A NATS server that crashes before its consumer state reached the disk
// redelivers the runs in flight at once, as first deliveries. Runs that a
// live worker is running without a claim yet (a late claim) must not start
// a second handler in another worker: the worker running them claims them
// when it reconnects, and the other worker, taking such a delivery as a
// possible replay, waits for that claim before it would claim the run.
func TestServerCrashReplayDoesNotRunHandlerTwice(t *testing.T) {
	t.Parallel()
	const runs = 20
	// The time A has, once reconnected, to claim its 20 runs before B may
	// take them: the default, not 2 s, which a loaded machine may need for
	// the reconnect and 20 claim writes (the test takes no longer).
	const replayGrace = worker.DefaultReplayGrace
	e := setup(t, worker.Config{AckWait: 2 * time.Second, ReplayGrace: replayGrace, ID: "A"})
	var n calls
	var mu sync.Mutex
	ranOn := map[string][]string{}
	release := make(chan struct{})
	started := make(chan string, runs)
	handler := func(name string) func(ctx context.Context, j *worker.Job[echoArgs]) error {
		return func(ctx context.Context, j *worker.Job[echoArgs]) error {
			n.add(j.ID())
			mu.Lock()
			ranOn[j.ID()] = append(ranOn[j.ID()], name)
			mu.Unlock()
			if name == "A" {
				started <- j.ID()
				<-release
			}
			return nil
		}
	}
	// Late claims that would not come by themselves while the test runs.
	opts := worker.Options{ClaimAfter: time.Hour, Concurrency: runs}
	worker.Handle(e.W, replayFn, handler("A"), opts)
	e.start(t)
	ctx := context.Background()
	ids := make([]string, runs)
	for i := range ids {
		id, err := e.P.Enqueue(ctx, replayFn.With(echoArgs{N: i}))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	for range runs {
		recv(t, started, "a start on worker A")
	}
	// Worker B, on its own connection, shares the function's consumer.
	_, jsB := e.Connect()
	b, err := worker.New(ctx, jsB, worker.Config{AckWait: 2 * time.Second, ReplayGrace: replayGrace, ID: "B"})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(b, replayFn, handler("B"), opts)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Stop(sctx)
	})

	e.RestartForgettingDeliveries(streams.Config{}.WithDefaults().FunctionStream())

	// Worker A claims what it runs once reconnected (a run B took and
	// finished instead is the failure this test looks for).
	for _, id := range ids {
		testserver.Eventually(t, 20*time.Second, "run "+id+" claimed by A or over", func() bool {
			r, err := e.P.Get(ctx, id)
			return err == nil && (r.State == jetflow.InProgress && r.Owner == "A" || r.State.Terminal())
		})
	}
	// B got replays too (both pull): with them waiting for A's claims (and
	// kept from redelivery by A's heartbeats, which go by stream sequence),
	// A's handlers return and their acks end every copy.
	close(release)
	for _, id := range ids {
		if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
			t.Fatalf("run %s: %+v, want one successful attempt", id, r)
		}
	}
	testserver.Eventually(t, 30*time.Second, "every message acknowledged", func() bool { return queuedMsgs(t, e) == 0 })
	mu.Lock()
	defer mu.Unlock()
	var twice []string
	for _, id := range ids {
		if c := n.of(id); c != 1 {
			twice = append(twice, fmt.Sprintf("%s ran %d times on %v", id, c, ranOn[id]))
		}
	}
	if len(twice) > 0 {
		t.Fatalf("handlers ran twice for one attempt after the server crash: %v", twice)
	}
}

// A run stored once the worker is reconnected after a server restart
// cannot repeat a delivery made before it: it runs at once, whatever
// ReplayGrace, though its stored time falls within the second the worker
// widens its window by (a server clock ahead of its own). The function
// stream's last sequence, read at the reconnect, tells it apart.
func TestRunStoredAfterTheReconnectIsNoReplay(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{ReplayGrace: time.Hour, ID: "A"})
	var n calls
	worker.Handle(e.W, replayFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		n.add(j.ID())
		return nil
	}, worker.Options{})
	e.start(t)
	ctx := context.Background()
	before, err := e.P.Enqueue(ctx, replayFn.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	e.wait(t, before)
	e.Restart()
	testserver.Eventually(t, 20*time.Second, "the worker reconnected and read the stream's last sequence", func() bool {
		return e.NC.IsConnected() && worker.ReplayBoundRead(e.W)
	})
	id, err := e.P.Enqueue(ctx, replayFn.With(echoArgs{N: 2}))
	if err != nil {
		t.Fatal(err)
	}
	// Held back as a possible replay, it would wait an hour.
	if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 || n.of(id) != 1 {
		t.Fatalf("run %s: %+v, ran %d times; want one successful attempt", id, r, n.of(id))
	}
}
