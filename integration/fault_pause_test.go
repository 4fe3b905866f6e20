package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
)

// (g) A worker process holding deliveries is paused with SIGSTOP for
// longer than its AckWait (2 s): 5 s three times in the short version,
// 4-14 s six times in the long one, then resumed with SIGCONT. It pulls
// far ahead (Prefetch 256, concurrency 64), so that its pull requests
// still outstanding at the pause fill its socket while it is stopped; the
// other worker, with quick handlers, runs the runs JetStream redelivers
// meanwhile. When the paused worker resumes it must not start a handler
// for a delivery that went stale: no attempt runs twice, no handler
// starts after its run ended, no at-most-once run runs twice.
func TestFaultWorkerPause(t *testing.T) {
	t.Parallel()
	began := time.Now()
	rng := faultRand(t)
	pauses := pick(3, 6)
	n := pick(700, 3000)
	spread := pick(25*time.Second, 100*time.Second)
	minPause, maxPause := pick(5*time.Second, 4*time.Second), pick(5*time.Second, 14*time.Second)

	srv := startNATS(t)
	e := newLoadEnv(t, srv.url(), streams.Config{})
	paused := e.worker("wp", "--ack-wait", "2s", "--concurrency", "64", "--prefetch", "256")
	other := e.worker("wq", "--ack-wait", "2s", "--concurrency", "16")
	sched := e.scheduler("s1", "--repair-interval", "1s", "--repair-grace", "2s")
	start := time.Now()
	e.load("g1", n, spread, "--work-ms", "20")

	var windows []faultWindow
	var durations []string
	for k, ps := range pauseEach(rng, start, spread, pauses, minPause, maxPause, func() (*proc, string) {
		held := len(markers("STARTED", paused)) - len(markers("SUCCESS", paused))
		return paused, fmt.Sprintf("%d of its handlers had started and not succeeded", held)
	}) {
		t.Logf("%s: %s paused for %s (%s)", ps.from.Format(time.StampMilli), ps.p.name, ps.d, ps.note)
		windows = append(windows, faultWindow{what: fmt.Sprintf("pause %d", k+1), from: ps.from, to: ps.to, pid: paused.cmd.Process.Pid})
		durations = append(durations, ps.d.Round(100*time.Millisecond).String())
	}
	e.loadDone(spread + 3*time.Minute)
	c := e.check(pick(90*time.Second, 4*time.Minute))
	nc := e.faultCheck(c, windows)

	f := newFigures()
	f.set("pauses", strings.Join(durations, ","))
	c.report(t, f)
	nc.report(f)
	f.set("wall", time.Since(began))
	f.print(t, "g worker-pause")
	alive(t, paused, other, sched)
	nc.assert(t, e, c, netAssert{})
}

// (g2) The leading scheduler is paused with SIGSTOP for 4-12 s (past its
// lease's TTL, 2 s), then resumed, several times, under mixed load with
// delayed runs and retries (their backoff is a delayed entry too) and a
// standby scheduler. The standby takes the lease and dispatches what comes
// due; the paused leader resumes holding reads it made before the pause,
// and must not publish on them (elect.Holds): no attempt runs twice, none
// is lost, and runs due in a pause start within the lateness bound.
func TestFaultSchedulerPause(t *testing.T) {
	t.Parallel()
	began := time.Now()
	rng := faultRand(t)
	pauses := pick(3, 6)
	n := pick(700, 3000)
	spread := pick(25*time.Second, 100*time.Second)
	minPause, maxPause := pick(4*time.Second, 4*time.Second), pick(6*time.Second, 12*time.Second)

	srv := startNATS(t)
	e := newLoadEnv(t, srv.url(), streams.Config{})
	workers := []*proc{e.worker("w1", "--concurrency", "32"), e.worker("w2", "--concurrency", "32")}
	sflags := []string{"--lease-ttl", "2s", "--repair-interval", "30s", "--repair-grace", "10s"}
	scheds := []*proc{e.scheduler("s1", sflags...), e.scheduler("s2", sflags...)}
	waitLeader(t, scheds, nil, 30*time.Second)
	start := time.Now()
	e.load("g1", n, spread, "--work-ms", "20", "--max-delay", "2s")

	var windows []faultWindow
	var durations []string
	for k, ps := range pauseEach(rng, start, spread, pauses, minPause, maxPause, func() (*proc, string) {
		return waitLeader(t, scheds, nil, 30*time.Second), "leading"
	}) {
		t.Logf("%s: %s (%s) paused for %s", ps.from.Format(time.StampMilli), ps.p.name, ps.note, ps.d)
		// A run due in the pause is the standby's to start: the window
		// a run is late after is the standby's takeover (the lease's TTL,
		// then a try every TTL/5), not the pause.
		to := ps.to
		if takeover := ps.from.Add(3 * time.Second); takeover.Before(to) {
			to = takeover
		}
		windows = append(windows, faultWindow{what: fmt.Sprintf("pause %d of %s", k+1, ps.p.name), from: ps.from, to: to})
		durations = append(durations, ps.p.name+":"+ps.d.Round(100*time.Millisecond).String())
	}
	e.loadDone(spread + 3*time.Minute)
	c := e.check(pick(90*time.Second, 4*time.Minute))
	nc := e.faultCheck(c, windows)

	f := newFigures()
	f.set("pauses", strings.Join(durations, ","))
	c.report(t, f)
	nc.report(f)
	f.set("wall", time.Since(began))
	f.print(t, "g2 scheduler-pause")
	alive(t, append(workers, scheds...)...)
	nc.assert(t, e, c, netAssert{})
}

// pause is one SIGSTOP of a process: from its stop to its SIGCONT.
type pause struct {
	p        *proc
	note     string
	from, to time.Time
	d        time.Duration
}

// pauseEach pauses n times, evenly over spread from start, the process
// victim picks then (with a note on its state), each for a time between
// lo and hi, and returns the pauses.
func pauseEach(rng *rand.Rand, start time.Time, spread time.Duration, n int, lo, hi time.Duration, victim func() (*proc, string)) []pause {
	var out []pause
	every := spread / time.Duration(n+1)
	for k := range n {
		sleepUntil(start.Add(every * time.Duration(k+1)))
		d := between(rng, lo, hi)
		p, note := victim()
		from := time.Now()
		p.signal(syscall.SIGSTOP)
		time.Sleep(d)
		p.signal(syscall.SIGCONT)
		out = append(out, pause{p: p, note: note, from: from, to: time.Now(), d: d})
	}
	return out
}

// (i) Clock skew: two workers, one's jetflow clock (worker.Config.Now)
// 30 s ahead, the other's 30 s behind, under mixed load with retries (the
// fail1 classes fail their first attempt) and at-most-once runs, and a
// cron firing every second (the scheduler's clock is right). The load
// comes in bursts of 60 runs a second, every 6 s, of handlers working
// 600 ms, and each worker pulls 40 runs ahead of its 5 runners: runs wait
// in a worker past AckWait and are redelivered to the other while they
// run, or run there first (about 5 s of backlog a burst). Besides the
// load's guarantees: no live run is taken over as lost, no run has two
// handlers at once, a retry starts within 10 s of its failed attempt, and
// every cron tick runs once. The lateness of delayed runs is a figure
// here, not a guarantee (they wait behind the bursts).
func TestFaultClockSkew(t *testing.T) {
	t.Parallel()
	began := time.Now()
	bursts := pick(4, 15)
	const burst, every, skew = 60, 6 * time.Second, 30 * time.Second

	srv := startNATS(t)
	e := newLoadEnv(t, srv.url(), streams.Config{})
	wflags := []string{"--function", faultFns + ",ft.cron", "--ack-wait", "2s", "--concurrency", "5", "--prefetch", "40", "--quiet"}
	ahead := e.worker("ahead", append(wflags, "--clock-offset", skew.String())...)
	behind := e.worker("behind", append(wflags, "--clock-offset", (-skew).String())...)
	sched := e.scheduler("s1", "--repair-interval", "1s", "--repair-grace", "2s")
	waitLeader(t, []*proc{sched}, nil, 30*time.Second)

	ctx := context.Background()
	var crons *scheduler.Crons
	retry(t, 30*time.Second, "scheduler.NewCrons", func(ctx context.Context) error {
		var err error
		crons, err = scheduler.NewCrons(ctx, e.js, scheduler.CronConfig{})
		return err
	})
	const cronName, period = "ft-skew-1s", time.Second
	ci, err := crons.Register(ctx, scheduler.CronDef{Name: cronName, Schedule: scheduler.Interval(period), Call: jetflow.Define[args]("ft.cron").With(args{N: 1})})
	if err != nil {
		t.Fatal(err)
	}
	firstTick := ci.Next
	start := time.Now()
	for k := range bursts {
		sleepUntil(start.Add(every * time.Duration(k)))
		e.load(fmt.Sprintf("i%d", k+1), burst, time.Second, "--work-ms", "600")
	}
	e.loadDone(3 * time.Minute)
	cutoff := time.Now().Add(-time.Second).Truncate(time.Second)
	c := e.check(pick(90*time.Second, 4*time.Minute))
	nc := e.faultCheck(c, nil)

	// Every tick of the cron up to cutoff: one run, its handler once, or
	// skipped because the run before was still running then.
	retry(t, 60*time.Second, "cron evaluated past the window", func(ctx context.Context) error {
		ci, err := crons.Get(ctx, cronName)
		if err != nil {
			return err
		}
		if !ci.Next.After(cutoff) {
			return fmt.Errorf("next %s", ci.Next)
		}
		return nil
	})
	execs := map[string]int{}
	for _, l := range readLedger(t, e.ledger) {
		execs[l.id]++
	}
	var ticks, fired, busy, doubleExec int
	var cronLost []string
	var prev *jetflow.Run
	for tk := firstTick; !tk.After(cutoff); tk = tk.Add(period) {
		ticks++
		id := scheduler.CronRunID(cronName, tk)
		var r *jetflow.Run
		retry(t, 30*time.Second, "get "+id, func(ctx context.Context) error {
			var err error
			r, err = e.p.Get(ctx, id)
			if errors.Is(err, jetflow.ErrNotFound) {
				r, err = nil, nil
			}
			return err
		})
		switch {
		case r != nil:
			fired++
			if recs, notDone := records(t, e.p, e.runs, []string{id}, 60*time.Second); len(notDone) == 0 {
				r = recs[id]
			}
			if execs[id] > 1 {
				doubleExec++
			}
			prev = r
		case prev != nil && prev.CreationTime.Before(tk.Add(skew)) && (!prev.State.Terminal() || prev.CompletedTime.After(tk.Add(-skew))):
			busy++ // the run before may have been running at this tick (times by a skewed worker's clock)
		default:
			cronLost = append(cronLost, tk.Format("15:04:05"))
		}
	}

	f := newFigures()
	f.set("skew", fmt.Sprintf("+-%s", skew))
	f.set("bursts", bursts)
	c.report(t, f)
	nc.report(f)
	f.set("cron_ticks", ticks)
	f.set("cron_fired", fired)
	f.set("cron_busy", busy)
	f.set("cron_lost", len(cronLost))
	f.set("cron_double", doubleExec)
	f.set("wall", time.Since(began))
	f.print(t, "i clock-skew")
	alive(t, ahead, behind, sched)
	if doubleExec > 0 {
		t.Errorf("%d cron ticks ran their handler more than once", doubleExec)
	}
	if len(cronLost) > 0 {
		t.Errorf("%d of %d cron ticks have no run (the run before had ended), e.g. %v", len(cronLost), ticks, cronLost[:min(5, len(cronLost))])
	}
	nc.assert(t, e, c, netAssert{overlaps: true, takeovers: true, retryGap: true})
}
