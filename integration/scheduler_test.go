package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

func schedulerArgs(url, id string, extra ...string) []string {
	return append([]string{"--url", url, "--role", "scheduler", "--id", id, "--lease-ttl", "2s"}, extra...)
}

// Two scheduler processes share 500 delayed runs: only the leader
// dispatches, and when it is SIGKILLed mid-way the standby takes the lease
// over and dispatches the rest. Each handler runs exactly once per run.
func TestTwoSchedulersNoDoublePublish(t *testing.T) {
	t.Parallel()
	srv := startNATS(t)
	scfg := streams.Config{}
	_, pjs := connect(t, srv.url())
	_, wjs := connect(t, srv.url())
	p := newProducer(t, pjs, scfg)
	runs := watchRuns(t, pjs, scfg)
	fn := jetflow.Define[args]("it.twosched")
	c := newCalls()
	startWorker(t, wjs, worker.Config{AckWait: 5 * time.Second, Concurrency: 50}, fn, c)

	s1 := startProc(t, "scheduler-1", schedulerArgs(srv.url(), "s1")...)
	s1.waitLine(30*time.Second, func(l string) bool { return l == "LEADER s1" })
	s2 := startProc(t, "scheduler-2", schedulerArgs(srv.url(), "s2")...)

	ids := scheduleParallel(t, p, delayedItems(fn, "twosched", 500, time.Now().Add(2*time.Second), 3*time.Second), 100)
	testserver.Eventually(t, 60*time.Second, "150 runs to fire", func() bool { return c.distinct() >= 150 })
	s1.kill()
	t.Logf("leader killed after %d of 500 runs had fired", c.distinct())
	s2.waitLine(30*time.Second, func(l string) bool { return l == "LEADER s2" })

	runs.waitDone(t, 60*time.Second, ids)
	if twice := checkOnce(t, runs, ids, c.get); len(twice) > 0 {
		t.Errorf("%d runs had their handler run more than once: %v", len(twice), twice)
	}
}

// A crashed producer leaves a pending record and no message (or no delayed
// entry). The scheduler's repair sweep finds it and dispatches it; it runs
// to success once.
func TestCrashBetweenRecordAndPublishRepaired(t *testing.T) {
	t.Parallel()
	srv := startNATS(t)
	scfg := streams.Config{}
	_, pjs := connect(t, srv.url())
	_, wjs := connect(t, srv.url())
	p := newProducer(t, pjs, scfg)
	runs := watchRuns(t, pjs, scfg)
	fn := jetflow.Define[args]("it.repair")
	c := newCalls()
	startWorker(t, wjs, worker.Config{}, fn, c)
	s := startProc(t, "scheduler", schedulerArgs(srv.url(), "s", "--repair-interval", "500ms", "--repair-grace", "500ms")...)

	// What RunAt writes before it publishes, without the publish: one run
	// due a minute ago (its message never sent), one due in a second (its
	// delayed entry never written).
	now := time.Now().UTC()
	ids := []string{"lost-message", "lost-delayed"}
	for i, due := range []time.Time{now.Add(-time.Minute), now.Add(time.Second)} {
		_, err := engine.Of(p).Store().Create(context.Background(), &jetflow.Run{
			ID: ids[i], Name: fn.Name(), Kind: jetflow.Retryable, Args: []byte(`{"n":1}`),
			State: jetflow.Pending, ScheduledTime: due, CreationTime: now.Add(-time.Minute),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	runs.waitDone(t, 60*time.Second, ids)
	if twice := checkOnce(t, runs, ids, c.get); len(twice) > 0 {
		t.Errorf("%d runs had their handler run more than once: %v", len(twice), twice)
	}
	testserver.Eventually(t, 10*time.Second, "repair logged", func() bool {
		return strings.Contains(s.stderr.String(), "repaired run")
	})
}
