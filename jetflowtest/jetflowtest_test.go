package jetflowtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/jetflowtest"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
)

type noteArgs struct {
	Text string `json:"text"`
}

var (
	note     = jetflow.Define[noteArgs]("test.note")
	followUp = jetflow.Define[noteArgs]("test.followUp")
	unserved = jetflow.Define[noteArgs]("test.unserved")
)

// counter is a handler that counts its runs by args.
type counter struct {
	mu   sync.Mutex
	runs map[string][]time.Time // text -> the clock's time of each run
	env  *jetflowtest.Env
}

func (c *counter) handle(ctx context.Context, j *worker.Job[noteArgs]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string][]time.Time{}
	}
	c.runs[j.Args.Text] = append(c.runs[j.Args.Text], c.env.Now())
	return nil
}

func (c *counter) count(text string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.runs[text])
}

func (c *counter) times(text string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.runs[text]...)
}

func newEnv(t *testing.T, opts jetflowtest.Options) (*jetflowtest.Env, *counter) {
	c := &counter{}
	opts.Register = func(w *worker.Worker) error { return worker.Register(w, note, c.handle) }
	e := jetflowtest.New(t, opts)
	c.env = e
	return e, c
}

func get(t *testing.T, e *jetflowtest.Env, id string) *jetflow.Run {
	t.Helper()
	r, err := e.Producer.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A run scheduled 30 minutes out runs when the clock gets there, not
// before, and the test takes milliseconds, not minutes.
func TestRunAfterThirtyMinutes(t *testing.T) {
	t.Parallel()
	began := time.Now()
	e, c := newEnv(t, jetflowtest.Options{})
	ctx := context.Background()
	t0 := e.Now()
	id, err := e.Producer.RunAfter(ctx, 30*time.Minute, note.With(noteArgs{Text: "later"}))
	if err != nil {
		t.Fatal(err)
	}
	r := jetflowtest.RequireEnqueued(t, e, note, noteArgs{Text: "later"},
		jetflowtest.RequireOpts{State: jetflow.Pending, ScheduledAt: t0.Add(30 * time.Minute)})
	if r.ID != id {
		t.Fatalf("RequireEnqueued found %s, want %s", r.ID, id)
	}
	jetflowtest.RequireNotEnqueued(t, e, note, noteArgs{Text: "other"})

	e.Advance(29*time.Minute + 59*time.Second)
	if c.count("later") != 0 || get(t, e, id).State != jetflow.Pending {
		t.Fatalf("ran before it was due: %d runs, state %s", c.count("later"), get(t, e, id).State)
	}
	e.Advance(time.Second)
	if r := get(t, e, id); r.State != jetflow.Success || c.count("later") != 1 {
		t.Fatalf("after 30 minutes: state %s, %d runs", r.State, c.count("later"))
	}
	if got := c.times("later")[0]; !got.Equal(t0.Add(30 * time.Minute)) {
		t.Fatalf("ran at %s, want %s", got, t0.Add(30*time.Minute))
	}
	if d := time.Since(began); d > 20*time.Second {
		t.Fatalf("took %s of wall time", d)
	}
}

// Retries wait for their backoff on the fake clock: three attempts an hour
// apart pass within one Advance, each at its time.
func TestRetryBackoffPassesOnTheClock(t *testing.T) {
	t.Parallel()
	e := jetflowtest.New(t, jetflowtest.Options{})
	var attempts atomic.Int32
	var at []time.Time
	var mu sync.Mutex
	jetflowtest.Handle(e, note, func(ctx context.Context, j *worker.Job[noteArgs]) error {
		mu.Lock()
		at = append(at, e.Now())
		mu.Unlock()
		if attempts.Add(1) < 3 {
			return jetflow.RetryAfter(time.Hour, errors.New("not yet"))
		}
		return nil
	}, worker.Options{MaxAttempts: 5})
	t0 := e.Now()
	id, err := e.Producer.Enqueue(context.Background(), note.With(noteArgs{Text: "flaky"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := get(t, e, id); r.State != jetflow.Pending || r.Attempts != 1 || !r.ScheduledTime.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after the first attempt: %+v", r)
	}
	e.Advance(3 * time.Hour)
	r := get(t, e, id)
	if r.State != jetflow.Success || r.Attempts != 3 {
		t.Fatalf("after 3 hours: state %s, attempts %d", r.State, r.Attempts)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, want := range []time.Time{t0, t0.Add(time.Hour), t0.Add(2 * time.Hour)} {
		if !at[i].Equal(want) {
			t.Errorf("attempt %d at %s, want %s", i+1, at[i], want)
		}
	}
}

// A cron fires at each of its times within an Advance, each in turn.
func TestCronFiresOnTheClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 2, 8, 30, 0, 0, time.UTC) // a Monday
	e, c := newEnv(t, jetflowtest.Options{Start: start, Crons: scheduler.CronConfig{Crons: []scheduler.CronDef{
		{Name: "morning", Schedule: scheduler.Daily(9, 0), Call: note.With(noteArgs{Text: "morning"})},
	}}})
	e.Advance(29 * time.Minute)
	if n := c.count("morning"); n != 0 {
		t.Fatalf("fired %d times before 9:00", n)
	}
	e.Advance(3*24*time.Hour + time.Minute)
	got := c.times("morning")
	if len(got) != 4 {
		t.Fatalf("fired at %v, want 4 mornings", got)
	}
	for i, tm := range got {
		if want := start.Add(30*time.Minute + time.Duration(i)*24*time.Hour); !tm.Equal(want) {
			t.Errorf("fire %d at %s, want %s", i, tm, want)
		}
	}
	r := jetflowtest.RequireEnqueued(t, e, note, noteArgs{Text: "morning"},
		jetflowtest.RequireOpts{ScheduledAt: start.Add(30 * time.Minute)})
	if r.State != jetflow.Success {
		t.Fatalf("first fire: %+v", r)
	}
}

// What a run schedules within the advanced time runs too, in order.
func TestAdvanceRunsWhatRunsSchedule(t *testing.T) {
	t.Parallel()
	e := jetflowtest.New(t, jetflowtest.Options{})
	var chain []string
	var mu sync.Mutex
	record := func(s string) {
		mu.Lock()
		chain = append(chain, s)
		mu.Unlock()
	}
	t0 := e.Now()
	jetflowtest.Handle(e, note, func(ctx context.Context, j *worker.Job[noteArgs]) error {
		record(fmt.Sprintf("note %s at %s", j.Args.Text, e.Now().Sub(t0)))
		_, err := j.RunAfter(ctx, 10*time.Minute, followUp.With(noteArgs{Text: j.Args.Text}))
		return err
	})
	jetflowtest.Handle(e, followUp, func(ctx context.Context, j *worker.Job[noteArgs]) error {
		record(fmt.Sprintf("followUp %s at %s", j.Args.Text, e.Now().Sub(t0)))
		return nil
	})
	if _, err := e.Producer.RunAfter(context.Background(), 5*time.Minute, note.With(noteArgs{Text: "a"})); err != nil {
		t.Fatal(err)
	}
	e.Advance(time.Hour)
	mu.Lock()
	defer mu.Unlock()
	want := []string{"note a at 5m0s", "followUp a at 15m0s"}
	if strings.Join(chain, "; ") != strings.Join(want, "; ") {
		t.Fatalf("chain %q, want %q", chain, want)
	}
	if !e.Now().Equal(t0.Add(time.Hour)) {
		t.Fatalf("clock at %s, want %s", e.Now(), t0.Add(time.Hour))
	}
}

// Drain waits for every run due now and what they start now; a canceled
// delayed run never runs; a run of a function nobody serves stays pending
// without holding Drain up.
func TestDrainCancelAndUnserved(t *testing.T) {
	t.Parallel()
	e, c := newEnv(t, jetflowtest.Options{})
	ctx := context.Background()
	for i := range 20 {
		if _, err := e.Producer.Enqueue(ctx, note.With(noteArgs{Text: fmt.Sprint(i % 2)})); err != nil {
			t.Fatal(err)
		}
	}
	later, err := e.Producer.RunAfter(ctx, time.Minute, note.With(noteArgs{Text: "canceled"}))
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := e.Producer.Enqueue(ctx, unserved.With(noteArgs{Text: "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if c.count("0") != 10 || c.count("1") != 10 {
		t.Fatalf("after Drain: %d and %d runs, want 10 and 10", c.count("0"), c.count("1"))
	}
	if err := e.Producer.Cancel(ctx, later); err != nil {
		t.Fatal(err)
	}
	e.Advance(time.Hour)
	if c.count("canceled") != 0 || get(t, e, later).State != jetflow.Canceled {
		t.Fatalf("canceled run ran (%d) or is %s", c.count("canceled"), get(t, e, later).State)
	}
	if r := jetflowtest.RequireEnqueued(t, e, unserved, noteArgs{Text: "x"}); r.ID != orphan || r.State != jetflow.Pending {
		t.Fatalf("unserved run: %+v", r)
	}
}

// recorder is a testing.TB whose Fatalf is recorded: the helpers' own
// failures are tested with it.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func failure(t testing.TB, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg
}

func TestRequireHelpersFail(t *testing.T) {
	t.Parallel()
	e, _ := newEnv(t, jetflowtest.Options{})
	ctx := context.Background()
	if _, err := e.Producer.RunAfter(ctx, time.Hour, note.With(noteArgs{Text: "a"})); err != nil {
		t.Fatal(err)
	}
	msg := failure(t, func(tb testing.TB) { jetflowtest.RequireEnqueued(tb, e, note, noteArgs{Text: "b"}) })
	if !strings.Contains(msg, `want 1 run of test.note with args {"text":"b"}, found 0`) || !strings.Contains(msg, `args {"text":"a"}`) {
		t.Errorf("RequireEnqueued of args never scheduled: %q", msg)
	}
	msg = failure(t, func(tb testing.TB) {
		jetflowtest.RequireEnqueued(tb, e, note, noteArgs{Text: "a"}, jetflowtest.RequireOpts{State: jetflow.Success})
	})
	if !strings.Contains(msg, "(state success)") {
		t.Errorf("RequireEnqueued with a state it is not in: %q", msg)
	}
	msg = failure(t, func(tb testing.TB) { jetflowtest.RequireNotEnqueued(tb, e, note, noteArgs{Text: "a"}) })
	if !strings.Contains(msg, "want no run of test.note") {
		t.Errorf("RequireNotEnqueued of a scheduled run: %q", msg)
	}
	if msg := failure(t, func(tb testing.TB) { jetflowtest.RequireNotEnqueued(tb, e, note, noteArgs{Text: "b"}) }); msg != "" {
		t.Errorf("RequireNotEnqueued of args never scheduled failed: %q", msg)
	}
}

// Exponential backoff with jitter (the default) passes within an Advance
// as long as its delays; a paused cron does not fire.
func TestDefaultBackoffAndPausedCron(t *testing.T) {
	t.Parallel()
	e := jetflowtest.New(t, jetflowtest.Options{Crons: scheduler.CronConfig{Crons: []scheduler.CronDef{
		{Name: "every-minute", Schedule: scheduler.Interval(time.Minute), Call: followUp.With(noteArgs{Text: "tick"})},
	}}})
	var fails, ticks atomic.Int32
	jetflowtest.Handle(e, note, func(ctx context.Context, j *worker.Job[noteArgs]) error {
		if fails.Add(1) <= 4 {
			return errors.New("down")
		}
		return nil
	})
	jetflowtest.Handle(e, followUp, func(ctx context.Context, j *worker.Job[noteArgs]) error {
		ticks.Add(1)
		return nil
	})
	ctx := context.Background()
	if err := e.Crons.Pause(ctx, "every-minute"); err != nil {
		t.Fatal(err)
	}
	id, err := e.Producer.Enqueue(ctx, note.With(noteArgs{Text: "x"}))
	if err != nil {
		t.Fatal(err)
	}
	e.Advance(time.Hour) // backoff of 4 failures: at most 1+2+4+8 s
	if r := get(t, e, id); r.State != jetflow.Success || r.Attempts != 5 {
		t.Fatalf("after an hour: state %s, attempts %d", r.State, r.Attempts)
	}
	if n := ticks.Load(); n != 0 {
		t.Fatalf("paused cron fired %d times", n)
	}
	if err := e.Crons.Resume(ctx, "every-minute"); err != nil {
		t.Fatal(err)
	}
	e.Advance(10 * time.Minute)
	if n := ticks.Load(); n != 10 {
		t.Fatalf("resumed cron fired %d times in 10 minutes, want 10", n)
	}
}
