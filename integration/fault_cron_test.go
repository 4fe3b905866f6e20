package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
)

// leaderOf returns the live process among ps whose last LEADER/STANDBY
// line is LEADER, or nil.
func leaderOf(ps []*proc) *proc {
	for _, p := range ps {
		select {
		case <-p.exited:
			continue
		default:
		}
		last := ""
		for _, l := range p.snapshot() {
			if strings.HasPrefix(l, "LEADER ") || strings.HasPrefix(l, "STANDBY ") {
				last = l
			}
		}
		if strings.HasPrefix(last, "LEADER ") {
			return p
		}
	}
	return nil
}

func waitLeader(t *testing.T, ps []*proc, not *proc, within time.Duration) *proc {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if l := leaderOf(ps); l != nil && l != not {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduler leader within %s", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// (c) Three scheduler processes; crons every 1 s and every 2 s registered
// with default settings; the leader SIGKILLed twice (and started again as
// a standby). Every scheduled time of the window fires exactly once: no
// tick has two runs or two handler executions, and none is lost, except
// ticks older than the cron's Grace when a new leader took over (missed,
// by definition) and ticks skipped because the cron's previous run was
// still running at that time (Overlap is off by default).
func TestFaultSchedulerFailover(t *testing.T) {
	t.Parallel()
	began := time.Now()
	const grace = time.Minute // CronConfig.Grace default
	srv := startNATS(t)
	e := newLoadEnv(t, srv.url(), streams.Config{})
	startProc(t, "worker", "--url", srv.url(), "--role", "worker", "--id", "w1", "--function", "ft.cron", "--ledger", e.ledger)
	sargs := []string{"--lease-ttl", "5s"} // the scheduler's default
	scheds := []*proc{e.scheduler("s1", sargs...), e.scheduler("s2", sargs...), e.scheduler("s3", sargs...)}
	waitLeader(t, scheds, nil, 30*time.Second)

	ctx := context.Background()
	var crons *scheduler.Crons
	retry(t, 30*time.Second, "scheduler.NewCrons", func(ctx context.Context) error {
		var err error
		crons, err = scheduler.NewCrons(ctx, e.js, scheduler.CronConfig{})
		return err
	})
	fn := jetflow.Define[args]("ft.cron")
	type cronDef struct {
		name   string
		period time.Duration
		first  time.Time
	}
	defs := []*cronDef{{name: "ft-every-1s", period: time.Second}, {name: "ft-every-2s", period: 2 * time.Second}}
	for _, d := range defs {
		ci, err := crons.Register(ctx, scheduler.CronDef{Name: d.name, Schedule: scheduler.Interval(d.period), Call: fn.With(args{N: 1})})
		if err != nil {
			t.Fatal(err)
		}
		d.first = ci.Next
	}

	type failover struct{ killed, tookOver time.Time }
	var failovers []failover
	for k := range 2 {
		time.Sleep(5 * time.Second) // pace: ticks fire under the leader
		old := leaderOf(scheds)
		if old == nil {
			old = waitLeader(t, scheds, nil, 30*time.Second)
		}
		killed := time.Now()
		old.kill()
		nl := waitLeader(t, scheds, old, 60*time.Second)
		failovers = append(failovers, failover{killed, time.Now()})
		t.Logf("failover %d: %s killed, %s leads after %s", k+1, old.name, nl.name, time.Since(killed).Round(time.Millisecond))
		scheds = append(scheds, e.scheduler(fmt.Sprintf("%s-%d", old.name, k+1), sargs...))
	}
	time.Sleep(5 * time.Second)
	cutoff := time.Now().Add(-time.Second).Truncate(time.Second)
	// Every tick up to cutoff has been evaluated (fired or skipped) once
	// the cron's next time is past it.
	retry(t, 60*time.Second, "crons evaluated past the window", func(ctx context.Context) error {
		for _, d := range defs {
			ci, err := crons.Get(ctx, d.name)
			if err != nil {
				return err
			}
			if !ci.Next.After(cutoff) {
				return fmt.Errorf("%s: next %s", d.name, ci.Next)
			}
		}
		return nil
	})

	var ticks, fired, lost, lostGrace, busy, doubleExec, offSchedule, skipped, missed int
	var lostEg []string
	execs := map[string]int{}
	for _, l := range readLedger(t, e.ledger) {
		execs[l.id]++
	}
	for _, d := range defs {
		var ids []string
		exists := map[time.Time]bool{}
		var times []time.Time
		for tk := d.first; !tk.After(cutoff); tk = tk.Add(d.period) {
			ticks++
			times = append(times, tk)
			id := scheduler.CronRunID(d.name, tk)
			var err error
			retry(t, 30*time.Second, "get "+id, func(ctx context.Context) error {
				_, err = e.p.Get(ctx, id)
				if errors.Is(err, jetflow.ErrNotFound) {
					return nil
				}
				return err
			})
			if err == nil {
				exists[tk] = true
				ids = append(ids, id)
			}
		}
		recs, notDone := records(t, e.p, e.runs, ids, 60*time.Second)
		if len(notDone) > 0 {
			t.Errorf("%s: %d cron runs never ended, e.g. %v", d.name, len(notDone), notDone[:min(5, len(notDone))])
		}
		fired += len(ids)
		var prev *jetflow.Run
		for _, tk := range times {
			id := scheduler.CronRunID(d.name, tk)
			if exists[tk] {
				prev = recs[id]
				if execs[id] > 1 {
					doubleExec++
				}
				continue
			}
			older := false
			for _, fo := range failovers {
				if !tk.After(fo.tookOver) && fo.tookOver.Sub(tk) > grace {
					older = true
				}
			}
			switch {
			case older:
				lostGrace++
			case prev != nil && prev.CreationTime.Before(tk) && (!prev.State.Terminal() || prev.CompletedTime.After(tk)):
				busy++ // the previous run was still running at this tick's time
			default:
				lost++
				if len(lostEg) < 8 {
					lostEg = append(lostEg, fmt.Sprintf("%s@%s", d.name, tk.Format("15:04:05")))
				}
			}
		}
		if ci, err := crons.Get(ctx, d.name); err == nil {
			skipped += int(ci.Skipped)
			missed += int(ci.Missed)
		}
		// No run of this cron at a time that is not one of its ticks.
		e.runs.mu.Lock()
		for id := range e.runs.last {
			name, tk, ok := scheduler.ParseCronRunID(id)
			if ok && name == d.name && (tk.Before(d.first) || tk.Sub(d.first)%d.period != 0) {
				offSchedule++
			}
		}
		e.runs.mu.Unlock()
	}
	sort.Strings(lostEg)

	f := newFigures()
	f.set("failovers", len(failovers))
	for i, fo := range failovers {
		f.set(fmt.Sprintf("takeover%d", i+1), fo.tookOver.Sub(fo.killed))
	}
	f.set("ticks", ticks)
	f.set("fired", fired)
	f.set("lost", lost)
	f.set("lost_beyond_grace", lostGrace)
	f.set("skipped_busy", busy)
	f.set("double_fires", doubleExec)
	f.set("off_schedule", offSchedule)
	f.set("cron_skipped", skipped)
	f.set("cron_missed", missed)
	f.set("wall", time.Since(began))
	f.print(t, "c scheduler-failover")
	if doubleExec > 0 || offSchedule > 0 {
		t.Errorf("%d ticks ran their handler more than once, %d runs fired off schedule", doubleExec, offSchedule)
	}
	if lost > 0 {
		t.Errorf("%d of %d ticks lost within Grace (no run, previous run not running then), e.g. %v", lost, ticks, lostEg)
	}
}
