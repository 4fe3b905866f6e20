package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
)

func TestCronsNextPreviewsAcrossDST(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	out, _ := mustCLI(ctx, t, "crons", "next", "0 9 * * 1-5", "--tz", "America/New_York", "--from", "2026-03-05T12:00:00Z", "-n", "4")
	want := []string{
		"2026-03-05T14:00:00Z  Thu 2026-03-05 09:00:00 EST",
		"2026-03-06T14:00:00Z  Fri 2026-03-06 09:00:00 EST",
		"2026-03-09T13:00:00Z  Mon 2026-03-09 09:00:00 EDT",
		"2026-03-10T13:00:00Z  Tue 2026-03-10 09:00:00 EDT",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("crons next output lacks %q:\n%s", w, out)
		}
	}
	// Spring forward: 02:30 does not exist on 2026-03-08 and fires at 03:30 EDT, once.
	out, _ = mustCLI(ctx, t, "crons", "next", "daily 2:30", "--tz", "America/New_York", "--from", "2026-03-07T12:00:00Z", "-n", "2")
	if !strings.Contains(out, "2026-03-08T07:30:00Z  Sun 2026-03-08 03:30:00 EDT") || !strings.Contains(out, "2026-03-09T06:30:00Z") {
		t.Errorf("spring forward preview:\n%s", out)
	}
	// A bad spec names its field.
	_, _, err := cli(ctx, t, "crons", "next", "0 25 * * *")
	if !errors.Is(err, scheduler.ErrInvalidSchedule) || !strings.Contains(err.Error(), `"hour"`) {
		t.Errorf("bad spec: %v", err)
	}
}

func TestCronsManageThroughCLI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	url := "--url=" + e.URL
	out, _ := mustCLI(ctx, t, "crons", "add", "digest", "daily 9:00", "emails.digest", `{"list":"all"}`, "--tz", "Europe/Paris", url)
	if !strings.Contains(out, "cron digest registered: daily 09:00 (Europe/Paris)") {
		t.Fatalf("add: %s", out)
	}
	mustCLI(ctx, t, "crons", "add", "cleanup", "every 1h", "sessions.cleanup", url)
	if _, _, err := cli(ctx, t, "crons", "add", "digest", "hourly 5", "emails.digest", url); !errors.Is(err, scheduler.ErrCronExists) {
		t.Fatalf("add twice: %v", err)
	}

	// Fire the interval cron once, as the scheduler's leader would.
	_, js := e.Connect()
	crons, err := scheduler.NewCrons(ctx, js, scheduler.CronConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := crons.Tick(ctx); err != nil || st.Fired != 1 {
		t.Fatalf("tick: %+v %v", st, err)
	}

	out, _ = mustCLI(ctx, t, "crons", "list", url)
	for _, w := range []string{"NAME", "NEXT (UTC)", "LAST RUN", "OUTCOME", "SKIPPED",
		"digest", "daily", "09:00", "Europe/Paris", "enabled", "cleanup", "every 1h0m0s", "cron-cleanup-", "pending"} {
		if !strings.Contains(out, w) {
			t.Errorf("crons list lacks %q:\n%s", w, out)
		}
	}

	mustCLI(ctx, t, "crons", "pause", "digest", url)
	out, _ = mustCLI(ctx, t, "crons", "get", "digest", "--json", url)
	var ci scheduler.CronInfo
	if err := json.Unmarshal([]byte(out), &ci); err != nil {
		t.Fatalf("get --json: %v\n%s", err, out)
	}
	if ci.Enabled || !ci.Next.IsZero() || ci.Schedule.TZ != "Europe/Paris" || ci.Function != "emails.digest" || compact(t, ci.Args) != `{"list":"all"}` {
		t.Fatalf("paused cron: %+v", ci)
	}
	out, _ = mustCLI(ctx, t, "crons", "resume", "digest", url)
	if !strings.Contains(out, "resumed; next fire") || !strings.Contains(out, "09:00:00 CE") {
		t.Fatalf("resume: %s", out)
	}
	out, _ = mustCLI(ctx, t, "crons", "get", "cleanup", url)
	for _, w := range []string{"last run", "cron-cleanup-", "pending", "skipped", "0 (previous run still active)"} {
		if !strings.Contains(out, w) {
			t.Errorf("crons get lacks %q:\n%s", w, out)
		}
	}
	mustCLI(ctx, t, "crons", "delete", "digest", url)
	_, _, err = cli(ctx, t, "crons", "get", "digest", url)
	if !errors.Is(err, scheduler.ErrCronNotFound) || !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	if _, _, err := cli(ctx, t, "crons", "pause", "nope", url); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("pause unknown: %v", err)
	}
	if _, _, err := cli(ctx, t, "crons", "add", "x", "every 1h", "f", "{bad", url); err == nil {
		t.Fatal("bad JSON args accepted")
	}
}

// crons trigger starts the cron's call now; a cron record written by hand
// whose schedule does not validate is refused: exit 1 with the reason on
// stderr (scheduler.ErrBadCronRecord), and no run.
func TestCronsTriggerRefusesBadRecord(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	url := "--url=" + e.URL
	mustCLI(ctx, t, "crons", "add", "digest", "daily 9:00", "emails.digest", `{"list":"all"}`, url)
	out, _ := mustCLI(ctx, t, "crons", "trigger", "digest", "--json", url)
	var res struct {
		Run *jetflow.Run `json:"run"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Run == nil || !strings.HasPrefix(res.Run.ID, "trigger-digest-") ||
		res.Run.Name != "emails.digest" || !strings.Contains(string(res.Run.Args), `"all"`) {
		t.Fatalf("trigger digest: %s (%v)", out, err)
	}

	_, js := e.Connect()
	kvb, err := js.KeyValue(ctx, "jetflow_crons")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvb.Put(ctx, "def.badsched", []byte(`{"name":"badsched","origin":"runtime","spec":{"kind":"cron","expr":"99 99 * * *"},"function":"emails.digest","enabled":false}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cli(ctx, t, "crons", "trigger", "badsched", url); !errors.Is(err, scheduler.ErrBadCronRecord) || !errors.Is(err, jetflow.ErrBadRecord) {
		t.Fatalf("trigger of the bad record: %v", err)
	}
	var stdoutB, stderrB syncBuffer
	code := runMain(withOutput(ctx, &stdoutB, &stderrB), []string{"crons", "trigger", "badsched", url})
	if code != exitError || !strings.Contains(stderrB.String(), "unreadable cron record") || !strings.Contains(stderrB.String(), "99") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderrB.String())
	}
	runs, err := e.P.List(ctx, producer.Filter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs.Runs {
		if strings.HasPrefix(r.ID, "trigger-badsched") {
			t.Fatalf("the bad cron was triggered: %+v", r)
		}
	}
}
