package scheduler_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/nats-io/nats.go"
)

// An interval as long as a time.Duration allows, missed at its first fire
// (no scheduler ran within Grace of its registration): the missed fire is
// counted and the cron moves to its next time. The period added to the
// time missed overflowed, moving the cron back in time, where it stayed,
// never firing again.
func TestCronHugeIntervalMissed(t *testing.T) {
	t.Parallel()
	t0 := cronBase()
	_, c, _, clk := cronSetup(t, t0, scheduler.CronConfig{})
	every := time.Duration(1<<63-1) / time.Second * time.Second
	cronRegister(t, c, scheduler.CronDef{Name: "huge", Schedule: scheduler.Interval(every)})
	clk.Add(5 * time.Minute)
	if st := cronTick(t, c); st.Missed != 1 || st.Fired != 0 {
		t.Fatalf("tick: %+v, want 1 missed", st)
	}
	ci := cronGet(t, c, "huge")
	if ci.Missed != 1 || !ci.Next.Equal(t0.Add(every)) {
		t.Fatalf("huge: missed %d next %v, want 1 and %v", ci.Missed, ci.Next, t0.Add(every))
	}
}

// Cron records written by hand into the crons bucket, each filed in the
// index at the second a good cron fires: every one is reported as
// ErrBadCronRecord (jetflow.ErrBadRecord), its index entry is dropped, and
// the good cron fires at each of its times. Before, each was an error
// retried at every tick (logged every second forever), a record holding
// another cron's name made every tick wait 8 s and a schedule of an
// unknown kind started a run before failing.
func TestCronGarbageRecords(t *testing.T) {
	t.Parallel()
	t0 := cronBase()
	ts, c, p, clk := cronSetup(t, t0, scheduler.CronConfig{})
	ctx := context.Background()
	cronRegister(t, c, scheduler.CronDef{Name: "good", Schedule: scheduler.Interval(10 * time.Second), Overlap: true})
	kvb, err := ts.JS.KeyValue(ctx, "jetflow_crons")
	if err != nil {
		t.Fatal(err)
	}
	due := strconv.FormatInt(t0.Unix(), 10)
	next := t0.Format(time.RFC3339)
	rec := func(name, fields string) string {
		return `{"name":"` + name + `","spec":{"kind":"interval","every":10000000000},"function":"crontest.ping","enabled":true,"next":"` +
			next + `","due":` + due + fields + `}`
	}
	garbage := map[string]string{
		"badjson":   `{not json`,
		"wrongtype": `{"name":"wrongtype","spec":{"kind":"interval","every":"10s"},"enabled":"yes"}`,
		"array":     `[1,2,3]`,
		"badkind":   `{"name":"badkind","spec":{"kind":"bogus"},"function":"crontest.ping","enabled":true,"next":"` + next + `","due":` + due + `}`,
		"onens":     `{"name":"onens","spec":{"kind":"interval","every":1},"function":"crontest.ping","enabled":true,"next":"` + next + `","due":` + due + `}`,
		"febthirty": `{"name":"febthirty","spec":{"kind":"cron","expr":"0 0 30 2 *"},"function":"crontest.ping","enabled":true,"next":"` + next + `","due":` + due + `}`,
		"mismatch":  `{"name":"good","spec":{"kind":"interval","every":10000000000},"function":"crontest.ping","enabled":true,"next":"` + next + `","due":` + due + `}`,
		"negative":  rec("negative", `,"catchUp":-1`),
		"year0":     strings.Replace(rec("year0", ""), next, "0000-01-01T00:00:00Z", 1),
		"year9999":  strings.Replace(rec("year9999", ""), next, "9999-12-31T00:00:00Z", 1),
		"nodue":     strings.Replace(rec("nodue", ""), `"due":`+due, `"due":0`, 1),
	}
	for name, val := range garbage {
		if _, err := kvb.Put(ctx, "def."+name, []byte(val)); err != nil {
			t.Fatal(err)
		}
		if _, err := kvb.Put(ctx, "due."+strconv.FormatInt(t0.Unix()/3600, 10)+"."+due+"."+name, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A zone this process does not know may be known to another (an older
	// tzdata here): that cron's evaluation fails and is retried, its
	// record and index entry kept.
	if _, err := kvb.Put(ctx, "def.otherzone", []byte(`{"name":"otherzone","spec":{"kind":"daily","hour":9,"tz":"Mars/Olympus"},"function":"crontest.ping","enabled":true,"next":"`+next+`","due":`+due+`}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kvb.Put(ctx, "due."+strconv.FormatInt(t0.Unix()/3600, 10)+"."+due+".otherzone", nil); err != nil {
		t.Fatal(err)
	}
	st, err := c.Tick(ctx)
	if err != nil || st.Fired != 1 || st.Bad != len(garbage) || st.Errors != 1 {
		t.Fatalf("first tick: %+v %v, want 1 fired, %d bad, 1 error", st, err, len(garbage))
	}
	for i := 1; i <= 3; i++ {
		clk.Add(10 * time.Second)
		st, err := c.Tick(ctx)
		if err != nil || st.Fired != 1 || st.Bad != 0 || st.Due != 2 || st.Errors != 1 {
			t.Fatalf("tick %d: %+v %v, want the good cron fired and otherzone retried", i, st, err)
		}
	}
	cronRunsExist(t, p, "good", map[time.Time]bool{t0: true, t0.Add(30 * time.Second): true})
	for _, name := range []string{"mismatch", "badkind", "onens", "year0"} {
		cronRunsExist(t, p, name, map[time.Time]bool{t0: false})
	}
	for name := range garbage {
		if _, err := c.Get(ctx, name); !errors.Is(err, jetflow.ErrBadRecord) || !errors.Is(err, scheduler.ErrBadCronRecord) {
			if name == "year9999" && err == nil {
				continue // readable; only the evaluator can tell its next time is impossible
			}
			t.Errorf("Get %s: %v, want ErrBadCronRecord", name, err)
		}
		if err := c.Pause(ctx, name); name != "year9999" && !errors.Is(err, jetflow.ErrBadRecord) {
			t.Errorf("Pause %s: %v, want ErrBadCronRecord", name, err)
		}
	}
	if _, err := c.Get(ctx, "otherzone"); !errors.Is(err, scheduler.ErrUnknownZone) {
		t.Errorf("Get otherzone: %v, want ErrUnknownZone", err)
	}
	if err := c.Delete(ctx, "otherzone"); err != nil {
		t.Fatal(err)
	}
	// Delete removes an unusable record.
	if err := c.Delete(ctx, "badjson"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "badjson"); !errors.Is(err, scheduler.ErrCronNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	// A code-defined cron replaces an unusable record of its name.
	code, err := scheduler.NewCrons(ctx, ts.JS, scheduler.CronConfig{Now: clk.Now, Crons: []scheduler.CronDef{{
		Name: "wrongtype", Schedule: scheduler.Interval(time.Minute), Call: cronFn.With(cronArgs{N: 2}),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := code.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if ci := cronGet(t, c, "wrongtype"); ci.Origin != scheduler.OriginCode || !ci.Enabled {
		t.Fatalf("wrongtype after Sync: %+v", ci)
	}
}

type bigArgs struct {
	S string `json:"s"`
}

var bigFn = jetflow.Define[bigArgs]("crontest.big")

// Args at the size limit register; with a long cron expression on top the
// definition no longer fits a message: ErrInvalidCron, and nothing is
// left in the index. It was the server's untyped "maximum payload
// exceeded", after the cron's index entry had been written. A 10 KB name
// is refused without the error repeating it.
func TestCronRegisterOversizedDefinition(t *testing.T) {
	t.Parallel()
	t0 := cronBase()
	ts, c, _, _ := cronSetup(t, t0, scheduler.CronConfig{})
	ctx := context.Background()
	limit := int(ts.NC.MaxPayload()) - 4096 // kv.ArgsLimit
	atLimit := bigFn.With(bigArgs{S: strings.Repeat("x", limit-len(`{"s":""}`))})
	if _, err := c.Register(ctx, scheduler.CronDef{Name: "at-limit", Schedule: scheduler.Interval(time.Minute), Call: atLimit}); err != nil {
		t.Fatalf("args at the limit: %v", err)
	}
	longExpr := "0" + strings.Repeat(",0", 5000) + " * * * *"
	_, err := c.Register(ctx, scheduler.CronDef{Name: "long-expr", Schedule: scheduler.Cron(longExpr), Call: atLimit})
	if !errors.Is(err, scheduler.ErrInvalidCron) {
		t.Fatalf("args at the limit and a 10 KB expression: %v, want ErrInvalidCron", err)
	}
	if n := cronIndexEntries(t, ts); n != 1 {
		t.Fatalf("%d index entries, want the one of at-limit", n)
	}
	_, err = c.Register(ctx, scheduler.CronDef{Name: strings.Repeat("n", 10<<10), Schedule: scheduler.Daily(1, 0), Call: cronFn.With(cronArgs{})})
	if !errors.Is(err, scheduler.ErrInvalidCron) || len(err.Error()) > 1024 {
		t.Fatalf("10 KB name: %d bytes of error, ErrInvalidCron %v", len(err.Error()), errors.Is(err, scheduler.ErrInvalidCron))
	}
}

// The evaluator's watermark in the crons bucket, unusable: ahead of the
// clock (a leader whose clock ran ahead, or written by hand) or not a
// number. A new term reads the whole index once, the cron due during the
// downtime is evaluated, and the watermark is replaced. Before, a
// watermark ahead of the clock was read from and never replaced: a cron
// due before it never fired again. One that was not a number made the
// term read from second 1 with a consumer per 100 hours since 1970
// (about 4,900 consumers, seconds of stalled tick).
func TestCronWatermarkUnusable(t *testing.T) {
	t.Parallel()
	for _, wm := range []string{"abc", "99999999999"} {
		t0 := cronBase()
		ts, c, _, clk := cronSetup(t, t0, scheduler.CronConfig{})
		ctx := context.Background()
		cronRegister(t, c, scheduler.CronDef{Name: "d", Schedule: scheduler.Interval(time.Minute), Overlap: true})
		kvb, err := ts.JS.KeyValue(ctx, "jetflow_crons")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kvb.Put(ctx, "meta.watermark", []byte(wm)); err != nil {
			t.Fatal(err)
		}
		var consumers atomic.Int64
		sub, err := ts.NC.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED.KV_jetflow_crons.>", func(*nats.Msg) { consumers.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		if err := ts.NC.Flush(); err != nil {
			t.Fatal(err)
		}
		// Ten minutes without a scheduler, then a new term.
		clk.Add(10 * time.Minute)
		if st := cronTick(t, c); st.Due != 1 || st.Fired != 2 || st.Missed != 9 {
			t.Fatalf("watermark %q: tick %+v, want the cron's 9 missed fires skipped and 2 fired", wm, st)
		}
		e, err := kvb.Get(ctx, "meta.watermark")
		if err != nil || string(e.Value()) != strconv.FormatInt(clk.Now().Unix(), 10) {
			t.Fatalf("watermark %q: after the tick %v, want %d", wm, e, clk.Now().Unix())
		}
		if err := ts.NC.Flush(); err != nil {
			t.Fatal(err)
		}
		_ = sub.Unsubscribe()
		if n := consumers.Load(); n > 10 {
			t.Fatalf("watermark %q: %d consumers made for one tick", wm, n)
		}
	}
}

// CatchUp beyond MaxCatchUp is refused: the evaluation of the cron counts
// its missed fires, up to CatchUp, after an outage, while the other crons
// wait (a per-second cron down a month counted 2.6 million).
func TestCronCatchUpBounded(t *testing.T) {
	t.Parallel()
	_, c, _, _ := cronSetup(t, cronBase(), scheduler.CronConfig{})
	ctx := context.Background()
	for _, n := range []int{-1, scheduler.MaxCatchUp + 1, 1 << 40} {
		_, err := c.Register(ctx, scheduler.CronDef{Name: "every-second", Schedule: scheduler.Cron("* * * * * *"), CatchUp: n, Call: cronFn.With(cronArgs{})})
		if !errors.Is(err, scheduler.ErrInvalidCron) {
			t.Fatalf("CatchUp %d: %v, want ErrInvalidCron", n, err)
		}
	}
	cronRegister(t, c, scheduler.CronDef{Name: "every-second", Schedule: scheduler.Cron("* * * * * *"), CatchUp: scheduler.MaxCatchUp})
}

// An index entry whose evaluation keeps failing (here a zone no process
// knows, written by hand; in life a stream without a leader) is retried
// from the leader's memory. The stored watermark holds back for it, so
// that a new leader reads it again once the cause is gone: before, a new
// leader read from two minutes before the watermark, never saw the entry,
// and the cron never fired again.
func TestCronRetriedEntryOutlivesALeaderChange(t *testing.T) {
	t.Parallel()
	t0 := cronBase()
	ts, c, _, clk := cronSetup(t, t0, scheduler.CronConfig{})
	ctx := context.Background()
	cronRegister(t, c, scheduler.CronDef{Name: "good", Schedule: scheduler.Interval(time.Minute), Overlap: true})
	kvb, err := ts.JS.KeyValue(ctx, "jetflow_crons")
	if err != nil {
		t.Fatal(err)
	}
	due := strconv.FormatInt(t0.Unix(), 10)
	rec := func(tz string) []byte {
		return []byte(`{"name":"flaky","spec":{"kind":"daily","hour":9,"tz":"` + tz + `"},"function":"crontest.ping","enabled":true,"next":"` +
			t0.Format(time.RFC3339) + `","due":` + due + `}`)
	}
	if _, err := kvb.Put(ctx, "def.flaky", rec("Mars/Olympus")); err != nil {
		t.Fatal(err)
	}
	if _, err := kvb.Put(ctx, "due."+strconv.FormatInt(t0.Unix()/3600, 10)+"."+due+".flaky", nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= 10; i++ {
		st, err := c.Tick(ctx)
		if err != nil || st.Errors != 1 {
			t.Fatalf("tick %d: %+v %v, want flaky's evaluation to fail", i, st, err)
		}
		clk.Add(time.Minute)
	}
	// The cause goes away, and another scheduler leads.
	if _, err := kvb.Put(ctx, "def.flaky", rec("Europe/Paris")); err != nil {
		t.Fatal(err)
	}
	c2, err := scheduler.NewCrons(ctx, ts.JS, scheduler.CronConfig{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cronTick(t, c2)
	if ci := cronGet(t, c2, "flaky"); !ci.Next.After(clk.Now()) {
		t.Fatalf("flaky after the new leader's tick: next %v (now %v), want its next time: its entry was not read", ci.Next, clk.Now())
	}
}
