package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startCluster starts three clustered nats-server processes.
func startCluster(t *testing.T) []*natsServer {
	t.Helper()
	nodes := make([]*natsServer, 3)
	routes := make([]string, 3)
	for i := range nodes {
		nodes[i] = newNATS(t, fmt.Sprintf("node%d", i+1), freePort(t))
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", nodes[i].clusterPort)
	}
	for i, n := range nodes {
		for j, r := range routes {
			if j != i {
				n.routes = append(n.routes, r)
			}
		}
	}
	for _, n := range nodes {
		n.start()
	}
	return nodes
}

func clusterURL(nodes []*natsServer) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.url()
	}
	return strings.Join(urls, ",")
}

// A three-node cluster with R3 streams and buckets: producers, two worker
// processes and two scheduler processes connected with every node's URL.
// 150 runs due now are in flight or queued when the node leading the runs
// bucket is SIGKILLed; a producer process then schedules 150 delayed runs
// on the two nodes left. Every run succeeds, none is lost, none is recorded
// twice; the node then restarts and catches up.
func TestCluster3Node(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	url := clusterURL(nodes)
	scfg := streams.Config{Replicas: 3}
	_, pjs := connect(t, url)
	_, ljs := connect(t, url)
	waitJetStream(t, pjs)
	p := newProducer(t, pjs, scfg)
	runs := watchRuns(t, ljs, scfg)
	fn := jetflow.Define[args]("it.cluster")
	release := filepath.Join(t.TempDir(), "release")

	wargs := func(id string) []string {
		return []string{"--url", url, "--role", "worker", "--id", id, "--function", fn.Name(), "--replicas", "3",
			"--ack-wait", "5s", "--concurrency", "5", "--release-file", release}
	}
	w1 := startProc(t, "worker-1", wargs("w1")...)
	w2 := startProc(t, "worker-2", wargs("w2")...)
	startProc(t, "scheduler-1", schedulerArgs(url, "s1", "--replicas", "3")...)
	startProc(t, "scheduler-2", schedulerArgs(url, "s2", "--replicas", "3")...)

	// 150 runs due now, scheduled in one atomic batch.
	ids, err := p.Batch(context.Background(), delayedItems(fn, "now", 150, time.Time{}, 0))
	if err != nil {
		t.Fatal(err)
	}
	// Handlers hold their runs until released: the node dies with runs in
	// flight on both workers and most of the 150 still queued.
	started := func() int { return len(markers("STARTED", w1, w2)) }
	testserver.Eventually(t, 60*time.Second, "10 runs in flight", func() bool { return started() >= 10 })
	victim := runsLeader(t, pjs, scfg, nodes)
	victim.stop(syscall.SIGKILL)
	t.Logf("killed %s (leader of the runs bucket) with %d runs started", victim.name, started())
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// 150 delayed runs scheduled one by one by a producer process, on the
	// two nodes left.
	prod := startProc(t, "producer", "--url", url, "--role", "producer", "--id", "p", "--function", fn.Name(),
		"--replicas", "3", "--count", "150", "--after", "1s", "--spread", "3s", "--id-prefix", "late")
	prod.waitLine(90*time.Second, func(l string) bool { return l == "DONE" })
	for id := range markers("ENQUEUED", prod) {
		ids = append(ids, id)
	}
	if len(ids) != 300 {
		t.Fatalf("%d runs scheduled, want 300", len(ids))
	}

	runs.waitDone(t, 90*time.Second, ids)
	waitMarkers(t, 30*time.Second, "SUCCESS", ids, w1, w2)
	n1, n2 := markers("SUCCESS", w1), markers("SUCCESS", w2)
	sameAttempt := checkOnce(t, runs, ids, func(id string) int { return n1[id] + n2[id] })
	for _, id := range ids {
		if r, err := p.Get(context.Background(), id); err != nil || r.State != jetflow.Success {
			t.Fatalf("Get(%s) = %+v, %v; want success", id, r, err)
		}
	}

	// The node comes back and catches up on every jetflow stream.
	victim.start()
	for _, name := range []string{scfg.WithDefaults().FunctionStream(), streams.KVStream(scfg.WithDefaults().RunsBucket()), streams.KVStream(scfg.WithDefaults().DelayedBucket())} {
		testserver.Eventually(t, 60*time.Second, victim.name+" current on "+name, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s, err := pjs.Stream(ctx, name)
			if err != nil {
				return false
			}
			ci := s.CachedInfo().Cluster
			if ci == nil || ci.Leader == "" {
				return false
			}
			if ci.Leader == victim.name {
				return true
			}
			for _, r := range ci.Replicas {
				if r.Name == victim.name {
					return r.Current && !r.Offline && r.Lag == 0
				}
			}
			return false
		})
	}
	reportReruns(t, sameAttempt)
}

// runsLeader returns the node that leads the runs bucket's stream.
func runsLeader(t *testing.T, js jetstream.JetStream, scfg streams.Config, nodes []*natsServer) *natsServer {
	t.Helper()
	var leader string
	retry(t, 30*time.Second, "runs bucket leader", func(ctx context.Context) error {
		s, err := js.Stream(ctx, streams.KVStream(scfg.WithDefaults().RunsBucket()))
		if err != nil {
			return err
		}
		if ci := s.CachedInfo().Cluster; ci != nil && ci.Leader != "" {
			leader = ci.Leader
			return nil
		}
		return fmt.Errorf("no leader")
	})
	for _, n := range nodes {
		if n.name == leader {
			return n
		}
	}
	t.Fatalf("leader %q is not one of the nodes", leader)
	return nil
}

// The function stream's consumer changes leader three times while two
// workers run 300 runs: every run ends success, each handler once for its
// attempt (claimed first, the default on a cluster).
func TestClusterConsumerLeaderChanges(t *testing.T) {
	t.Parallel()
	url, scfg, nc, p, runs := stepDownEnv(t)
	fn := jetflow.Define[args]("it.stepdown")
	wargs := func(id string) []string {
		return []string{"--url", url, "--role", "worker", "--id", id, "--function", fn.Name(), "--replicas", "3",
			"--ack-wait", "5s", "--concurrency", "5", "--work", "20ms"}
	}
	w1 := startProc(t, "worker-1", wargs("w1")...)
	w2 := startProc(t, "worker-2", wargs("w2")...)
	ids, err := p.Batch(context.Background(), delayedItems(fn, "step", 300, time.Time{}, 0))
	if err != nil {
		t.Fatal(err)
	}
	stepDownWhileRunning(t, nc, scfg, fn.Name(), 3, 60, w1, w2)
	runs.waitDone(t, 120*time.Second, ids)
	waitMarkers(t, 30*time.Second, "SUCCESS", ids, w1, w2)
	n1, n2 := markers("SUCCESS", w1), markers("SUCCESS", w2)
	reportReruns(t, checkOnce(t, runs, ids, func(id string) int { return n1[id] + n2[id] }))
}

// stepDownEnv starts a 3-node cluster for a consumer leader change test:
// its URL, R3 streams, a connection for the step-downs, a producer and the
// runs' log.
func stepDownEnv(t *testing.T) (string, streams.Config, *nats.Conn, *producer.Producer, *runLog) {
	nodes := startCluster(t)
	url := clusterURL(nodes)
	scfg := streams.Config{Replicas: 3}
	nc, pjs := connect(t, url)
	_, ljs := connect(t, url)
	waitJetStream(t, pjs)
	return url, scfg, nc, newProducer(t, pjs, scfg), watchRuns(t, ljs, scfg)
}

// stepDownWhileRunning has the consumer leader of function fn step down
// times times, after every each runs started on the workers.
func stepDownWhileRunning(t *testing.T, nc *nats.Conn, scfg streams.Config, fn string, times, each int, workers ...*proc) {
	t.Helper()
	cfg := scfg.WithDefaults()
	stepdown := "$JS.API.CONSUMER.LEADER.STEPDOWN." + cfg.FunctionStream() + "." + worker.ConsumerName(cfg.Prefix, fn)
	started := func() int { return len(markers("STARTED", workers...)) }
	for i := 1; i <= times; i++ {
		testserver.Eventually(t, 60*time.Second, fmt.Sprintf("%d runs started", each*i), func() bool { return started() >= each*i })
		resp, err := nc.Request(stepdown, nil, 10*time.Second)
		if err != nil {
			t.Fatalf("stepdown %d: %v", i, err)
		}
		var r struct {
			Success bool                `json:"success"`
			Error   *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(resp.Data, &r); err != nil || !r.Success {
			t.Fatalf("stepdown %d: %s (%v)", i, resp.Data, err)
		}
		t.Logf("consumer leader stepped down with %d runs started", started())
	}
}

// Runs given a ClaimAfter on a cluster are claimed late (one record write per
// run), so a consumer leader change that redelivers the messages in flight
// at once finds their runs unclaimed, running on the other worker. Each
// handler still runs once: the server counts those redeliveries (it sends a
// message only once its delivery is replicated), and a worker holds back a
// second delivery of an unclaimed run until the worker running it has
// claimed it. The handlers here outlast neither ClaimAfter nor AckWait's
// heartbeats: without the hold-back each redelivery to the other worker
// runs its handler a second time. The runs wait longer than AckWait before
// their delivery, so the new leader redelivers them at once.
func TestClusterLateClaimsAcrossConsumerLeaderChanges(t *testing.T) {
	t.Parallel()
	url, scfg, nc, p, runs := stepDownEnv(t)
	fn := jetflow.Define[args]("it.lateclaim")
	wargs := func(id string) []string {
		return []string{"--url", url, "--role", "worker", "--id", id, "--function", fn.Name(), "--replicas", "3",
			"--ack-wait", "1s", "--concurrency", "5", "--work", "300ms", "--claim-after", "2s"}
	}
	ids, err := p.Batch(context.Background(), delayedItems(fn, "late", 150, time.Time{}, 0))
	if err != nil {
		t.Fatal(err)
	}
	w1 := startProc(t, "worker-1", wargs("w1")...)
	w2 := startProc(t, "worker-2", wargs("w2")...)
	stepDownWhileRunning(t, nc, scfg, fn.Name(), 4, 25, w1, w2)
	runs.waitDone(t, 180*time.Second, ids)
	waitMarkers(t, 30*time.Second, "SUCCESS", ids, w1, w2)
	s1, s2 := markers("STARTED", w1), markers("STARTED", w2)
	reportReruns(t, checkOnce(t, runs, ids, func(id string) int { return s1[id] + s2[id] }))
	for _, id := range ids {
		if r, _ := runs.get(id); r.State == jetflow.Success && r.Attempts != 1 {
			t.Errorf("run %s: %d attempts, want 1", id, r.Attempts)
		}
	}
}

// Workflows on a cluster, every consumer of the function stream changing
// leader three times while their steps run, unclaimed: each workflow
// succeeds, and each of its steps ran once and is journaled done once. (A
// guard: the journal's own step records also keep a step from running
// twice here, with or without the worker's hold-back of redeliveries.)
func TestClusterWorkflowsAcrossConsumerLeaderChanges(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	url := clusterURL(nodes)
	scfg := streams.Config{Replicas: 3}
	e := newLoadEnv(t, url, scfg, "--replicas", "3")
	nc, _ := connect(t, url)
	// Steps that run unclaimed for all of their second (ClaimAfter 2 s),
	// messages older than AckWait by then: a new consumer leader
	// redelivers them at once.
	wflags := []string{"--workflow", "--work", "1s", "--ack-wait", "1s", "--claim-after", "2s"}
	e.worker("cw1", wflags...)
	e.worker("cw2", wflags...)
	e.scheduler("cs1")
	ctx := context.Background()
	const n = 40
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("cwf-%d", i)
		retry(t, 30*time.Second, "start "+ids[i], func(ctx context.Context) error {
			_, err := workflow.Start(ctx, e.p, flowDef, flowArgs{N: i}, workflow.WithID(ids[i]))
			return err
		})
	}
	fnStream := scfg.WithDefaults().FunctionStream()
	for i := 1; i <= 3; i++ {
		testserver.Eventually(t, 60*time.Second, fmt.Sprintf("%d steps run", 30*i), func() bool { return len(readLedger(t, e.ledger)) >= 30*i })
		s, err := e.js.Stream(ctx, fnStream)
		if err != nil {
			t.Fatal(err)
		}
		names := s.ConsumerNames(ctx)
		var stepped int
		for name := range names.Name() {
			resp, err := nc.Request("$JS.API.CONSUMER.LEADER.STEPDOWN."+fnStream+"."+name, nil, 10*time.Second)
			if err == nil && strings.Contains(string(resp.Data), `"success":true`) {
				stepped++
			}
		}
		t.Logf("%d consumers stepped down with %d steps run", stepped, len(readLedger(t, e.ledger)))
	}
	ended := map[string]*workflow.Status{}
	testserver.Eventually(t, 3*time.Minute, "every workflow ended", func() bool {
		for _, id := range ids {
			if ended[id] == nil {
				if st, err := workflow.Get(ctx, e.p, id); err == nil && st.Run.State.Terminal() {
					ended[id] = st
				}
			}
		}
		return len(ended) == n
	})
	execs := map[string]int{}
	for _, l := range readLedger(t, e.ledger) {
		execs[l.id]++
	}
	for _, id := range ids {
		st := ended[id]
		if st.Run.State != jetflow.Success || string(st.Run.Result) != `"abc"` {
			t.Errorf("%s: %s %q %s, want success \"abc\"", id, st.Run.State, st.Run.Error, st.Run.Result)
		}
		done := map[string]int{}
		for _, s := range st.Steps {
			if s.State == workflow.StepDone {
				done[s.Name]++
			}
		}
		for _, step := range []string{"a", "b", "c"} {
			if execs[id+"/"+step] != 1 || done[step] != 1 {
				t.Errorf("%s: step %s ran %d times, journaled done %d times; want 1 and 1", id, step, execs[id+"/"+step], done[step])
			}
		}
	}
}
