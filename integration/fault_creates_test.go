package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
)

// (c) Creates on a cut-off leader: guarantee 1 where it is most exposed.
// On the 3-node cluster (R3), producers connected only to the node that
// leads the runs bucket keep creating runs with their own ids (due now
// and delayed, each id tried again after an error, as a caller does)
// while that node's routes are cut for 6-12 s, several times. A cut-off
// leader refuses a retried create over its own uncommitted first try;
// every id the producer reported (its id, or ErrAlreadyExists) must have
// a record once the cluster is whole. The load scenarios see a handful of
// such refusals a run; this one makes hundreds.
func TestFaultPartitionCreates(t *testing.T) {
	t.Parallel()
	cuts := pick(2, 6)
	nodes, part := startPartitionedCluster(t)
	scfg := streams.Config{Replicas: 3}
	_, js := connect(t, clusterURL(nodes))
	waitJetStream(t, js)
	newProducer(t, js, scfg) // provisions the streams and buckets at R3
	runs := streams.KVStream(scfg.WithDefaults().RunsBucket())

	var mu sync.Mutex
	reported := map[string]string{} // id -> "ok" or "exists"
	answers := map[string]string{}  // id -> the exists answer's text
	tries := map[string]int{}
	for k := range cuts {
		leader := streamLeader(t, js, runs, nodes)
		// Each producer reaches the cluster through the leader's proxy
		// first (it may learn the others' and move, as clients do).
		_, pjs := connect(t, part.ClientURL(leader.name))
		p := newProducer(t, pjs, scfg)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("c%d-g%d-%d", k, g, i)
					outcome, n, text := createUntilAnswered(p, id, g%2 == 1, stop)
					mu.Lock()
					if outcome == "exists" {
						answers[id] = text
					}
					tries[id] = n
					if outcome != "" {
						reported[id] = outcome
					}
					mu.Unlock()
				}
			})
		}
		time.Sleep(500 * time.Millisecond)
		c := testserver.Cut{Node: leader.name, Hold: k%2 == 1}
		d := pick(6*time.Second, 6*time.Second+time.Duration(k)*time.Second)
		part.Cut(c)
		t.Logf("cut %d: %s (leading %s) cut off (%s) for %s", k+1, leader.name, runs, c, d)
		time.Sleep(d)
		part.Heal()
		time.Sleep(2 * time.Second)
		close(stop)
		wg.Wait()
		waitCurrent(t, js, leader, runs)
	}

	ids := make([]string, 0, len(reported))
	exists, retried := 0, 0
	for id, o := range reported {
		ids = append(ids, id)
		if o == "exists" {
			exists++
		}
		if tries[id] > 1 {
			retried++
		}
	}
	sort.Strings(ids)
	chk := newProducer(t, js, scfg)
	var missing, missingIDs []string
	for _, id := range ids {
		var err error
		retry2(15*time.Second, func(ctx context.Context) error {
			_, err = chk.Get(ctx, id)
			return err
		})
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s(%s after %d tries: %v; answered %q)", id, reported[id], tries[id], err, answers[id]))
			missingIDs = append(missingIDs, id)
		}
	}
	f := newFigures()
	f.set("cuts", cuts)
	f.set("reported", len(ids))
	f.set("retried", retried)
	f.set("exists_answers", exists)
	f.set("lost", len(missing))
	f.print(t, "c partition-creates")
	if len(missing) > 0 {
		whereIs(t, nodes, missingIDs)
		t.Errorf("%d of %d runs the producer reported stored have no record, e.g. %v", len(missing), len(ids), missing[:min(len(missing), 5)])
	}
	if retried == 0 {
		t.Errorf("no create was tried again across %d cuts: the scenario did not reach a cut-off leader", cuts)
	}
}

// createUntilAnswered creates run id (due now, or in an hour when
// delayed) until the producer reports it stored ("ok") or taken
// ("exists"), trying the same id again after any other error, as a
// caller does; it gives up ("") once stop is closed and a try failed.
func createUntilAnswered(p *producer.Producer, id string, delayed bool, stop <-chan struct{}) (string, int, string) {
	for n := 1; ; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var err error
		if delayed {
			_, err = p.RunAfter(ctx, time.Hour, jetflow.Call{Name: "fc.create"}, producer.WithID(id))
		} else {
			_, err = p.Enqueue(ctx, jetflow.Call{Name: "fc.create"}, producer.WithID(id))
		}
		cancel()
		switch {
		case err == nil:
			return "ok", n, ""
		case errors.Is(err, producer.ErrAlreadyExists):
			return "exists", n, err.Error()
		}
		select {
		case <-stop:
			return "", n, ""
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// retry2 calls f until it returns nil or within passes, keeping the last
// error where f never succeeded.
func retry2(within time.Duration, f func(ctx context.Context) error) {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
