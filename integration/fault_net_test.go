package integration_test

// What the scenarios of issue 26 (network partitions, paused processes,
// clock skew) count beyond loadEnv.check: from the ledger's start and end
// times (each process's real clock, one machine), the watch of the runs
// bucket and the load processes' markers.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
)

// faultWindow is the span of one fault: from its start to its heal.
type faultWindow struct {
	what     string
	from, to time.Time
	// whole: when the cluster was whole again after the heal (the victim
	// current on every stream again); zero when the fault has no victim
	// server to wait for.
	whole time.Time
	pid   int // the process paused, if the fault is a worker's pause
}

// end is when w is over: its heal, or, counting the servers' own recovery,
// when the cluster is whole again.
func (w faultWindow) end(whole bool) time.Time {
	if whole && w.whole.After(w.to) {
		return w.whole
	}
	return w.to
}

// readyAfter is when something due at t could first be done, given the
// faults: t, or the end of a fault it fell in (or within 2 s before it
// began, not yet done when it began), and again of any fault that began
// before that end (faults that follow each other hold it back in turn).
func readyAfter(t time.Time, windows []faultWindow, whole bool) (ready time.Time, in string) {
	ready = t
	for changed := true; changed; {
		changed = false
		for _, w := range windows {
			if !ready.Before(w.from.Add(-2*time.Second)) && ready.Before(w.end(whole)) {
				ready, in, changed = w.end(whole), w.what, true
			}
		}
	}
	return ready, in
}

// lateBound is how long after its due time, or after the end of a fault
// it was due in (readyAfter: the cluster whole again), a delayed run may
// start.
const lateBound = 10 * time.Second

// lateExample is a late run, described.
type lateExample struct {
	late time.Duration
	text string
}

// lateExamples are the five latest of eg.
func lateExamples(eg []lateExample) []string {
	var out []string
	for _, e := range eg[:min(len(eg), 5)] {
		out = append(out, e.text)
	}
	return out
}

// netCheck is what faultCheck found.
type netCheck struct {
	exists          int      // accepted ids the load got as ErrAlreadyExists
	lostExists      []string // of those, not terminal
	lostNoRecord    []string // accepted, no record at all
	startedAfterEnd []string // a handler started after the watch saw its run end
	overlaps        []string // two executions of one run at once
	takeovers       []string // runs with an attempt ended as lost (its worker taken for lost)
	delayed         int      // delayed runs that started
	dueInFault      int      // of those, due during a fault
	maxLate         time.Duration
	maxLateHeal     time.Duration // of the runs due during a fault, the latest start after its heal
	lateEg          []lateExample // started more than lateBound late
	lateCount       int
	retries         int           // fail1 runs whose second attempt started
	maxRetryGap     time.Duration // start of attempt 1 to the next start of a fail1 run
	maxRetryLate    time.Duration // that start after attempt 1 plus its backoff (1 s), or after the heal
	retryLate       []string      // over lateBound
	// Runs of one attempt run twice where the first execution started in
	// a process paused less than lateClaim later, unclaimed (its claim,
	// or its outcome, not yet written when the pause began) and alive
	// again after the pause: counted in c.sameAttempt
	// too; named apart for README's limits of guarantee 3.
	unclaimedAtPause []string
	// The executions of each attempt run twice by live processes, with
	// their times (for diagnosis).
	twiceTimes []string
}

// lateClaim is ClaimAfter's default (100 ms) and a margin.
const lateClaim = 150 * time.Millisecond

// exists returns the accepted ids whose call answered ErrAlreadyExists.
func (e *loadEnv) existsIDs() map[string]bool {
	ids := map[string]bool{}
	for _, l := range e.loads {
		for _, s := range l.snapshot() {
			if f := strings.Fields(s); len(f) == 4 && f[0] == "ENQUEUED" && f[3] == "exists" {
				ids[f[1]] = true
			}
		}
	}
	return ids
}

// faultCheck counts, after e.check, what the faults of windows may break.
func (e *loadEnv) faultCheck(c *loadCheck, windows []faultWindow) *netCheck {
	t := e.t
	t.Helper()
	n := &netCheck{}
	classes, _ := e.accepted()
	ex := e.existsIDs()
	n.exists = len(ex)
	for _, id := range c.lost {
		if ex[id] {
			n.lostExists = append(n.lostExists, id)
		}
		if c.recs[id] == nil {
			n.lostNoRecord = append(n.lostNoRecord, id)
		}
	}
	starts := readLedger(t, e.ledger)
	ends := readLedger(t, e.ledger+".ends")
	type exec struct {
		attempt, pid int
		from, to     time.Time // to: zero while it runs (or its process died)
	}
	type key struct {
		id           string
		attempt, pid int
	}
	endAt := map[key][]time.Time{}
	for _, l := range ends {
		k := key{l.id, l.attempt, l.pid}
		endAt[k] = append(endAt[k], l.at)
	}
	execs := map[string][]*exec{}
	for _, l := range starts {
		x := &exec{attempt: l.attempt, pid: l.pid, from: l.at}
		k := key{l.id, l.attempt, l.pid}
		if q := endAt[k]; len(q) > 0 {
			x.to, endAt[k] = q[0], q[1:]
		}
		execs[l.id] = append(execs[l.id], x)
	}
	e.mu.Lock()
	killed := e.killed
	e.mu.Unlock()
	e.runs.mu.Lock()
	ended := make(map[string]time.Time, len(e.runs.ended))
	for id, at := range e.runs.ended {
		ended[id] = at
	}
	e.runs.mu.Unlock()
	now := time.Now()
	for id, xs := range execs {
		if end, ok := ended[id]; ok {
			for _, x := range xs {
				if x.from.After(end) {
					n.startedAfterEnd = append(n.startedAfterEnd, fmt.Sprintf("%s/%d(pid %d, %s after the end)", id, x.attempt, x.pid, x.from.Sub(end).Round(time.Millisecond)))
				}
			}
		}
		for i, a := range xs {
			for _, b := range xs[i+1:] {
				if killed[a.pid] || killed[b.pid] {
					continue
				}
				aTo, bTo := a.to, b.to
				if aTo.IsZero() {
					aTo = now
				}
				if bTo.IsZero() {
					bTo = now
				}
				if a.from.Before(bTo) && b.from.Before(aTo) {
					n.overlaps = append(n.overlaps, fmt.Sprintf("%s(%d/pid%d %s-%s, %d/pid%d %s-%s)", id,
						a.attempt, a.pid, a.from.Format("15:04:05.000"), aTo.Format("15:04:05.000"),
						b.attempt, b.pid, b.from.Format("15:04:05.000"), bTo.Format("15:04:05.000")))
				}
			}
		}
	}
	for id, xs := range execs {
		byAttempt := map[int][]*exec{}
		for _, x := range xs {
			if !killed[x.pid] {
				byAttempt[x.attempt] = append(byAttempt[x.attempt], x)
			}
		}
		for a, ys := range byAttempt {
			if len(ys) < 2 {
				continue
			}
			var parts []string
			for _, y := range ys {
				to := "running"
				if !y.to.IsZero() {
					to = y.to.Format("15:04:05.000")
				}
				parts = append(parts, fmt.Sprintf("pid%d %s-%s", y.pid, y.from.Format("15:04:05.000"), to))
			}
			n.twiceTimes = append(n.twiceTimes, fmt.Sprintf("%s/%d(%s)", id, a, strings.Join(parts, ", ")))
		}
		for _, x := range xs {
			twice := false
			for _, y := range xs {
				twice = twice || y != x && y.attempt == x.attempt && y.pid != x.pid && !killed[y.pid]
			}
			if !twice || killed[x.pid] {
				continue
			}
			for _, w := range windows {
				// Ended before the pause or not: its outcome, the write that
				// claims a fast run, may not have been sent when it began.
				if w.pid == x.pid && !x.from.After(w.from) && w.from.Sub(x.from) < lateClaim {
					n.unclaimedAtPause = append(n.unclaimedAtPause, fmt.Sprintf("%s/%d(started %s before %s)", id, x.attempt, w.from.Sub(x.from).Round(time.Millisecond), w.what))
				}
			}
		}
	}
	for id, r := range c.recs {
		if r == nil {
			continue
		}
		for _, a := range r.History {
			if a.Outcome == "lost" || strings.Contains(a.Error, jetflow.ErrWorkerLost.Error()) {
				var hist, led []string
				for _, h := range r.History {
					hist = append(hist, fmt.Sprintf("%d:%s@%s[%s-%s]", h.Attempt, h.Outcome, h.Worker,
						h.StartedTime.Format("15:04:05.000"), h.CompletedTime.Format("15:04:05.000")))
				}
				for _, x := range execs[id] {
					led = append(led, fmt.Sprintf("%d/pid%d@%s", x.attempt, x.pid, x.from.Format("15:04:05.000")))
				}
				n.takeovers = append(n.takeovers, fmt.Sprintf("%s(attempt %d by %s: %s %q; %s attempts %d, history %v, ledger %v)",
					id, a.Attempt, a.Worker, a.Outcome, a.Error, r.State, r.Attempts, hist, led))
				break
			}
		}
		if len(r.History) == 0 && strings.Contains(r.Error, jetflow.ErrWorkerLost.Error()) {
			n.takeovers = append(n.takeovers, fmt.Sprintf("%s(%s %q)", id, r.State, r.Error))
		}
	}
	// Lateness, by the ledger's clock: a delayed run's first start after
	// its due time, or after the heal of the fault it was due in (or due
	// less than 2 s before: not started when the fault began).
	first := func(id string, attempt int) time.Time {
		var at time.Time
		for _, x := range execs[id] {
			if (attempt == 0 || x.attempt == attempt) && (at.IsZero() || x.from.Before(at)) {
				at = x.from
			}
		}
		return at
	}
	for id, class := range classes {
		r := c.recs[id]
		if r == nil {
			continue
		}
		if strings.HasPrefix(class, "fail1") {
			// The first start of a later attempt, after the failed first
			// one (its backoff is at most 1 s), or after the heal of the
			// fault it failed in.
			a1 := first(id, 1)
			var a2 time.Time
			for _, x := range execs[id] {
				if x.attempt > 1 && (a2.IsZero() || x.from.Before(a2)) {
					a2 = x.from
				}
			}
			if !a1.IsZero() && !a2.IsZero() {
				n.retries++
				ready, _ := readyAfter(a1.Add(time.Second), windows, true)
				n.maxRetryGap = max(n.maxRetryGap, a2.Sub(a1))
				late := a2.Sub(ready)
				n.maxRetryLate = max(n.maxRetryLate, late)
				if late > lateBound {
					n.retryLate = append(n.retryLate, fmt.Sprintf("%s(attempt 1 %s, next %s)", id, a1.Format("15:04:05.000"), a2.Format("15:04:05.000")))
				}
			}
		}
		if !strings.Contains(class, "after") && !strings.HasSuffix(class, "at") {
			continue
		}
		start := first(id, 0)
		if start.IsZero() {
			continue
		}
		n.delayed++
		due := r.ScheduledTime
		healed, _ := readyAfter(due, windows, false)
		ready, what := readyAfter(due, windows, true)
		late := start.Sub(ready)
		if what != "" {
			n.dueInFault++
			n.maxLateHeal = max(n.maxLateHeal, start.Sub(healed))
		}
		n.maxLate = max(n.maxLate, late)
		if late > lateBound {
			n.lateCount++
			eg := fmt.Sprintf("%s(%s: %s late, due %s", id, class, late.Round(100*time.Millisecond), due.Format("15:04:05.000"))
			if what != "" {
				eg += ", in " + what
			}
			n.lateEg = append(n.lateEg, lateExample{late, eg + fmt.Sprintf(", started %s)", start.Format("15:04:05.000"))})
		}
	}
	// The latest first.
	sort.Slice(n.lateEg, func(i, j int) bool { return n.lateEg[i].late > n.lateEg[j].late })
	sort.Strings(n.startedAfterEnd)
	sort.Strings(n.overlaps)
	sort.Strings(n.takeovers)
	sort.Strings(n.lostExists)
	return n
}

func (n *netCheck) report(f *figures) {
	f.set("exists_answers", n.exists)
	f.set("lost_exists", len(n.lostExists))
	f.set("lost_no_record", len(n.lostNoRecord))
	f.set("started_after_end", len(n.startedAfterEnd))
	f.set("overlapping", len(n.overlaps))
	f.set("twice_unclaimed_at_pause", len(n.unclaimedAtPause))
	f.set("lost_takeovers", len(n.takeovers))
	f.set("delayed", n.delayed)
	f.set("due_in_fault", n.dueInFault)
	f.set("max_late_after_heal", n.maxLateHeal)
	f.set("max_late", n.maxLate)
	f.set("late_over_10s", n.lateCount)
	f.set("retries", n.retries)
	f.set("max_retry_gap", n.maxRetryGap)
	f.set("retries_late", len(n.retryLate))
}

// netAssert says which of netCheck's figures fail a scenario.
type netAssert struct {
	overlaps, takeovers, retryGap bool
}

// assert fails t for each broken guarantee of n (and c.assert for the
// rest). Lateness fails over lateBound in the long version (task faults,
// a quiet machine); the short one, beside every other package on CI,
// logs it: lateness after a heal is still open (issue 26; 17-55 s seen
// there for a cut-off node to be current again), and the short run
// asserts what must never happen: a run lost or run twice.
func (n *netCheck) assert(t *testing.T, e *loadEnv, c *loadCheck, also netAssert) {
	t.Helper()
	some := func(s []string) []string { return s[:min(len(s), 5)] }
	var suspects []string
	pick1 := func(s []string) {
		for _, x := range some(s) {
			id, _, _ := strings.Cut(x, "(")
			id, _, _ = strings.Cut(id, "/")
			suspects = append(suspects, id)
		}
	}
	if len(n.lostExists) > 0 {
		t.Errorf("%d runs answered ErrAlreadyExists never ended, e.g. %v", len(n.lostExists), some(n.lostExists))
		pick1(n.lostExists)
	}
	if len(n.startedAfterEnd) > 0 {
		t.Errorf("%d handlers started after their run had ended, e.g. %v", len(n.startedAfterEnd), some(n.startedAfterEnd))
		pick1(n.startedAfterEnd)
	}
	if len(n.twiceTimes) > 0 {
		sort.Strings(n.twiceTimes)
		t.Logf("attempts run twice, with each execution's times: %v", n.twiceTimes[:min(len(n.twiceTimes), 10)])
	}
	if len(n.unclaimedAtPause) > 0 {
		// README's guarantee 3 names this limit of the fast path: a run
		// started unclaimed whose worker stops before its late claim
		// (ClaimAfter) is run again on its redelivery. Counted, not failed;
		// every other attempt run twice still fails the scenario.
		t.Logf("%d attempts run twice had started in a worker paused less than %s later, before its late claim (ClaimAfter), "+
			"and were run again on a redelivery while it was stopped (the fast path's stated limit), e.g. %v",
			len(n.unclaimedAtPause), lateClaim, some(n.unclaimedAtPause))
		c.sameAttempt = withoutAttempts(c.sameAttempt, n.unclaimedAtPause)
	}
	if also.overlaps && len(n.overlaps) > 0 {
		t.Errorf("%d runs ran two handlers at once, e.g. %v", len(n.overlaps), some(n.overlaps))
		pick1(n.overlaps)
	} else if len(n.overlaps) > 0 {
		t.Logf("%d runs ran two handlers at once (a paused process's included), e.g. %v", len(n.overlaps), some(n.overlaps))
	}
	if also.takeovers && len(n.takeovers) > 0 {
		t.Errorf("%d runs were taken over from a live worker as lost, e.g. %v", len(n.takeovers), some(n.takeovers))
		pick1(n.takeovers)
	} else if len(n.takeovers) > 0 {
		t.Logf("%d runs had an attempt ended as lost, e.g. %v", len(n.takeovers), some(n.takeovers))
	}
	switch {
	case len(n.retryLate) > 0 && (also.retryGap || faultsLong()):
		t.Errorf("%d of %d retries started more than %s after their backoff (or the heal), the latest %s, e.g. %v",
			len(n.retryLate), n.retries, lateBound, n.maxRetryLate.Round(100*time.Millisecond), some(n.retryLate))
		pick1(n.retryLate)
	case len(n.retryLate) > 0:
		t.Logf("%d of %d retries started more than %s after their backoff (or the heal) under this load (latest %s), e.g. %v",
			len(n.retryLate), n.retries, lateBound, n.maxRetryLate.Round(100*time.Millisecond), some(n.retryLate))
	}
	switch {
	case n.lateCount > 0 && faultsLong():
		t.Errorf("%d of %d delayed runs started more than %s after their due time or the heal, the latest %s, e.g. %v",
			n.lateCount, n.delayed, lateBound, n.maxLate.Round(100*time.Millisecond), lateExamples(n.lateEg))
	case n.lateCount > 0:
		t.Logf("%d of %d delayed runs started more than %s late under this load (latest %s); task faults holds the bound, e.g. %v",
			n.lateCount, n.delayed, lateBound, n.maxLate.Round(100*time.Millisecond), lateExamples(n.lateEg))
	}
	if len(suspects) > 0 {
		e.explain(suspects)
	}
	c.assert(t, e)
}

// faultRand is a scenario's seeded randomness (fault durations), its seed
// logged; JETFLOW_FAULT_SEED replays one.
func faultRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("JETFLOW_FAULT_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (JETFLOW_FAULT_SEED)", seed)
	return rand.New(rand.NewPCG(seed, 26))
}

// between returns a duration uniform in [lo, hi].
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

// withoutAttempts is twice without the attempts ("<id>/<attempt>(...)")
// that excused names.
func withoutAttempts(twice, excused []string) []string {
	skip := map[string]bool{}
	for _, x := range excused {
		k, _, _ := strings.Cut(x, "(")
		skip[k] = true
	}
	var out []string
	for _, x := range twice {
		if k, _, _ := strings.Cut(x, "("); !skip[k] {
			out = append(out, x)
		}
	}
	return out
}

func TestReadyAfter(t *testing.T) {
	at := func(s float64) time.Time {
		return time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC).Add(time.Duration(s * float64(time.Second)))
	}
	// Two faults: 10-20 s (whole again at 27 s), 30-40 s (whole at 42 s).
	ws := []faultWindow{
		{what: "cut 1", from: at(10), to: at(20), whole: at(27)},
		{what: "cut 2", from: at(30), to: at(40), whole: at(42)},
	}
	cases := []struct {
		name  string
		due   float64
		whole bool
		want  float64
		in    string
	}{
		{"before any fault", 5, true, 5, ""},
		{"just before a fault: not done when it began", 9, true, 27, "cut 1"},
		{"in a fault, to its heal", 15, false, 20, "cut 1"},
		{"in a fault, to the cluster whole again", 15, true, 27, "cut 1"},
		{"after the heal, before whole again", 25, true, 27, "cut 1"},
		{"after the heal: not in it by the heal", 25, false, 25, ""},
		{"due within 2 s of the next fault", 29, true, 42, "cut 2"},
		{"between the faults, by the heal", 29, false, 40, "cut 2"},
		{"after both", 50, true, 50, ""},
	}
	for _, c := range cases {
		got, in := readyAfter(at(c.due), ws, c.whole)
		if !got.Equal(at(c.want)) || in != c.in {
			t.Errorf("%s: ready %v in %q, want %v in %q", c.name, got.Sub(at(0)), in, c.want, c.in)
		}
	}
}
