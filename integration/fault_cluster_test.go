package integration_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// streamLeader returns the node leading stream.
func streamLeader(t *testing.T, js jetstream.JetStream, stream string, nodes []*natsServer) *natsServer {
	t.Helper()
	var leader string
	retry(t, 60*time.Second, stream+" leader", func(ctx context.Context) error {
		s, err := js.Stream(ctx, stream)
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
	t.Fatalf("leader %q of %s is not one of the nodes", leader, stream)
	return nil
}

// waitCurrent waits until node is a current replica (or the leader) of
// each stream.
func waitCurrent(t *testing.T, js jetstream.JetStream, node *natsServer, names ...string) {
	t.Helper()
	for _, name := range names {
		retry(t, 3*time.Minute, node.name+" current on "+name, func(ctx context.Context) error {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return err
			}
			ci := s.CachedInfo().Cluster
			if ci == nil || ci.Leader == "" {
				return fmt.Errorf("no leader")
			}
			if ci.Leader == node.name {
				return nil
			}
			for _, r := range ci.Replicas {
				if r.Name == node.name && r.Current && !r.Offline && r.Lag == 0 {
					return nil
				}
			}
			return fmt.Errorf("%s not current", node.name)
		})
	}
}

// (e) On three nats-server processes with R3 streams and buckets, the
// node leading the function stream or the runs bucket is SIGKILLed under
// load, and started again once a new leader is elected: producer calls
// whose context allows 15 s (20 s in the short version CI runs) succeed
// through the elections, nothing is lost
// or run twice, and no delayed run starts more than 10 s after it is due,
// or 3 s after the slowest election of a stream on its way when that took
// longer than 7 s (nats-server's election timeout is random in [4 s, 9 s]).
func TestFaultClusterFailover(t *testing.T) {
	t.Parallel()
	began := time.Now()
	kills := pick(2, 4)
	n := pick(400, 2000)
	spread := pick(24*time.Second, 80*time.Second)

	nodes := startCluster(t)
	url := clusterURL(nodes)
	scfg := streams.Config{Replicas: 3}
	extra := []string{"--replicas", "3"}
	if ca := os.Getenv("JETFLOW_FAULT_CLAIM_AFTER"); ca != "" {
		// Late claims on the cluster (an opt-in there): the workers' ClaimAfter.
		extra = append(extra, "--claim-after", ca)
	}
	e := newLoadEnv(t, url, scfg, extra...)
	workers := []*proc{e.worker("w1"), e.worker("w2")}
	// The scheduler's defaults: lease, repair interval and grace.
	sflags := []string{"--lease-ttl", "5s", "--repair-interval", "30s", "--repair-grace", "10s"}
	scheds := []*proc{e.scheduler("s1", sflags...), e.scheduler("s2", sflags...)}
	def := scfg.WithDefaults()
	all := []string{def.FunctionStream(), streams.KVStream(def.RunsBucket()), streams.KVStream(def.DelayedBucket())}
	// Every stream a delayed run's way goes through: the delayed store,
	// the scheduler's lease, the function stream, the runs bucket. A kill
	// takes the leaders of all those the victim led; the run waits for the
	// slowest of their elections.
	path := append(slices.Clone(all), streams.KVStream(def.LeasesBucket()))
	start := time.Now()
	// Each producer call's context: 15 s in the long version (task faults,
	// a quiet machine), as README advises: an election takes 4-9 s
	// (nats-server's election timeout is random in [4 s, 9 s]) and a try
	// sent before the new leader is in place waits up to 2 s for its reply
	// (10 s failed once, after a 9.1 s election); 20 s in the short one,
	// which CI runs beside every other package on 2 cores. Either way a
	// call must ride out the election, not fail.
	callTimeout := pick(20*time.Second, 15*time.Second)
	e.load("e1", n, spread, "--retry=false", "--call-timeout", callTimeout.String())

	var victims []string
	var slowest time.Duration // the longest a kill left a stream of path without a leader
	every := spread / time.Duration(kills+1)
	for k := range kills {
		sleepUntil(start.Add(every * time.Duration(k+1)))
		stream := all[k%2] // the function stream, then the runs bucket
		victim := streamLeader(t, e.js, stream, nodes)
		victim.stop(syscall.SIGKILL)
		t0 := time.Now()
		t.Logf("%s: %s (leading %s) killed", t0.Format(time.StampMilli), victim.name, stream)
		// Started again once the others have elected a new leader of
		// every stream of path.
		var elected time.Duration
		for _, name := range path {
			testserver.Eventually(t, 60*time.Second, "new leader of "+name, func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				s, err := e.js.Stream(ctx, name)
				if err != nil {
					return false
				}
				ci := s.CachedInfo().Cluster
				return ci != nil && ci.Leader != "" && ci.Leader != victim.name
			})
			if name == stream {
				elected = time.Since(t0)
			}
		}
		slowest = max(slowest, time.Since(t0))
		victims = append(victims, fmt.Sprintf("%s(%s,%s,all %s)", victim.name, strings.TrimPrefix(stream, "KV_"),
			elected.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond)))
		victim.start()
		waitCurrent(t, e.js, victim, all...)
	}
	// A delayed run due while a stream of its way has no leader cannot
	// start before that stream's election is over, and nats-server's raft
	// election timeout is random in [4 s, 9 s): the bound is 10 s, or 3 s
	// after the slowest election when that took longer than 7 s.
	bound := max(10*time.Second, slowest+3*time.Second)
	e.loadDone(spread + 3*time.Minute)
	classes, callFailures := e.accepted()
	c := e.check(pick(2*time.Minute, 4*time.Minute))

	// Lateness of delayed runs: started after their due time.
	var delayed, late int
	var maxLate time.Duration
	var lateEg []string
	for id, class := range classes {
		if !strings.Contains(class, "after") && !strings.HasSuffix(class, "at") {
			continue
		}
		r := c.recs[id]
		if r == nil || r.StartedTime.IsZero() {
			continue
		}
		delayed++
		d := r.StartedTime.Sub(r.ScheduledTime)
		maxLate = max(maxLate, d)
		if d > bound {
			late++
			if len(lateEg) < 5 {
				lateEg = append(lateEg, fmt.Sprintf("%s(%s: %s %s scheduled %s created %s started %s attempts %d history %+v)", id, d.Round(100*time.Millisecond),
					r.Name, class, r.ScheduledTime.Format(time.StampMilli), r.CreationTime.Format(time.StampMilli),
					r.StartedTime.Format(time.StampMilli), r.Attempts, r.History))
			}
		}
	}
	// The latest three, for diagnosis (JETFLOW_FAULT_LOGS=<dir> keeps every
	// process's debug log).
	type lateRun struct {
		id string
		d  time.Duration
	}
	var latest []lateRun
	for id, class := range classes {
		if r := c.recs[id]; r != nil && !r.StartedTime.IsZero() && (strings.Contains(class, "after") || strings.HasSuffix(class, "at")) {
			latest = append(latest, lateRun{id, r.StartedTime.Sub(r.ScheduledTime)})
		}
	}
	slices.SortFunc(latest, func(a, b lateRun) int { return cmp.Compare(b.d, a.d) })
	for _, l := range latest[:min(3, len(latest))] {
		r := c.recs[l.id]
		t.Logf("late %s: %s, %s scheduled %s started %s attempts %d", l.id, l.d.Round(10*time.Millisecond), r.Name,
			r.ScheduledTime.Format(time.StampMilli), r.StartedTime.Format(time.StampMilli), r.Attempts)
	}
	var failEg []string
	for _, l := range e.loads[0].snapshot() {
		if strings.HasPrefix(l, "FAILED ") && len(failEg) < 3 {
			failEg = append(failEg, l)
		}
	}

	f := newFigures()
	f.set("kills", kills)
	f.set("victims", strings.Join(victims, ","))
	f.set("calls", n)
	f.set("call_failures", callFailures)
	c.report(t, f)
	f.set("delayed", delayed)
	f.set("slowest_election", slowest.Round(100*time.Millisecond))
	f.set("late_bound", bound.Round(100*time.Millisecond))
	f.set("late_over_bound", late)
	f.set("max_late", maxLate)
	f.set("wall", time.Since(began))
	f.print(t, "e cluster-failover")
	alive(t, append(workers, scheds...)...)
	if callFailures > 0 {
		t.Errorf("%d of %d producer calls with a %s context failed, e.g. %v", callFailures, n, callTimeout, failEg)
	}
	// The bound is a figure of the machine as much as of jetflow (an
	// election alone takes 4-9 s): the long version (task faults, on a
	// quiet machine) holds it; the short one, which CI runs beside every
	// other package, fails only on what no load explains: a run left to the
	// repair sweep (40 s and more).
	switch {
	case faultsLong() && late > 0:
		t.Errorf("%d of %d delayed runs started more than %s late (the slowest election %s), e.g. %v", late, delayed, bound, slowest, lateEg)
	case late > 0 && maxLate > 30*time.Second:
		t.Errorf("%d of %d delayed runs started more than %s late, the latest %s (more than 30 s: left to the repair sweep?), e.g. %v",
			late, delayed, bound, maxLate, lateEg)
	case late > 0:
		t.Logf("%d of %d delayed runs started more than %s late under this load (latest %s); task faults holds the bound", late, delayed, bound, maxLate)
	}
	c.assert(t, e)
}

// whereIs logs, for each of ids (runs the checks found missing), what each
// node's own replica of the runs bucket holds: a direct get sent on a
// connection to that node, which its local replica answers first, with the
// stream's last sequence as each node's stream info reports it. A run
// stored on some replicas and not others is a replica divergence in the
// server; one on none was never stored. For diagnosis only.
func whereIs(t *testing.T, nodes []*natsServer, ids []string) {
	t.Helper()
	def := streams.Config{}.WithDefaults()
	stream := streams.KVStream(def.RunsBucket())
	for _, nd := range nodes {
		nc, err := nats.Connect(nd.url(), nats.Name("whereIs"))
		if err != nil {
			t.Logf("whereIs: %s: %v", nd.name, err)
			continue
		}
		var found []string
		for _, id := range ids[:min(len(ids), 5)] {
			subj := "$JS.API.DIRECT.GET." + stream + "." + streams.KVSubject(def.RunsBucket(), id)
			m, err := nc.Request(subj, nil, 2*time.Second)
			switch {
			case err != nil:
				found = append(found, id+"=error:"+err.Error())
			case m.Header.Get("Status") != "":
				found = append(found, id+"=status "+m.Header.Get("Status"))
			default:
				found = append(found, fmt.Sprintf("%s=seq %s (%d bytes)", id, m.Header.Get("Nats-Sequence"), len(m.Data)))
			}
		}
		t.Logf("whereIs: %s holds %v", nd.name, found)
		nc.Close()
	}
}
