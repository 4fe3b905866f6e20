package integration_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
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
		retry(t, 90*time.Second, node.name+" current on "+name, func(ctx context.Context) error {
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
// whose context allows 10 s (20 s in the short version CI runs) succeed
// through the elections, nothing is lost
// or run twice, and no delayed run starts more than 10 s after it is due.
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
	start := time.Now()
	// Each producer call's context: 10 s in the long version (task faults,
	// a quiet machine; an election takes 4-8 s there); 20 s in the short
	// one, which CI runs beside every other package on 2 cores, where an
	// election under that load took up to 8 s and the call's own retries
	// the rest. Either way a call must ride out the election, not fail.
	callTimeout := pick(20*time.Second, 10*time.Second)
	e.load("e1", n, spread, "--retry=false", "--call-timeout", callTimeout.String())

	var victims []string
	every := spread / time.Duration(kills+1)
	for k := range kills {
		sleepUntil(start.Add(every * time.Duration(k+1)))
		stream := all[k%2] // the function stream, then the runs bucket
		victim := streamLeader(t, e.js, stream, nodes)
		victim.stop(syscall.SIGKILL)
		t0 := time.Now()
		// Started again once the others have elected a new leader.
		testserver.Eventually(t, 60*time.Second, "new leader of "+stream, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			s, err := e.js.Stream(ctx, stream)
			if err != nil {
				return false
			}
			ci := s.CachedInfo().Cluster
			return ci != nil && ci.Leader != "" && ci.Leader != victim.name
		})
		victims = append(victims, fmt.Sprintf("%s(%s,%s)", victim.name, strings.TrimPrefix(stream, "KV_"), time.Since(t0).Round(100*time.Millisecond)))
		victim.start()
		waitCurrent(t, e.js, victim, all...)
	}
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
		if d > 10*time.Second {
			late++
			if len(lateEg) < 5 {
				lateEg = append(lateEg, fmt.Sprintf("%s(%s)", id, d.Round(100*time.Millisecond)))
			}
		}
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
	f.set("late_over_10s", late)
	f.set("max_late", maxLate)
	f.set("wall", time.Since(began))
	f.print(t, "e cluster-failover")
	alive(t, append(workers, scheds...)...)
	if callFailures > 0 {
		t.Errorf("%d of %d producer calls with a %s context failed, e.g. %v", callFailures, n, callTimeout, failEg)
	}
	// The 10 s bound is a figure of the machine as much as of jetflow (an
	// election alone takes 4-8 s here): the long version (task faults, on a
	// quiet machine) holds it; the short one, which CI runs beside every
	// other package, fails only on what no load explains: a run left to the
	// repair sweep (40 s and more).
	switch {
	case faultsLong() && late > 0:
		t.Errorf("%d of %d delayed runs started more than 10 s late, e.g. %v", late, delayed, lateEg)
	case late > 0 && maxLate > 30*time.Second:
		t.Errorf("%d of %d delayed runs started more than 10 s late, the latest %s (more than 30 s: left to the repair sweep?), e.g. %v",
			late, delayed, maxLate, lateEg)
	case late > 0:
		t.Logf("%d of %d delayed runs started more than 10 s late under this load (latest %s); task faults holds the 10 s bound", late, delayed, maxLate)
	}
	c.assert(t, e)
}
