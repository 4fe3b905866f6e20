package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/workflow"
)

// carry mirrors jfproc's Carry: the input and result of it.chain and
// it.entity.
type carry struct {
	Gens    int      `json:"gens,omitempty"`
	Target  int      `json:"target,omitempty"`
	SleepMs int      `json:"sleepMs,omitempty"`
	Gen     int      `json:"gen"`
	Count   int      `json:"count"`
	Applied []string `json:"applied,omitempty"`
}

// perRun mirrors jfproc's PerRun: the waits or updates of one run before
// it continues as new.
const perRun = 5

// chainDef and entityDef mirror jfproc's it.chain (ticks and sleeps,
// continuing as new every perRun) and it.entity (updates, continuing as
// new every perRun): the test starts and reads them, workers run them.
var (
	chainDef = workflow.Define("it.chain", func(wf *workflow.Context, in carry) (carry, error) {
		return in, fmt.Errorf("it.chain runs in jfproc, not in the test")
	})
	entityDef = workflow.Define("it.entity", func(wf *workflow.Context, in carry) (carry, error) {
		return in, fmt.Errorf("it.entity runs in jfproc, not in the test")
	})
	inboxDef = workflow.Define("it.inbox", func(wf *workflow.Context, in carry) (carry, error) {
		return in, fmt.Errorf("it.inbox runs in jfproc, not in the test")
	})
)

// Workflows that continue as new and workflows that take updates from a
// producer process of their own, while worker processes and the
// nats-server process are SIGKILLed in turn (the server restarted on its
// store):
//   - each chain (it.chain: 5 ticks with a durable sleep after each, then
//     continue as new, for gens runs) ends with the exact count and run
//     number, and its journal's generation agrees: no run lost, none
//     forked (a second continuation of one run would show as a generation
//     the code did not count), every tick of every run journaled;
//   - each entity (it.entity: 5 updates a run, then continue as new, until
//     target) ends having applied every valid update exactly once and no
//     refused one; every answer its caller got is the one its journaled
//     handling gave (the count applied, its place in the final list); an
//     update whose caller gave up (workflow.ErrUpdateTimeout) was not sent
//     again (the API does not make that safe) and was still applied once;
//   - each inbox (it.inbox: 5 events a run, then continue as new, until
//     target), sent events by a producer process of its own, ends having
//     taken each event once: one whose send returned nil exactly once,
//     one whose send was unconfirmed (producer.ErrEventUnconfirmed: not
//     sent again) at most once, none twice;
//   - each record got one terminal write.
func TestFaultWorkflowContinueAndUpdate(t *testing.T) {
	t.Parallel()
	began := time.Now()
	kills := pick(4, 16)
	chains, gens := pick(12, 60), pick(3, 8)
	entities, target := pick(8, 40), pick(15, 40)
	spread := pick(16*time.Second, 80*time.Second)
	sleep := int(spread.Milliseconds()) / (gens * perRun)

	srv := startNATS(t)
	e := newLoadEnv(t, srv.url(), streams.Config{})
	wflags := []string{"--ack-wait", "2s", "--lost-after", "4s", "--workflow", "--quiet"}
	workers := []*proc{e.worker("cw1-0", wflags...), e.worker("cw2-0", wflags...)}
	sched := e.scheduler("cs1", "--repair-interval", "1s", "--repair-grace", "2s")

	var chainIDs, entityIDs, inboxIDs []string
	for i := range chains {
		id := fmt.Sprintf("chain-%d", i)
		chainIDs = append(chainIDs, id)
		startOnce(t, e, chainDef, id, carry{Gens: gens, SleepMs: sleep})
	}
	for i := range entities {
		id := fmt.Sprintf("ent-%d", i)
		entityIDs = append(entityIDs, id)
		startOnce(t, e, entityDef, id, carry{Target: target})
	}
	for i := range entities {
		id := fmt.Sprintf("inbox-%d", i)
		inboxIDs = append(inboxIDs, id)
		startOnce(t, e, inboxDef, id, carry{Target: target})
	}
	evs := e.track(startProc(t, "sender", "--url", e.url, "--role", "updater", "--id", "sender", "--events",
		"--id-prefix", "inbox", "--count", strconv.Itoa(entities), "--updates", strconv.Itoa(target),
		"--parallel", strconv.Itoa(entities), "--spread", spread.String(), "--call-timeout", "10s"))
	upd := e.track(startProc(t, "updater", "--url", e.url, "--role", "updater", "--id", "updater",
		"--id-prefix", "ent", "--count", strconv.Itoa(entities), "--updates", strconv.Itoa(target),
		"--parallel", strconv.Itoa(entities), "--spread", spread.String(), "--call-timeout", "10s"))

	// Kills in turn: a worker (restarted at once), then the server.
	start := time.Now()
	every := spread / time.Duration(kills+1)
	var down time.Duration
	for k := range kills {
		sleepUntil(start.Add(every * time.Duration(k+1)))
		if k%2 == 0 {
			slot := (k / 2) % 2
			e.kill(workers[slot])
			workers[slot] = e.worker(fmt.Sprintf("cw%d-%d", slot+1, k/4+1), wflags...)
			continue
		}
		t0 := time.Now()
		srv.stop(syscall.SIGKILL)
		srv.start()
		waitJetStream(t, e.js)
		down += time.Since(t0)
	}
	upd.waitLine(spread+3*time.Minute, func(l string) bool { return l == "DONE" })
	evs.waitLine(3*time.Minute, func(l string) bool { return l == "DONE" })
	sent := time.Since(began)

	all := append(append(append([]string(nil), chainIDs...), entityIDs...), inboxIDs...)
	ended := waitWorkflows(t, e, all, pick(2*time.Minute, 5*time.Minute))
	f := newFigures()
	f.set("sent_by", sent)
	f.set("ended_by", time.Since(began))
	f.set("kills", kills)
	f.set("server_kills", kills/2)
	f.set("chains", chains)
	f.set("gens", gens)
	f.set("entities", entities)
	f.set("updates_each", target)
	v := &cnuViolations{}
	checkChains(t, e, chainIDs, ended, gens, v, f)
	checkEntities(t, e, upd, entityIDs, ended, target, v, f)
	checkInboxes(t, evs, inboxIDs, ended, target, v, f)
	for _, id := range all {
		if _, n := e.runs.get(id); n > 1 {
			v.add("terminal writes", fmt.Sprintf("%s: %d terminal writes", id, n))
		}
	}
	f.set("unfinished", len(v.list["unfinished"]))
	f.set("violations", v.n)
	f.set("server_down_total", down)
	f.set("wall", time.Since(began))
	f.print(t, "f workflow-continue-update")
	alive(t, append(workers, sched)...)
	for _, what := range v.order {
		list := v.list[what]
		t.Errorf("%s: %d, e.g. %v", what, len(list), list[:min(5, len(list))])
	}
	if list := v.list["unfinished"]; len(list) > 0 {
		explainWorkflows(t, e, list[:min(3, len(list))])
	}
	explainRetakes(t, e)
}

// explainRetakes logs every write of the segments and timers that ran a
// second attempt (a worker lost, or a run repaired by the scheduler): each
// is a workflow that stood still meanwhile.
func explainRetakes(t *testing.T, e *loadEnv) {
	e.runs.mu.Lock()
	defer e.runs.mu.Unlock()
	var out []string
	for id, r := range e.runs.last {
		if r.Attempts > 1 && (strings.Contains(id, "-seg") || strings.Contains(id, "-timer")) {
			var hist []string
			for _, a := range r.History {
				hist = append(hist, fmt.Sprintf("%d:%s@%s[%s-%s %q]", a.Attempt, a.Outcome, a.Worker,
					a.StartedTime.Format("15:04:05.000"), a.CompletedTime.Format("15:04:05.000"), a.Error))
			}
			out = append(out, fmt.Sprintf("%s (history %v):\n  %s", id, hist, strings.Join(e.runs.writes[id], "\n  ")))
		}
	}
	sort.Strings(out)
	if len(out) > 0 {
		t.Logf("segments and timers run twice (%d), e.g.:\n%s", len(out), strings.Join(out[:min(5, len(out))], "\n"))
	}
}

// explainWorkflows logs where each unfinished workflow stands: its status,
// the latest record of each of its runs (segments, timers, calls) and what
// the processes logged about it.
func explainWorkflows(t *testing.T, e *loadEnv, ids []string) {
	t.Helper()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := workflow.Get(ctx, e.p, id)
		cancel()
		if err != nil {
			t.Logf("workflow %s: status: %v", id, err)
		} else {
			t.Logf("workflow %s: state %s generation %d segment %d waiting %v waits %v steps %d children %v",
				id, st.Run.State, st.Generation, st.Segment, st.Waiting, st.Waits, len(st.Steps), st.Run.Children)
		}
		var lines []string
		e.runs.mu.Lock()
		for rid, r := range e.runs.last {
			if strings.HasPrefix(rid, id+"-") || rid == id {
				var hist []string
				for _, a := range r.History {
					hist = append(hist, fmt.Sprintf("%d:%s@%s[%s-%s %q]", a.Attempt, a.Outcome, a.Worker,
						a.StartedTime.Format("15:04:05.000"), a.CompletedTime.Format("15:04:05.000"), a.Error))
				}
				lines = append(lines, fmt.Sprintf("%s %s rev %d attempts %d owner %q scheduled %s started %s beat %s error %q history %v",
					rid, r.State, r.Revision, r.Attempts, r.Owner, r.ScheduledTime.Format("15:04:05.000"),
					r.StartedTime.Format("15:04:05.000"), r.Heartbeat.Format("15:04:05.000"), r.Error, hist))
			}
		}
		e.runs.mu.Unlock()
		sort.Strings(lines)
		t.Logf("records of %s:\n%s", id, strings.Join(lines, "\n"))
		e.explain([]string{id})
	}
}

// startOnce starts workflow id of def with in, trying again until a call
// stores it (ErrAlreadyExists after a failed try: an earlier try did).
func startOnce(t *testing.T, e *loadEnv, def *workflow.Workflow[carry, carry], id string, in carry) {
	t.Helper()
	retry(t, 30*time.Second, "start "+id, func(ctx context.Context) error {
		_, err := workflow.Start(ctx, e.p, def, in, workflow.WithID(id))
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	})
}

// waitWorkflows reads the status of ids until each has ended or within has
// passed, and returns those that ended.
func waitWorkflows(t *testing.T, e *loadEnv, ids []string, within time.Duration) map[string]*workflow.Status {
	t.Helper()
	ended := map[string]*workflow.Status{}
	deadline := time.Now().Add(within)
	for len(ended) < len(ids) && time.Now().Before(deadline) {
		for _, id := range ids {
			if ended[id] != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := workflow.Get(ctx, e.p, id)
			cancel()
			if err == nil && st.Run.State.Terminal() {
				ended[id] = st
				if len(ended) > len(ids)-3 {
					t.Logf("%s ended (%d of %d) at %s", id, len(ended), len(ids), time.Now().Format("15:04:05.000"))
				}
			}
		}
		time.Sleep(100 * time.Millisecond) // polling pace, not a condition
	}
	return ended
}

// cnuViolations collects broken guarantees by kind, in the order found.
type cnuViolations struct {
	order []string
	list  map[string][]string
	n     int
}

func (v *cnuViolations) add(what, s string) {
	if v.list == nil {
		v.list = map[string][]string{}
	}
	if _, ok := v.list[what]; !ok {
		v.order = append(v.order, what)
	}
	v.list[what] = append(v.list[what], s)
	v.n++
}

// result decodes a workflow's result, or reports why it has none.
func result(st *workflow.Status) (carry, error) {
	var out carry
	if st.Run.State != jetflow.Success {
		return out, fmt.Errorf("%s %q", st.Run.State, st.Run.Error)
	}
	err := json.Unmarshal(st.Run.Result, &out)
	return out, err
}

// checkChains: every chain ended with count 5*gens at run gens, its
// journal at generation gens, and each tick of each run in the ledger.
func checkChains(t *testing.T, e *loadEnv, ids []string, ended map[string]*workflow.Status, gens int, v *cnuViolations, f *figures) {
	ticks := map[string]int{}
	for _, l := range readLedger(t, e.ledger) {
		if strings.HasPrefix(l.id, "chain-") {
			ticks[l.id]++
		}
	}
	reruns := 0
	for _, n := range ticks {
		reruns += n - 1
	}
	for _, id := range ids {
		st := ended[id]
		if st == nil {
			v.add("unfinished", id)
			continue
		}
		out, err := result(st)
		switch {
		case err != nil:
			v.add("chain outcome", fmt.Sprintf("%s: %v", id, err))
		case out.Count != perRun*gens || out.Gen != gens || st.Generation != gens:
			v.add("chain forked or lost a run", fmt.Sprintf("%s: count %d run %d generation %d, want %d, %d, %d",
				id, out.Count, out.Gen, st.Generation, perRun*gens, gens, gens))
		}
		for g := 1; g <= gens+1; g++ {
			for i := range perRun {
				n := ticks[fmt.Sprintf("%s/g%d/t%d", id, g, i)]
				if g <= gens && n == 0 {
					v.add("tick never ran", fmt.Sprintf("%s run %d tick %d", id, g, i))
				}
				if g > gens && n > 0 {
					v.add("tick of a run past the last", fmt.Sprintf("%s run %d tick %d", id, g, i))
				}
			}
		}
	}
	f.set("tick_reruns", reruns)
}

// checkEntities: every entity applied each valid token once and no
// refused one, and each answer is the handling's.
func checkEntities(t *testing.T, e *loadEnv, upd *proc, ids []string, ended map[string]*workflow.Status, target int, v *cnuViolations, f *figures) {
	type outcome struct{ kind, answer string }
	got := map[string]outcome{} // "<wf> <token>"
	var retries, timeouts []string
	for _, l := range upd.snapshot() {
		fs := strings.Fields(l)
		if len(fs) < 3 {
			continue
		}
		switch fs[0] {
		case "ANSWER":
			got[fs[1]+" "+fs[2]] = outcome{"answer", strings.Join(fs[3:], " ")}
		case "REJECTED", "UPTIMEOUT", "ENDED":
			got[fs[1]+" "+fs[2]] = outcome{fs[0], ""}
			if fs[0] == "UPTIMEOUT" {
				timeouts = append(timeouts, l)
			}
		case "UPRETRY":
			retries = append(retries, l)
		}
	}
	counts := map[string]int{}
	for _, o := range got {
		counts[o.kind]++
	}
	for _, id := range ids {
		st := ended[id]
		if st == nil {
			v.add("unfinished", id)
			continue
		}
		out, err := result(st)
		if err != nil {
			v.add("entity outcome", fmt.Sprintf("%s: %v", id, err))
			continue
		}
		want := (target + perRun - 1) / perRun
		if out.Gen != want || st.Generation != want {
			v.add("entity forked or lost a run", fmt.Sprintf("%s: run %d generation %d, want %d", id, out.Gen, st.Generation, want))
		}
		place := map[string]int{}
		for i, tok := range out.Applied {
			if _, twice := place[tok]; twice {
				v.add("update applied twice", fmt.Sprintf("%s: %s", id, tok))
			}
			place[tok] = i + 1
			if strings.HasPrefix(tok, "bad") {
				v.add("refused update applied", fmt.Sprintf("%s: %s", id, tok))
			}
		}
		for k := range target {
			tok := fmt.Sprintf("u%d", k)
			o, sent := got[id+" "+tok]
			switch {
			case !sent:
				v.add("update without an outcome", fmt.Sprintf("%s: %s", id, tok))
			case place[tok] == 0:
				v.add("update lost", fmt.Sprintf("%s: %s (caller: %s)", id, tok, o.kind))
			case o.kind == "answer" && o.answer != strconv.Itoa(place[tok]):
				v.add("answer not the journaled one", fmt.Sprintf("%s: %s answered %s, applied %d", id, tok, o.answer, place[tok]))
			case o.kind != "answer" && o.kind != "UPTIMEOUT":
				v.add("valid update refused", fmt.Sprintf("%s: %s %s", id, tok, o.kind))
			}
		}
		for tok, o := range got {
			if w, token, _ := strings.Cut(tok, " "); w == id && strings.HasPrefix(token, "bad") && o.kind == "answer" {
				v.add("refused update answered", fmt.Sprintf("%s: %s", id, token))
			}
		}
		if len(out.Applied) != target {
			v.add("entity applied a wrong number", fmt.Sprintf("%s: %d of %d", id, len(out.Applied), target))
		}
	}
	f.set("updates_answered", counts["answer"])
	f.set("updates_rejected", counts["REJECTED"])
	f.set("updates_timed_out", counts["UPTIMEOUT"])
	f.set("update_calls_retried", len(retries))
	if len(timeouts) > 0 {
		t.Logf("update calls that gave up (stored, not sent again), e.g.:\n%s", strings.Join(timeouts[:min(5, len(timeouts))], "\n"))
	}
	if len(retries) > 0 {
		t.Logf("update calls sent again (nothing stored), e.g.:\n%s", strings.Join(retries[:min(5, len(retries))], "\n"))
	}
}

// checkInboxes: every inbox took each event sent once (at most once for
// an unconfirmed send), none twice, at the right generation.
func checkInboxes(t *testing.T, evs *proc, ids []string, ended map[string]*workflow.Status, target int, v *cnuViolations, f *figures) {
	got := map[string]string{} // "<wf> <token>" -> SENT or UNSURE
	var retries, unsure []string
	for _, l := range evs.snapshot() {
		fs := strings.Fields(l)
		if len(fs) < 3 {
			continue
		}
		switch fs[0] {
		case "SENT", "UNSURE", "ENDED":
			got[fs[1]+" "+fs[2]] = fs[0]
			if fs[0] == "UNSURE" {
				unsure = append(unsure, l)
			}
		case "EVRETRY":
			retries = append(retries, l)
		}
	}
	for _, id := range ids {
		st := ended[id]
		if st == nil {
			v.add("unfinished", id)
			continue
		}
		out, err := result(st)
		if err != nil {
			v.add("inbox outcome", fmt.Sprintf("%s: %v", id, err))
			continue
		}
		if want := (target + perRun - 1) / perRun; out.Gen != want || st.Generation != want {
			v.add("inbox forked or lost a run", fmt.Sprintf("%s: run %d generation %d, want %d", id, out.Gen, st.Generation, want))
		}
		taken := map[string]int{}
		for _, tok := range out.Applied {
			taken[tok]++
			if taken[tok] == 2 {
				v.add("event taken twice", fmt.Sprintf("%s: %s", id, tok))
			}
			if got[id+" "+tok] == "" {
				v.add("event taken that was never sent", fmt.Sprintf("%s: %s", id, tok))
			}
		}
		for k := range target {
			tok := fmt.Sprintf("t%d", k)
			switch o := got[id+" "+tok]; {
			case o == "SENT" && taken[tok] == 0:
				v.add("event lost", fmt.Sprintf("%s: %s", id, tok))
			case o != "SENT" && o != "UNSURE":
				v.add("event send without an outcome", fmt.Sprintf("%s: %s %q", id, tok, o))
			}
		}
	}
	f.set("events_unconfirmed", len(unsure))
	f.set("event_calls_retried", len(retries))
	if len(retries)+len(unsure) > 0 {
		t.Logf("event sends retried or unconfirmed, e.g.:\n%s", strings.Join(append(unsure, retries...)[:min(5, len(retries)+len(unsure))], "\n"))
	}
}
