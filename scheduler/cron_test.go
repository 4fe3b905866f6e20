package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// cronServer is testserver.Start with a 1 min fsync interval: nats-server
// v2.15.2 arms a new file store's sync timer without its lock, a race that
// "go test -race" reports when the timer fires within the default 10 ms.
func cronServer(t *testing.T) *testserver.Env {
	t.Helper()
	e := &testserver.Env{T: t, Dir: t.TempDir()}
	srv, err := embedded.Start(embedded.Options{Dir: e.Dir, SyncEvery: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e.S = srv
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e.NC, e.JS = nc, js
	return e
}

type cronArgs struct {
	N int `json:"n"`
}

var cronFn = jetflow.Define[cronArgs]("crontest.ping")

// cronClock is a settable clock.
type cronClock struct {
	mu sync.Mutex
	t  time.Time
}

func newCronClock(t time.Time) *cronClock { return &cronClock{t: t} }

func (c *cronClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *cronClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *cronClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// cronSetup starts a server and returns crons and a producer on a fake clock.
func cronSetup(t *testing.T, start time.Time, cfg scheduler.CronConfig) (*testserver.Env, *scheduler.Crons, *producer.Producer, *cronClock) {
	t.Helper()
	ts := cronServer(t)
	clk := newCronClock(start)
	cfg.Now = clk.Now
	ctx := context.Background()
	c, err := scheduler.NewCrons(ctx, ts.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return ts, c, p, clk
}

func cronTick(t *testing.T, c *scheduler.Crons) scheduler.TickStats {
	t.Helper()
	st, err := c.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Errors != 0 {
		t.Fatalf("tick errors: %+v", st)
	}
	return st
}

func cronRegister(t *testing.T, c *scheduler.Crons, d scheduler.CronDef) *scheduler.CronInfo {
	t.Helper()
	if d.Call.Name == "" {
		d.Call = cronFn.With(cronArgs{N: 1})
	}
	ci, err := c.Register(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return ci
}

func cronGet(t *testing.T, c *scheduler.Crons, name string) *scheduler.CronInfo {
	t.Helper()
	ci, err := c.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return ci
}

// cronRunsExist asserts which fire times of cron name have a run record.
func cronRunsExist(t *testing.T, p *producer.Producer, name string, want map[time.Time]bool) {
	t.Helper()
	for at, exists := range want {
		_, err := p.Get(context.Background(), scheduler.CronRunID(name, at))
		switch {
		case exists && err != nil:
			t.Errorf("run of %s at %s: %v", name, at.Format(time.RFC3339), err)
		case !exists && !errors.Is(err, jetflow.ErrNotFound):
			t.Errorf("run of %s at %s exists (err %v), want none", name, at.Format(time.RFC3339), err)
		}
	}
}

// cronIndexEntries counts the due-index entries of the crons bucket.
func cronIndexEntries(t *testing.T, ts *testserver.Env) int {
	t.Helper()
	ctx := context.Background()
	kv, err := ts.JS.KeyValue(ctx, "jetflow_crons")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeysFiltered(ctx, "due.>")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	return n
}

func cronBase() time.Time { return time.Now().UTC().Truncate(time.Hour).Add(30 * time.Minute) }

func TestCronOverlapSkip(t *testing.T) {
	t.Parallel()
	t0 := cronBase()
	_, c, p, clk := cronSetup(t, t0, scheduler.CronConfig{})
	ctx := context.Background()
	cronRegister(t, c, scheduler.CronDef{Name: "single", Schedule: scheduler.Interval(10 * time.Second)})
	cronRegister(t, c, scheduler.CronDef{Name: "overlap", Schedule: scheduler.Interval(10 * time.Second), Overlap: true})

	if st := cronTick(t, c); st.Fired != 2 {
		t.Fatalf("first tick: %+v, want 2 fired", st)
	}
	// No worker: the first runs stay pending, so "single" skips.
	for i := 0; i < 2; i++ {
		clk.Add(10 * time.Second)
		if st := cronTick(t, c); st.Fired != 1 || st.Skipped != 1 {
			t.Fatalf("tick %d: %+v, want 1 fired (overlap) and 1 skipped", i, st)
		}
	}
	if err := p.Cancel(ctx, scheduler.CronRunID("single", t0)); err != nil {
		t.Fatal(err)
	}
	clk.Add(10 * time.Second)
	if st := cronTick(t, c); st.Fired != 2 {
		t.Fatalf("after the previous run ended: %+v, want 2 fired", st)
	}
	cronRunsExist(t, p, "single", map[time.Time]bool{
		t0: true, t0.Add(10 * time.Second): false, t0.Add(20 * time.Second): false, t0.Add(30 * time.Second): true,
	})
	cronRunsExist(t, p, "overlap", map[time.Time]bool{
		t0: true, t0.Add(10 * time.Second): true, t0.Add(20 * time.Second): true, t0.Add(30 * time.Second): true,
	})
	ci := cronGet(t, c, "single")
	if ci.Fired != 2 || ci.Skipped != 2 || ci.Last == nil || ci.Last.RunID != scheduler.CronRunID("single", t0.Add(30*time.Second)) ||
		ci.Last.State != jetflow.Pending || !ci.Next.Equal(t0.Add(40*time.Second)) {
		t.Fatalf("single: %+v last %+v", ci, ci.Last)
	}
	if err := p.Cancel(ctx, ci.Last.RunID); err != nil {
		t.Fatal(err)
	}
	if ci := cronGet(t, c, "single"); ci.Last.State != jetflow.Canceled {
		t.Fatalf("last run outcome %q, want canceled", ci.Last.State)
	}
}

func TestCronCatchUp(t *testing.T) {
	t.Parallel()
	t0 := cronBase()
	_, c, p, clk := cronSetup(t, t0, scheduler.CronConfig{Grace: time.Second})
	ctx := context.Background()
	every := scheduler.Interval(time.Minute)
	cronRegister(t, c, scheduler.CronDef{Name: "skip", Schedule: every})
	cronRegister(t, c, scheduler.CronDef{Name: "replay", Schedule: every, CatchUp: 3, Overlap: true})
	cronRegister(t, c, scheduler.CronDef{Name: "serial", Schedule: every, CatchUp: 2})
	if st := cronTick(t, c); st.Fired != 3 {
		t.Fatalf("first cronTick %+v", st)
	}
	for _, n := range []string{"skip", "serial"} {
		if err := p.Cancel(ctx, scheduler.CronRunID(n, t0)); err != nil {
			t.Fatal(err)
		}
	}
	m := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }

	// Ten minutes of downtime.
	clk.Add(10 * time.Minute)
	cronTick(t, c)
	// skip: the nine missed fires are skipped, the one due now fires.
	cronRunsExist(t, p, "skip", map[time.Time]bool{m(1): false, m(9): false, m(10): true})
	if ci := cronGet(t, c, "skip"); ci.Missed != 9 || ci.Fired != 2 || !ci.Next.Equal(m(11)) {
		t.Fatalf("skip: %+v", ci)
	}
	// replay: the first three missed fires replay in order, six are skipped.
	cronRunsExist(t, p, "replay", map[time.Time]bool{m(1): true, m(2): true, m(3): true, m(4): false, m(9): false, m(10): true})
	if ci := cronGet(t, c, "replay"); ci.Missed != 6 || ci.Fired != 5 || !ci.Next.Equal(m(11)) {
		t.Fatalf("replay: %+v", ci)
	}
	// serial: replays one at a time, each after the previous run ended.
	cronRunsExist(t, p, "serial", map[time.Time]bool{m(1): true, m(2): false})
	clk.Add(time.Second)
	cronTick(t, c)
	cronRunsExist(t, p, "serial", map[time.Time]bool{m(2): false})
	if err := p.Cancel(ctx, scheduler.CronRunID("serial", m(1))); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	cronTick(t, c)
	cronRunsExist(t, p, "serial", map[time.Time]bool{m(2): true, m(3): false, m(10): false})
	if ci := cronGet(t, c, "serial"); ci.Missed != 8 || ci.Fired != 3 || !ci.Next.Equal(m(11)) {
		t.Fatalf("serial: %+v", ci)
	}
}

func TestCronPauseResume(t *testing.T) {
	t.Parallel()
	t0 := cronBase()
	ts, c, p, clk := cronSetup(t, t0, scheduler.CronConfig{})
	ctx := context.Background()
	cronRegister(t, c, scheduler.CronDef{Name: "pr", Schedule: scheduler.Interval(10 * time.Second), Overlap: true})
	cronTick(t, c)
	if err := c.Pause(ctx, "pr"); err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(ctx, "pr"); err != nil {
		t.Fatalf("pause twice: %v", err)
	}
	if ci := cronGet(t, c, "pr"); ci.Enabled || !ci.Next.IsZero() {
		t.Fatalf("paused: %+v", ci)
	}
	for i := 0; i < 6; i++ {
		clk.Add(10 * time.Second)
		if st := cronTick(t, c); st.Fired != 0 {
			t.Fatalf("paused cron fired: %+v", st)
		}
	}
	if err := c.Resume(ctx, "pr"); err != nil {
		t.Fatal(err)
	}
	if ci := cronGet(t, c, "pr"); !ci.Enabled || !ci.Next.Equal(t0.Add(70*time.Second)) {
		t.Fatalf("resumed: %+v, want next %s", ci, t0.Add(70*time.Second))
	}
	if st := cronTick(t, c); st.Fired != 0 {
		t.Fatalf("resume replayed: %+v", st)
	}
	clk.Add(10 * time.Second)
	if st := cronTick(t, c); st.Fired != 1 {
		t.Fatalf("after resume: %+v", st)
	}
	cronRunsExist(t, p, "pr", map[time.Time]bool{t0: true, t0.Add(10 * time.Second): false, t0.Add(60 * time.Second): false, t0.Add(70 * time.Second): true})

	if err := c.Resume(ctx, "nope"); !errors.Is(err, scheduler.ErrCronNotFound) || !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("resume unknown: %v", err)
	}
	if err := c.Delete(ctx, "pr"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "pr"); !errors.Is(err, scheduler.ErrCronNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	clk.Add(10 * time.Second)
	if st := cronTick(t, c); st.Fired != 0 {
		t.Fatalf("deleted cron fired: %+v", st)
	}
	if n := cronIndexEntries(t, ts); n != 0 {
		t.Fatalf("%d index entries left after delete", n)
	}
}

func TestCronCodeDefinedRedeploy(t *testing.T) {
	t.Parallel()
	ts := cronServer(t)
	ctx := context.Background()
	t0 := cronBase()
	clk := newCronClock(t0)
	call := cronFn.With(cronArgs{N: 7})
	deploy := func(defs []scheduler.CronDef) *scheduler.Crons {
		t.Helper()
		c, err := scheduler.NewCrons(ctx, ts.JS, scheduler.CronConfig{Now: clk.Now, Crons: defs})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	names := func(c *scheduler.Crons) map[string]*scheduler.CronInfo {
		t.Helper()
		list, err := c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*scheduler.CronInfo{}
		for _, ci := range list {
			out[ci.Name] = ci
		}
		return out
	}

	c1 := deploy([]scheduler.CronDef{
		{Name: "a", Schedule: scheduler.Daily(9, 0), Call: call},
		{Name: "b", Schedule: scheduler.Interval(time.Hour), Call: call},
		{Name: "d", Schedule: scheduler.Daily(10, 0), TZ: "Europe/London", Call: call},
	})
	cronRegister(t, c1, scheduler.CronDef{Name: "r", Schedule: scheduler.Hourly(5)})
	if _, err := c1.Register(ctx, scheduler.CronDef{Name: "a", Schedule: scheduler.Hourly(1), Call: call}); !errors.Is(err, scheduler.ErrCronExists) {
		t.Fatalf("register over a code cron: %v", err)
	}
	if err := c1.Pause(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	got := names(c1)
	if len(got) != 4 || got["a"].Origin != scheduler.OriginCode || got["r"].Origin != scheduler.OriginRuntime ||
		got["d"].Schedule.TZ != "Europe/London" || got["a"].Schedule.Kind != "daily" {
		t.Fatalf("first deploy: %v", got)
	}

	// Redeploy: a changes schedule, b is gone, c is new, d changes while paused.
	clk.Add(time.Hour)
	c2 := deploy([]scheduler.CronDef{
		{Name: "a", Schedule: scheduler.Interval(5 * time.Second), Call: call, Overlap: true},
		{Name: "c", Schedule: scheduler.Cron("*/5 * * * *"), Call: call},
		{Name: "d", Schedule: scheduler.Daily(11, 0), TZ: "Europe/London", Call: call},
	})
	got = names(c2)
	if _, ok := got["b"]; ok || len(got) != 4 {
		t.Fatalf("b not removed: %v", got)
	}
	if a := got["a"]; a.Schedule != scheduler.Interval(5*time.Second) || !a.Next.Equal(clk.Now()) || !a.Enabled {
		t.Fatalf("a after redeploy: %+v", a)
	}
	if d := got["d"]; d.Enabled || d.Schedule.Hour != 11 {
		t.Fatalf("d after redeploy: %+v", d)
	}
	if got["c"] == nil || got["r"] == nil {
		t.Fatalf("c or r missing: %v", got)
	}
	// The changed schedule takes effect: a fires now and every 5 s.
	st := cronTick(t, c2)
	if st.Fired != 1 {
		t.Fatalf("tick after redeploy: %+v", st)
	}
	clk.Add(5 * time.Second)
	cronTick(t, c2)
	if a := cronGet(t, c2, "a"); a.Fired != 2 {
		t.Fatalf("a: %+v", a)
	}

	// A deploy with no code crons removes them; nil leaves them alone.
	deploy(nil)
	if got := names(c2); len(got) != 4 {
		t.Fatalf("nil code set changed crons: %v", got)
	}
	deploy([]scheduler.CronDef{})
	if got := names(c2); len(got) != 1 || got["r"] == nil {
		t.Fatalf("empty code set: %v", got)
	}

	_, err := scheduler.NewCrons(ctx, ts.JS, scheduler.CronConfig{Crons: []scheduler.CronDef{
		{Name: "x", Schedule: scheduler.Hourly(1), Call: call}, {Name: "x", Schedule: scheduler.Hourly(2), Call: call},
	}})
	if !errors.Is(err, scheduler.ErrCronExists) {
		t.Fatalf("name defined twice: %v", err)
	}
}

func TestCronSecondsExpressionFires(t *testing.T) {
	t.Parallel()
	t0 := cronBase().Add(500 * time.Millisecond)
	_, c, p, clk := cronSetup(t, t0, scheduler.CronConfig{})
	ci := cronRegister(t, c, scheduler.CronDef{Name: "sec", Schedule: scheduler.Cron("*/2 * * * * *"), Overlap: true})
	first := t0.Truncate(time.Second).Add(2 * time.Second)
	if !ci.Next.Equal(first) {
		t.Fatalf("next %s, want %s", ci.Next, first)
	}
	for i := 0; i < 3; i++ {
		clk.Set(first.Add(time.Duration(2*i) * time.Second))
		if st := cronTick(t, c); st.Fired != 1 {
			t.Fatalf("tick %d: %+v", i, st)
		}
	}
	cronRunsExist(t, p, "sec", map[time.Time]bool{first: true, first.Add(time.Second): false, first.Add(2 * time.Second): true, first.Add(4 * time.Second): true})
}

func TestCronTimeZoneAcrossDST(t *testing.T) {
	t.Parallel()
	fri := time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC)
	_, c, p, clk := cronSetup(t, fri, scheduler.CronConfig{})
	ci := cronRegister(t, c, scheduler.CronDef{Name: "ny", Schedule: scheduler.Cron("0 9 * * 1-5"), TZ: "America/New_York", Overlap: true})
	want := []time.Time{
		time.Date(2026, 3, 6, 14, 0, 0, 0, time.UTC), // Fri 09:00 EST
		time.Date(2026, 3, 9, 13, 0, 0, 0, time.UTC), // Mon 09:00 EDT
		time.Date(2026, 3, 10, 13, 0, 0, 0, time.UTC),
	}
	if !ci.Next.Equal(want[0]) || ci.Schedule.String() != "cron 0 9 * * 1-5 (America/New_York)" {
		t.Fatalf("registered: %+v", ci)
	}
	for _, at := range want {
		clk.Set(at.Add(time.Millisecond))
		if st := cronTick(t, c); st.Fired != 1 {
			t.Fatalf("at %s: %+v", at, st)
		}
	}
	cronRunsExist(t, p, "ny", map[time.Time]bool{want[0]: true, want[1]: true, want[2]: true, time.Date(2026, 3, 9, 14, 0, 0, 0, time.UTC): false})
}

func TestCronPageOverflow(t *testing.T) {
	t.Parallel()
	_, c, _, _ := cronSetup(t, cronBase(), scheduler.CronConfig{PageSize: 3})
	for i := 0; i < 10; i++ {
		cronRegister(t, c, scheduler.CronDef{Name: fmt.Sprintf("p%d", i), Schedule: scheduler.Interval(time.Hour)})
	}
	st := cronTick(t, c)
	if st.Fired != 10 || st.Due != 10 || st.Pages != 4 {
		t.Fatalf("one cronTick with 10 due and pages of 3: %+v, want 10 fired in 4 pages", st)
	}
}

func TestCronManyRegisteredFewDue(t *testing.T) {
	t.Parallel()
	t0 := time.Now().UTC().Truncate(24 * time.Hour).Add(12 * time.Hour)
	ts, c, p, clk := cronSetup(t, t0, scheduler.CronConfig{})
	ctx := context.Background()
	defs := make([]scheduler.CronDef, 2000)
	for i := range defs {
		defs[i] = scheduler.CronDef{Name: fmt.Sprintf("later-%d", i), Schedule: scheduler.Daily(0, i%60), Call: cronFn.With(cronArgs{N: i})}
	}
	if err := c.RegisterBatch(ctx, defs); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		cronRegister(t, c, scheduler.CronDef{Name: fmt.Sprintf("now-%d", i), Schedule: scheduler.Interval(time.Hour), Overlap: true})
	}
	if st := cronTick(t, c); st.Fired != 10 || st.Due != 10 {
		t.Fatalf("first tick: %+v", st)
	}
	clk.Add(time.Second)
	if st := cronTick(t, c); st.Due != 0 {
		t.Fatalf("second tick: %+v", st)
	}
	clk.Add(time.Hour - time.Second)
	if st := cronTick(t, c); st.Fired != 10 || st.Due != 10 {
		t.Fatalf("an hour later: %+v", st)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 2010 {
		t.Fatalf("list: %d crons, %v", len(list), err)
	}
	// The index holds one entry per cron: fired entries are removed.
	if n := cronIndexEntries(t, ts); n != 2010 {
		t.Fatalf("%d index entries for 2010 crons", n)
	}
	cronRunsExist(t, p, "later-0", map[time.Time]bool{t0: false})
}

func TestCronValidation(t *testing.T) {
	t.Parallel()
	_, c, _, _ := cronSetup(t, cronBase(), scheduler.CronConfig{MinInterval: 2 * time.Second})
	ctx := context.Background()
	call := cronFn.With(cronArgs{})
	cases := []struct {
		def  scheduler.CronDef
		want []error
	}{
		{scheduler.CronDef{Name: "bad name", Schedule: scheduler.Hourly(0), Call: call}, []error{scheduler.ErrInvalidCron}},
		{scheduler.CronDef{Name: "", Schedule: scheduler.Hourly(0), Call: call}, []error{scheduler.ErrInvalidCron}},
		{scheduler.CronDef{Name: "h", Schedule: scheduler.Hourly(60), Call: call}, []error{scheduler.ErrInvalidCron, scheduler.ErrInvalidSchedule}},
		{scheduler.CronDef{Name: "e", Schedule: scheduler.Cron("61 * * * *"), Call: call}, []error{scheduler.ErrInvalidCron, scheduler.ErrInvalidSchedule}},
		{scheduler.CronDef{Name: "s", Schedule: scheduler.Cron("* * * * * *"), Call: call}, []error{scheduler.ErrInvalidCron, scheduler.ErrIntervalTooShort}},
		{scheduler.CronDef{Name: "i", Schedule: scheduler.Interval(time.Second), Call: call}, []error{scheduler.ErrIntervalTooShort}},
		{scheduler.CronDef{Name: "f", Schedule: scheduler.Interval(2500 * time.Millisecond), Call: call}, []error{scheduler.ErrInvalidSchedule}},
		{scheduler.CronDef{Name: "z", Schedule: scheduler.Daily(9, 0), TZ: "Mars/Olympus", Call: call}, []error{scheduler.ErrUnknownZone}},
		{scheduler.CronDef{Name: "n", Schedule: scheduler.Cron("0 0 30 2 *"), Call: call}, []error{scheduler.ErrNoFireTime}},
		{scheduler.CronDef{Name: "y", Schedule: scheduler.Cron("0 0 * * * 2026"), Call: call}, []error{scheduler.ErrInvalidSchedule}},
		{scheduler.CronDef{Name: "fn", Schedule: scheduler.Hourly(0), Call: jetflow.RawCall("bad fn", nil)}, []error{scheduler.ErrInvalidCron, jetflow.ErrInvalidName}},
		{scheduler.CronDef{Name: "cu", Schedule: scheduler.Hourly(0), Call: call, CatchUp: -1}, []error{scheduler.ErrInvalidCron}},
		// args no run record can hold (the embedded server takes 8 MB)
		{scheduler.CronDef{Name: "big", Schedule: scheduler.Hourly(0), Call: jetflow.RawCall(cronFn.Name(), []byte(`"`+strings.Repeat("a", 9<<20)+`"`))},
			[]error{scheduler.ErrInvalidCron, jetflow.ErrBadArgs}},
	}
	for _, tc := range cases {
		_, err := c.Register(ctx, tc.def)
		for _, w := range tc.want {
			if !errors.Is(err, w) {
				t.Errorf("%s: error %v, want %v", tc.def.Name, err, w)
			}
		}
	}
	cronRegister(t, c, scheduler.CronDef{Name: "ok", Schedule: scheduler.Interval(2 * time.Second), Call: call})
	if _, err := c.Register(ctx, scheduler.CronDef{Name: "ok", Schedule: scheduler.Hourly(0), Call: call}); !errors.Is(err, scheduler.ErrCronExists) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := c.Get(ctx, "missing"); !errors.Is(err, scheduler.ErrCronNotFound) || !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
}

func TestCronRunIDs(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"a-b_c-", "x", "with-dash-123", "-1", string(cronBytes('z', 128))} {
		at := time.Unix(1_790_000_000, 0).UTC()
		id := scheduler.CronRunID(n, at)
		if err := jetflow.ValidateRunID(id); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		gotName, gotAt, ok := scheduler.ParseCronRunID(id)
		if !ok || gotName != n || !gotAt.Equal(at) {
			t.Fatalf("parse %s: %q %s %v", id, gotName, gotAt, ok)
		}
	}
	if _, _, ok := scheduler.ParseCronRunID("order-123"); ok {
		t.Fatal("parsed a non-cron id")
	}
}

func cronBytes(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

func TestCronPreviewMatchesEvaluator(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC)
	s := scheduler.Cron("30 1 * * *").In("America/New_York")
	got, err := scheduler.Preview(s, from, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Fall back on 2026-11-01: 01:30 fires once, at its first occurrence (EDT).
	want := []time.Time{
		time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC),
		time.Date(2026, 11, 2, 6, 30, 0, 0, time.UTC),
		time.Date(2026, 11, 3, 6, 30, 0, 0, time.UTC),
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Fatalf("preview %v, want %v", got, want)
		}
	}
	iv, _ := scheduler.Preview(scheduler.Interval(time.Hour), from.Add(1500*time.Millisecond), 2)
	if !iv[0].Equal(from.Add(time.Second)) || !iv[1].Equal(from.Add(time.Hour+time.Second)) {
		t.Fatalf("interval preview %v", iv)
	}
	// The evaluator's first fire is the preview's.
	_, c, _, _ := cronSetup(t, from, scheduler.CronConfig{})
	ci := cronRegister(t, c, scheduler.CronDef{Name: "nyc", Schedule: s})
	if !ci.Next.Equal(want[0]) {
		t.Fatalf("registered next %s, preview %s", ci.Next, want[0])
	}
}

// cronExecutions counts handler runs per run id.
type cronExecutions struct {
	mu  sync.Mutex
	ids map[string]int
}

func (e *cronExecutions) add(id string) {
	e.mu.Lock()
	e.ids[id]++
	e.mu.Unlock()
}

// times returns the fire times executed for cron name, sorted, and fails
// on any run executed more than once.
func (e *cronExecutions) times(t *testing.T, name string) []time.Time {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []time.Time
	for id, n := range e.ids {
		cn, at, ok := scheduler.ParseCronRunID(id)
		if !ok || cn != name {
			continue
		}
		if n != 1 {
			t.Errorf("run %s executed %d times", id, n)
		}
		out = append(out, at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// cronCovered waits until every fire time of cron name from its first run up
// to cut has executed, and fails if one executed twice or is missing. It
// returns those times.
func cronCovered(t *testing.T, ex *cronExecutions, name string, step time.Duration, cut time.Time) []time.Time {
	t.Helper()
	var upTo []time.Time
	testserver.Eventually(t, 30*time.Second, "every fire of "+name+" up to "+cut.Format(time.TimeOnly), func() bool {
		upTo = upTo[:0]
		for _, at := range ex.times(t, name) {
			if !at.After(cut) {
				upTo = append(upTo, at)
			}
		}
		return len(upTo) > 0 && len(upTo) == int(cut.Sub(upTo[0])/step)+1
	})
	for i := 1; i < len(upTo); i++ {
		if d := upTo[i].Sub(upTo[i-1]); d != step {
			t.Errorf("%s: fires %s and %s are %s apart, want %s", name,
				upTo[i-1].Format(time.TimeOnly), upTo[i].Format(time.TimeOnly), d, step)
		}
	}
	return upTo
}

type cronReplica struct {
	s     *scheduler.Scheduler
	c     *scheduler.Crons
	stop  context.CancelFunc
	loops <-chan struct{}
}

func startCronReplica(t *testing.T, ts *testserver.Env, defs []scheduler.CronDef, hook func(context.Context, string, time.Time)) *cronReplica {
	t.Helper()
	ctx := context.Background()
	_, js := ts.Connect()
	s, err := scheduler.New(ctx, js, scheduler.Config{
		LeaseTTL: time.Second, RepairInterval: 500 * time.Millisecond, RepairGrace: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.ConfigureCrons(scheduler.CronConfig{Crons: defs})
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		scheduler.SetAfterFire(c, hook)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	r := &cronReplica{s: s, c: c, stop: cancel, loops: scheduler.RunCronsWhileLeader(lctx, s)}
	t.Cleanup(func() { r.halt(t) })
	return r
}

func (r *cronReplica) halt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.s.Stop(ctx); err != nil {
		t.Errorf("stop scheduler: %v", err)
	}
	r.stop()
	<-r.loops
}

func startCronCounter(t *testing.T, ts *testserver.Env) *cronExecutions {
	t.Helper()
	ex := &cronExecutions{ids: map[string]int{}}
	ctx := context.Background()
	_, js := ts.Connect()
	w, err := worker.New(ctx, js, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, cronFn, func(ctx context.Context, j *worker.Job[cronArgs]) error {
		ex.add(j.ID())
		return nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return ex
}

func cronLeader(rs []*cronReplica) *cronReplica {
	for _, r := range rs {
		if r.s.IsLeader() {
			return r
		}
	}
	return nil
}

func TestCronThreeSchedulersOneRunPerTime(t *testing.T) {
	t.Parallel()
	ts := cronServer(t)
	ex := startCronCounter(t, ts)
	defs := []scheduler.CronDef{
		{Name: "every-second", Schedule: scheduler.Interval(time.Second), Call: cronFn.With(cronArgs{N: 1}), Overlap: true},
		{Name: "even-seconds", Schedule: scheduler.Cron("*/2 * * * * *"), Call: cronFn.With(cronArgs{N: 2}), Overlap: true},
	}
	rs := []*cronReplica{startCronReplica(t, ts, defs, nil), startCronReplica(t, ts, defs, nil), startCronReplica(t, ts, defs, nil)}
	testserver.Eventually(t, 20*time.Second, "4 fires", func() bool { return len(ex.times(t, "every-second")) >= 4 })

	// The leader goes away; another takes over and carries on.
	var first *cronReplica
	testserver.Eventually(t, 10*time.Second, "a leader", func() bool { first = cronLeader(rs); return first != nil })
	first.halt(t)
	n := len(ex.times(t, "every-second"))
	testserver.Eventually(t, 20*time.Second, "4 more fires after takeover", func() bool {
		return len(ex.times(t, "every-second")) >= n+4 && cronLeader(rs) != nil
	})
	// Every time up to a moment ago ran exactly once, across the takeover.
	cut := time.Now().Add(-2 * time.Second)
	cronCovered(t, ex, "every-second", time.Second, cut)
	if got := cronCovered(t, ex, "even-seconds", 2*time.Second, cut); len(got) < 2 {
		t.Fatalf("6-field cron fired %d times", len(got))
	}
}

func TestCronLeaderStoppedMidTick(t *testing.T) {
	t.Parallel()
	ts := cronServer(t)
	ex := startCronCounter(t, ts)
	defs := []scheduler.CronDef{{Name: "tock", Schedule: scheduler.Interval(time.Second), Call: cronFn.With(cronArgs{}), Overlap: true}}
	blocked := make(chan time.Time, 1)
	var once sync.Once
	a := startCronReplica(t, ts, defs, func(ctx context.Context, name string, at time.Time) {
		once.Do(func() {
			blocked <- at
			<-ctx.Done() // killed after the run exists, before the cron advanced
		})
	})
	var at time.Time
	select {
	case at = <-blocked:
	case <-time.After(20 * time.Second):
		t.Fatal("the first fire never happened")
	}
	b := startCronReplica(t, ts, defs, nil)
	a.halt(t)
	testserver.Eventually(t, 20*time.Second, "b fires after taking over", func() bool {
		times := ex.times(t, "tock")
		return b.s.IsLeader() && len(times) >= 4
	})
	times := cronCovered(t, ex, "tock", time.Second, time.Now().Add(-2*time.Second))
	if !times[0].Equal(at) {
		t.Fatalf("first run at %s, want the interrupted fire %s", times[0], at)
	}
}

// A leader that takes over after a failover finds several times of a cron
// overdue but within Grace: it fires each of them, one after the other
// (each waits for the previous run, fired late too, to end), instead of
// skipping them as "previous run still active". None overlaps another.
func TestCronCatchUpAfterFailoverLosesNoTick(t *testing.T) {
	t.Parallel()
	t0 := time.Now().UTC().Truncate(time.Second).Add(-time.Hour) // past: its runs start at once
	ts, c, p, clk := cronSetup(t, t0, scheduler.CronConfig{})
	ex := startCronCounter(t, ts)
	cronRegister(t, c, scheduler.CronDef{Name: "every-second", Schedule: scheduler.Interval(time.Second), Call: cronFn.With(cronArgs{})})
	if st := cronTick(t, c); st.Fired != 1 {
		t.Fatalf("first tick: %+v, want 1 fired", st)
	}
	// The leader is gone for 5 s; the new one ticks once.
	clk.Add(5 * time.Second)
	if st := cronTick(t, c); st.Fired != 5 || st.Skipped != 0 || st.Missed != 0 {
		t.Fatalf("catch-up tick: %+v, want the 5 overdue times fired, none skipped", st)
	}
	ctx := context.Background()
	for i := range 6 {
		id := scheduler.CronRunID("every-second", t0.Add(time.Duration(i)*time.Second))
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		r, err := p.Wait(wctx, id)
		cancel()
		if err != nil || r.State != jetflow.Success {
			t.Fatalf("run %d (%s): %+v %v, want success", i, id, r, err)
		}
	}
	if got := ex.times(t, "every-second"); len(got) != 6 {
		t.Fatalf("executed times %v, want the 6 from %s", got, t0)
	}
}
