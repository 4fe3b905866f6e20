package scheduler_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
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
