package integration_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
)

// startPartitionedCluster starts three clustered nats-server processes
// whose client and route ports are behind a testserver.Partition: every
// route goes through the proxies, and the nodes advertise the proxies to
// each other and to clients. The nodes' url() is their own client port
// (the test's connections, never cut).
func startPartitionedCluster(t *testing.T) ([]*natsServer, *testserver.Partition) {
	t.Helper()
	part := testserver.NewPartition(t)
	nodes := make([]*natsServer, 3)
	routes := make([]string, 3)
	for i := range nodes {
		nodes[i] = newNATS(t, fmt.Sprintf("node%d", i+1), freePort(t))
		pc, pr := part.Add(nodes[i].name, nodes[i].port, nodes[i].clusterPort)
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", pr)
		nodes[i].args = []string{"--client_advertise", fmt.Sprintf("127.0.0.1:%d", pc), "--cluster_advertise", fmt.Sprintf("127.0.0.1:%d", pr)}
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
	return nodes, part
}

// (p) Network partitions on the 3-node cluster, every stream and bucket
// R3: the node leading the runs bucket (even cuts) or the function stream
// (odd cuts) is cut off from the other two for 5-15 s (5-8 s in the short
// version), several times, under mixed load from three load processes
// (one connected to each node), three workers (one on each node) and two
// schedulers. TestFaultPartitionRoutes cuts the routes only: the node's
// clients stay connected to it. TestFaultPartitionAll cuts its client
// connections too. In the long version every other pair of cuts holds the
// traffic (a black hole) instead of closing the connections.
func TestFaultPartitionRoutes(t *testing.T) { testFaultPartition(t, false) }

func TestFaultPartitionAll(t *testing.T) { testFaultPartition(t, true) }

func testFaultPartition(t *testing.T, clients bool) {
	t.Parallel()
	began := time.Now()
	rng := faultRand(t)
	cuts := pick(2, 6)
	n := pick(300, 2400)
	spread := pick(20*time.Second, 120*time.Second)
	minCut, maxCut := pick(5*time.Second, 5*time.Second), pick(8*time.Second, 15*time.Second)

	nodes, part := startPartitionedCluster(t)
	scfg := streams.Config{Replicas: 3}
	e := newLoadEnv(t, clusterURL(nodes), scfg, "--replicas", "3")
	// The processes reach the cluster only through the proxies, each
	// connected first to one node (it learns the others' proxies).
	proxied := make([]string, len(nodes))
	for i, nd := range nodes {
		proxied[i] = part.ClientURL(nd.name)
	}
	e.url = strings.Join(proxied, ",")
	on := func(i int) []string { return []string{"--url", proxied[i%len(proxied)]} }
	var workers, scheds []*proc
	for i := range nodes {
		workers = append(workers, e.worker(fmt.Sprintf("w%d", i+1), on(i)...))
	}
	sflags := []string{"--lease-ttl", "5s", "--repair-interval", "30s", "--repair-grace", "10s"}
	for i := range 2 {
		scheds = append(scheds, e.scheduler(fmt.Sprintf("s%d", i+1), append(on(i+1), sflags...)...))
	}
	def := scfg.WithDefaults()
	all := []string{def.FunctionStream(), streams.KVStream(def.RunsBucket()), streams.KVStream(def.DelayedBucket()), streams.KVStream(def.LeasesBucket())}
	start := time.Now()
	for i := range nodes {
		count := n / len(nodes)
		// Handlers work 50 ms, so that each cut finds runs in flight.
		e.load(fmt.Sprintf("f%d", i+1), count, spread, append(on(i), "--work-ms", "50")...)
	}

	var windows []faultWindow
	var victims []string
	every := spread / time.Duration(cuts+1)
	for k := range cuts {
		sleepUntil(start.Add(every * time.Duration(k+1)))
		stream := all[1] // the runs bucket, then the function stream
		if k%2 == 1 {
			stream = all[0]
		}
		victim := streamLeader(t, e.js, stream, nodes)
		c := testserver.Cut{Node: victim.name, Clients: clients, Hold: faultsLong() && k/2%2 == 1}
		d := between(rng, minCut, maxCut)
		from := time.Now()
		part.Cut(c)
		t.Logf("%s: %s (leading %s) cut off (%s) for %s", from.Format(time.StampMilli), victim.name, stream, c, d)
		time.Sleep(d)
		part.Heal()
		to := time.Now()
		windows = append(windows, faultWindow{what: fmt.Sprintf("cut %d of %s", k+1, victim.name), from: from, to: to})
		victims = append(victims, fmt.Sprintf("%s(%s,%s,%s)", victim.name, strings.TrimPrefix(stream, "KV_"), c, d.Round(100*time.Millisecond)))
		waitCurrent(t, e.js, victim, all...)
		windows[len(windows)-1].whole = time.Now()
		t.Logf("%s current again %s after the heal", victim.name, time.Since(to).Round(100*time.Millisecond))
	}
	e.loadDone(spread + 3*time.Minute)
	c := e.check(pick(90*time.Second, 4*time.Minute))
	nc := e.faultCheck(c, windows)

	f := newFigures()
	f.set("cuts", cuts)
	f.set("victims", strings.Join(victims, ","))
	c.report(t, f)
	nc.report(f)
	f.set("wall", time.Since(began))
	scenario := "p partition-routes"
	if clients {
		scenario = "p partition-all"
	}
	f.print(t, scenario)
	if len(c.lost) > 0 {
		whereIs(t, nodes, c.lost)
	}
	alive(t, append(workers, scheds...)...)
	nc.assert(t, e, c, netAssert{})
}

// (h) The nats-server process leading the runs bucket on the 3-node
// cluster (R3) is paused with SIGSTOP for 5-15 s (5-8 s in the short
// version), then resumed with SIGCONT, several times, under mixed load
// from three load processes, three workers (one connected to each node)
// and two schedulers. Its clients hang while it is stopped (nats.go
// notices a dead server only after its pings go unanswered, minutes).
func TestFaultServerPause(t *testing.T) {
	t.Parallel()
	began := time.Now()
	rng := faultRand(t)
	pauses := pick(2, 5)
	n := pick(300, 2400)
	spread := pick(20*time.Second, 120*time.Second)
	minPause, maxPause := pick(5*time.Second, 5*time.Second), pick(8*time.Second, 15*time.Second)

	nodes := startCluster(t)
	scfg := streams.Config{Replicas: 3}
	e := newLoadEnv(t, clusterURL(nodes), scfg, "--replicas", "3")
	on := func(i int) []string { return []string{"--url", nodes[i%len(nodes)].url()} }
	var workers, scheds []*proc
	for i := range nodes {
		workers = append(workers, e.worker(fmt.Sprintf("w%d", i+1), on(i)...))
	}
	sflags := []string{"--lease-ttl", "5s", "--repair-interval", "30s", "--repair-grace", "10s"}
	for i := range 2 {
		scheds = append(scheds, e.scheduler(fmt.Sprintf("s%d", i+1), append(on(i+1), sflags...)...))
	}
	def := scfg.WithDefaults()
	all := []string{def.FunctionStream(), streams.KVStream(def.RunsBucket()), streams.KVStream(def.DelayedBucket()), streams.KVStream(def.LeasesBucket())}
	start := time.Now()
	for i := range nodes {
		e.load(fmt.Sprintf("h%d", i+1), n/len(nodes), spread, append(on(i), "--work-ms", "50")...)
	}

	var windows []faultWindow
	var victims []string
	every := spread / time.Duration(pauses+1)
	for k := range pauses {
		sleepUntil(start.Add(every * time.Duration(k+1)))
		victim := streamLeader(t, e.js, all[1], nodes)
		d := between(rng, minPause, maxPause)
		from := time.Now()
		victim.signal(syscall.SIGSTOP)
		t.Logf("%s: %s (leading the runs bucket) paused for %s", from.Format(time.StampMilli), victim.name, d)
		time.Sleep(d)
		victim.signal(syscall.SIGCONT)
		to := time.Now()
		windows = append(windows, faultWindow{what: fmt.Sprintf("pause %d of %s", k+1, victim.name), from: from, to: to})
		victims = append(victims, fmt.Sprintf("%s(%s)", victim.name, d.Round(100*time.Millisecond)))
		waitCurrent(t, e.js, victim, all...)
		windows[len(windows)-1].whole = time.Now()
		t.Logf("%s current again %s after SIGCONT", victim.name, time.Since(to).Round(100*time.Millisecond))
	}
	e.loadDone(spread + 3*time.Minute)
	c := e.check(pick(90*time.Second, 4*time.Minute))
	nc := e.faultCheck(c, windows)

	f := newFigures()
	f.set("pauses", pauses)
	f.set("victims", strings.Join(victims, ","))
	c.report(t, f)
	nc.report(f)
	f.set("wall", time.Since(began))
	f.print(t, "h server-pause")
	if len(c.lost) > 0 {
		whereIs(t, nodes, c.lost)
	}
	alive(t, append(workers, scheds...)...)
	nc.assert(t, e, c, netAssert{})
}
