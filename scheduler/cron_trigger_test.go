package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/scheduler"
)

// Trigger starts a cron's call now under a derived id, and refuses a
// stored record that cannot be used, one whose schedule does not validate
// among them (written by hand into the bucket, as a hostile client can),
// with ErrBadCronRecord, matching jetflow.ErrBadRecord, and no run.
func TestCronTriggerRefusesBadRecord(t *testing.T) {
	t.Parallel()
	t0 := cronBase()
	ts, c, p, _ := cronSetup(t, t0, scheduler.CronConfig{})
	ctx := context.Background()
	cronRegister(t, c, scheduler.CronDef{Name: "good", Schedule: scheduler.Daily(3, 0), Call: cronFn.With(cronArgs{N: 7})})
	run, err := c.Trigger(ctx, "good")
	if err != nil || run.ID != "trigger-good-"+itoa(t0.Unix()) || run.Name != "crontest.ping" || string(run.Args) != `{"n":7}` {
		t.Fatalf("trigger good: %+v %v", run, err)
	}
	kvb, err := ts.JS.KeyValue(ctx, "jetflow_crons")
	if err != nil {
		t.Fatal(err)
	}
	for key, val := range map[string]string{
		"def.badsched": `{"name":"badsched","origin":"runtime","spec":{"kind":"cron","expr":"99 99 * * *"},"function":"crontest.ping","enabled":false}`,
		"def.garbage":  `not json`,
		"def.other":    `{"name":"someone","spec":{"kind":"daily","hour":3},"function":"crontest.ping"}`,
	} {
		if _, err := kvb.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"badsched", "garbage", "other"} {
		run, err := c.Trigger(ctx, name)
		if !errors.Is(err, scheduler.ErrBadCronRecord) || !errors.Is(err, jetflow.ErrBadRecord) || run != nil {
			t.Fatalf("trigger %s: %+v %v, want ErrBadCronRecord", name, run, err)
		}
		if _, err := p.Get(ctx, "trigger-"+name+"-"+itoa(t0.Unix())); !errors.Is(err, jetflow.ErrNotFound) {
			t.Fatalf("%s: a run was started (%v)", name, err)
		}
	}
	if !strings.Contains(errText(c.Trigger(ctx, "badsched")), "99") {
		t.Fatal("the refusal does not name the bad schedule")
	}
	if _, err := c.Trigger(ctx, "nobody"); !errors.Is(err, scheduler.ErrCronNotFound) {
		t.Fatalf("trigger of no cron: %v", err)
	}
	if _, err := c.Trigger(ctx, "no.name"); !errors.Is(err, scheduler.ErrInvalidCron) {
		t.Fatalf("trigger of an invalid name: %v", err)
	}
	// List shows each unusable record as such, under its key's name.
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	why := map[string]string{}
	for _, ci := range list {
		why[ci.Name] = ci.Unreadable
	}
	if why["good"] != "" || !strings.Contains(why["badsched"], "99") || !strings.Contains(why["garbage"], "invalid character") || !strings.Contains(why["other"], "someone") {
		t.Fatalf("listed: %q", why)
	}
}

func errText(_ *jetflow.Run, err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A standby scheduler whose code-defined crons differ from the stored ones
// (the leader's) logs a warning naming each cron and the difference, once
// per difference: a cron it defines that is not stored, and one stored with
// another schedule.
func TestStandbyWarnsOfDifferentCodeCrons(t *testing.T) {
	t.Parallel()
	ts := cronServer(t)
	ctx := context.Background()
	start := func(id string, defs []scheduler.CronDef, logTo *testserver.Buffer) *scheduler.Scheduler {
		t.Helper()
		_, js := ts.Connect()
		cfg := scheduler.Config{ID: id, LeaseTTL: time.Second}
		if logTo != nil {
			cfg.Logger = slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		s, err := scheduler.New(ctx, js, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.ConfigureCrons(scheduler.CronConfig{Crons: defs}); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = s.Stop(sctx)
		})
		return s
	}
	leader := start("leader", []scheduler.CronDef{{Name: "digest", Schedule: scheduler.Daily(3, 0), Call: cronFn.With(cronArgs{})}}, nil)
	testserver.Eventually(t, 20*time.Second, "the leader to store its crons", func() bool {
		list, err := leader.Crons().List(ctx)
		return leader.IsLeader() && err == nil && len(list) == 1
	})

	var logs testserver.Buffer
	standby := start("standby", []scheduler.CronDef{
		{Name: "digest", Schedule: scheduler.Hourly(15), Call: cronFn.With(cronArgs{})},
		{Name: "cleanup", Schedule: scheduler.Interval(time.Minute), Call: cronFn.With(cronArgs{})},
	}, &logs)
	warned := func(cron string) int {
		return strings.Count(logs.String(), "cron="+cron+" ")
	}
	testserver.Eventually(t, 20*time.Second, "the standby to warn of both crons", func() bool {
		return warned("digest") == 1 && warned("cleanup") == 1
	})
	out := logs.String()
	for _, want := range []string{"level=WARN", `difference="schedule: stored daily 03:00 (UTC), code hourly :15 (UTC)"`, `difference="missing from the stored crons (code: every 1m0s)"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %s:\n%s", want, out)
		}
	}
	if standby.IsLeader() {
		t.Fatal("the standby leads")
	}
	// Checked again (as every RepairInterval): nothing new, no new line.
	for range 2 {
		diffs, err := scheduler.CheckCode(ctx, standby.Crons())
		if err != nil || len(diffs) != 2 {
			t.Fatalf("check: %v %v", diffs, err)
		}
	}
	if warned("digest") != 1 || warned("cleanup") != 1 {
		t.Fatalf("warned more than once per difference:\n%s", logs.String())
	}
}
