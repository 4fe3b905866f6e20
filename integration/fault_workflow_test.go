package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/workflow"
)

// flowArgs and flowDef mirror jfproc's it.flow (three inline steps, the
// second at most once): the test starts and reads the workflows, the
// worker processes run them.
type flowArgs struct {
	N int `json:"n"`
}

var flowDef = workflow.Define("it.flow", func(wf *workflow.Context, in flowArgs) (string, error) {
	return "", fmt.Errorf("it.flow runs in jfproc, not in the test")
})

// Workers SIGKILLed while workflows run their steps: every workflow ends;
// its at-most-once step never runs twice (a workflow whose at-most-once
// step was cut short fails with "worker lost"); a retryable step may run
// again only when the worker running it was killed; each step's outcome is
// journaled once.
func TestFaultWorkflowWorkerKill(t *testing.T) {
	t.Parallel()
	began := time.Now()
	kills := pick(4, 12)
	n := pick(60, 300)

	srv := startNATS(t)
	e := newLoadEnv(t, srv.url(), streams.Config{})
	wflags := []string{"--ack-wait", "2s", "--lost-after", "4s", "--workflow", "--work", "300ms"}
	workers := []*proc{e.worker("fw1-0", wflags...), e.worker("fw2-0", wflags...)}
	sched := e.scheduler("fs1", "--repair-interval", "1s", "--repair-grace", "2s")
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("wf-%d", i)
		retry(t, 30*time.Second, "start "+ids[i], func(ctx context.Context) error {
			_, err := workflow.Start(ctx, e.p, flowDef, flowArgs{N: i}, workflow.WithID(ids[i]))
			if err != nil && strings.Contains(err.Error(), "already exists") {
				return nil
			}
			return err
		})
	}
	retry(t, time.Minute, "a first step started", func(context.Context) error {
		if len(readLedger(t, e.ledger)) == 0 {
			return fmt.Errorf("no step yet")
		}
		return nil
	})
	for k := range kills {
		slot := k % 2
		time.Sleep(500 * time.Millisecond) // pace of the kills: each finds steps in flight
		e.kill(workers[slot])
		workers[slot] = e.worker(fmt.Sprintf("fw%d-%d", slot+1, k/2+1), wflags...)
	}

	ended := map[string]*workflow.Status{}
	deadline := time.Now().Add(pick(2*time.Minute, 5*time.Minute))
	for len(ended) < n && time.Now().Before(deadline) {
		for _, id := range ids {
			if ended[id] != nil {
				continue
			}
			st, err := workflow.Get(ctx, e.p, id)
			if err == nil && st.Run.State.Terminal() {
				ended[id] = st
			}
		}
		time.Sleep(50 * time.Millisecond) // polling pace, not a condition
	}
	e.mu.Lock()
	pids := make(map[int]bool, len(e.killed))
	for pid := range e.killed {
		pids[pid] = true
	}
	e.mu.Unlock()
	execs := map[string][]ledgerLine{}
	for _, l := range readLedger(t, e.ledger) {
		execs[l.id] = append(execs[l.id], l)
	}
	var unfinished, twiceAMO, unexcused, wrong, journal []string
	succeeded, lost := 0, 0
	for _, id := range ids {
		st := ended[id]
		if st == nil {
			unfinished = append(unfinished, id)
			continue
		}
		if b := execs[id+"/b"]; len(b) > 1 {
			twiceAMO = append(twiceAMO, fmt.Sprintf("%s ran b %d times", id, len(b)))
		}
		for _, step := range []string{"a", "c"} {
			if ex := execs[id+"/"+step]; len(ex) > 1 {
				for _, l := range ex[:len(ex)-1] {
					if !pids[l.pid] {
						unexcused = append(unexcused, fmt.Sprintf("%s/%s ran again after pid %d, which was not killed", id, step, l.pid))
					}
				}
			}
		}
		switch {
		case st.Run.State == jetflow.Success && string(st.Run.Result) == `"abc"`:
			succeeded++
			done := map[string]int{}
			for _, s := range st.Steps {
				if s.State == workflow.StepDone {
					done[s.Name]++
				}
			}
			if done["a"] != 1 || done["b"] != 1 || done["c"] != 1 {
				journal = append(journal, fmt.Sprintf("%s: steps done %v", id, done))
			}
		case st.Run.State == jetflow.Failed && strings.Contains(st.Run.Error, jetflow.ErrWorkerLost.Error()):
			lost++
		default:
			wrong = append(wrong, fmt.Sprintf("%s: %s %q %s", id, st.Run.State, st.Run.Error, st.Run.Result))
		}
	}
	f := newFigures()
	f.set("kills", kills)
	f.set("workflows", n)
	f.set("succeeded", succeeded)
	f.set("amo_step_lost", lost)
	f.set("unfinished", len(unfinished))
	f.set("amo_step_twice", len(twiceAMO))
	f.set("retryable_step_rerun_unexcused", len(unexcused))
	f.set("journal_wrong", len(journal))
	f.set("wrong", len(wrong))
	f.set("wall", time.Since(began))
	f.print(t, "f workflow-worker-kill")
	alive(t, append(workers, sched)...)
	for what, list := range map[string][]string{"unfinished": unfinished, "at-most-once step twice": twiceAMO,
		"retryable step re-run without a kill": unexcused, "journal": journal, "wrong outcome": wrong} {
		if len(list) > 0 {
			t.Errorf("%s: %d, e.g. %v", what, len(list), list[:min(5, len(list))])
		}
	}
}
