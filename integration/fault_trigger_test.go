package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Messages on an existing stream through a trigger run inside a worker
// process that is SIGKILLed again and again (issue 12): every message
// makes exactly one run (its id derived from the stream sequence), each
// with exactly one terminal record; messages the trigger's mapping
// refuses are failed runs with the reason, messages its filter skips make
// none, and the trigger keeps going. Half of the messages are stored
// before the first worker starts, half while it is being killed.
// Short: 5k runs, 3 kills; JETFLOW_FAULTS=long: 100k runs, 10 kills
// (plus one refused and one skipped message per thousand).
func TestFaultTriggerWorkerKill(t *testing.T) {
	// Not parallel: its load (thousands of runs a second on two cores)
	// would eat the deadlines of the cluster failover scenario beside it.
	began := time.Now()
	n := pick(5000, 100_000) // messages that make a successful run
	total := n / 1000 * 1002 // with one refused and one skipped per thousand
	kills := pick(3, 10)
	const fn, name, stream = "ft.trig", "orders", "TRIGSRC"

	srv := startNATS(t)
	_, js := connect(t, srv.url())
	_, ljs := connect(t, srv.url())
	waitJetStream(t, js)
	newProducer(t, js, streams.Config{}) // provisions
	runs := watchRuns(t, ljs, streams.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"src.>"}}); err != nil {
		t.Fatal(err)
	}
	// Of every 1002 messages, the 501st is refused by the mapping, the
	// one after it skipped by the filter.
	kind := func(i int) string {
		switch i % 1002 {
		case 500:
			return "bad"
		case 501:
			return "skip"
		}
		return "ok"
	}
	publish := func(from, to int) error {
		for i := from; i < to; i++ {
			m := &nats.Msg{Subject: "src.orders", Data: []byte(fmt.Sprintf(`{"n":%d}`, i)), Header: nats.Header{}}
			switch kind(i) {
			case "bad":
				m.Header.Set("Bad", "1")
			case "skip":
				m.Header.Set("Skip", "1")
			}
			if _, err := js.PublishMsgAsync(m); err != nil {
				return err
			}
			if i%2000 == 1999 {
				select {
				case <-js.PublishAsyncComplete():
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		select {
		case <-js.PublishAsyncComplete():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := publish(0, total/2); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	epoch := trigger.StreamEpoch(st.CachedInfo().Created)
	want := map[string]string{} // run id -> "ok" or "bad"
	var okIDs []string
	for i := 0; i < total; i++ {
		k := kind(i)
		if k == "skip" {
			continue
		}
		id := trigger.StreamRunID(name, stream, epoch, uint64(i+1))
		want[id] = k
		okIDs = append(okIDs, id)
	}

	sched := startProc(t, "sched", schedulerArgs(srv.url(), "sched")...)
	wargs := func(id string) []string {
		return []string{"--url", srv.url(), "--role", "worker", "--id", id, "--function", fn,
			"--concurrency", "50", "--ack-wait", "5s", "--quiet",
			"--trigger", name, "--trigger-stream", stream, "--trigger-subject", "src.orders"}
	}
	w := startProc(t, "w-0", wargs("w-0")...)
	var pubErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pubErr = publish(total/2, total)
	}()
	for k := 1; k <= kills; k++ {
		target := k * len(okIDs) / (kills + 1)
		deadline := time.Now().Add(pick(2*time.Minute, 10*time.Minute))
		for runs.done(okIDs) < target {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: only %d of %d runs ended", k, runs.done(okIDs), target)
			}
			time.Sleep(20 * time.Millisecond)
		}
		w.kill()
		w = startProc(t, fmt.Sprintf("w-%d", k), wargs(fmt.Sprintf("w-%d", k))...)
	}
	wg.Wait()
	if pubErr != nil {
		t.Fatal(pubErr)
	}
	runs.waitDone(t, pick(3*time.Minute, 15*time.Minute), okIDs)

	// Exactly the runs wanted: no other record of the function, none for
	// a skipped message, one terminal write each.
	success, failed, others, twice := 0, 0, 0, 0
	runs.mu.Lock()
	for id, r := range runs.last {
		if r.Name != fn {
			continue
		}
		k, ok := want[id]
		switch {
		case !ok:
			others++
			if others <= 3 {
				t.Errorf("run %s is no message's run: %+v", id, r)
			}
		case k == "ok" && r.State == jetflow.Success:
			success++
		case k == "bad" && r.State == jetflow.Failed && strings.Contains(r.Error, "bad order") &&
			strings.Contains(r.Error, "trigger "+name):
			failed++
		default:
			t.Errorf("run %s (%s message): %s %q", id, k, r.State, r.Error)
		}
		if runs.terminal[id] != 1 {
			twice++
		}
	}
	runs.mu.Unlock()
	bad := n / 1000
	if success != n || failed != bad || others != 0 || twice != 0 {
		t.Errorf("%d runs succeeded (want %d), %d failed (want %d), %d unknown runs, %d runs with other than one terminal write",
			success, n, failed, bad, others, twice)
	}

	f := newFigures()
	f.set("messages", total)
	f.set("kills", kills)
	f.set("runs_succeeded", success)
	f.set("failed_records", failed)
	f.set("skipped", total-len(okIDs))
	f.set("wall", time.Since(began))
	f.print(t, "trigger worker-kill")
	alive(t, w, sched)
}
