package scheduler_test

import (
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/scheduler"
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
