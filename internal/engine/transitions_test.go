package engine

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
)

var allStates = []jetflow.State{None, jetflow.Pending, jetflow.InProgress, jetflow.Success, jetflow.Failed, jetflow.Canceled}

// record is a record in state st with every field a transition may keep or
// change set, so that a constructor that forgets one is seen.
func record(st jetflow.State, now time.Time) *jetflow.Run {
	r := &jetflow.Run{ID: "r1", Name: "fn", Kind: jetflow.Retryable, Args: json.RawMessage(`{"a":1}`), State: st,
		ScheduledTime: now.Add(-time.Hour), CreationTime: now.Add(-time.Hour), MaxAttempts: 5, Parent: "p1",
		Children: []string{"old-child"}, History: []jetflow.Attempt{{Attempt: 1, Outcome: "failed", Error: "boom"}},
		Trace: map[string]string{"traceparent": "x"}, Pool: "pool", Revision: 7}
	if st == jetflow.InProgress {
		r.Owner, r.Attempts, r.StartedTime, r.Heartbeat = "w-old", 2, now.Add(-time.Minute), now.Add(-30*time.Second)
	}
	if st == jetflow.Pending {
		r.Attempts, r.HeldBy = 1, "p1"
	}
	if st.Terminal() {
		r.Attempts, r.CompletedTime, r.Error = 2, now.Add(-time.Second), "ended"
	}
	return r
}

func deepCopy(r *jetflow.Run) *jetflow.Run {
	c := *r
	c.History, c.Children = slices.Clone(r.History), slices.Clone(r.Children)
	return &c
}

// Each named transition, from every state: it builds the state its step
// leads to, the engine allows it from exactly the states the step lists
// (never from an ended record), it leaves the record it was given as it
// was (no shared History or Children either), and it sets what its
// writers rely on.
func TestTransitionsFromEveryState(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	work := Work{Owner: "w1", Attempt: 3, Started: now.Add(-time.Second), Progress: &jetflow.Progress{Percent: 50}, Children: []string{"r1-3-1"}}
	due := now.Add(time.Minute)
	cases := []struct {
		name  string
		step  Step
		build func(r *jetflow.Run) *jetflow.Run
		check func(cur, next *jetflow.Run) string
	}{
		{"claim", Claim, func(r *jetflow.Run) *jetflow.Run { return ClaimRun(r, work, now) }, func(cur, n *jetflow.Run) string {
			if n.Owner != "w1" || n.Attempts != 3 || !n.StartedTime.Equal(work.Started) || !n.Heartbeat.Equal(now) || n.Children[0] != "r1-3-1" {
				return "not the attempt's claim"
			}
			return ""
		}},
		{"beat", Beat, func(r *jetflow.Run) *jetflow.Run { return BeatRun(r, work, now) }, func(cur, n *jetflow.Run) string {
			if n.Owner != "w1" || !n.Heartbeat.Equal(now) || n.Progress.Percent != 50 || cur.State == jetflow.InProgress && !n.StartedTime.Equal(cur.StartedTime) {
				return "not the attempt's heartbeat (the start kept)"
			}
			return ""
		}},
		{"succeed", Succeed, func(r *jetflow.Run) *jetflow.Run { return SucceedRun(r, work, json.RawMessage(`42`), now) }, func(cur, n *jetflow.Run) string {
			last := n.History[len(n.History)-1]
			if string(n.Result) != "42" || n.Error != "" || n.HeldBy != "" || !n.CompletedTime.Equal(now) || n.Attempts != 3 ||
				last.Outcome != "success" || last.Worker != "w1" || len(n.History) != len(cur.History)+1 {
				return "not the attempt's success, in the history"
			}
			return ""
		}},
		{"fail", Fail, func(r *jetflow.Run) *jetflow.Run { return FailRun(r, work, "bad", true, now) }, func(cur, n *jetflow.Run) string {
			last := n.History[len(n.History)-1]
			if n.Error != "bad" || !n.Permanent || !n.CompletedTime.Equal(now) || last.Outcome != "failed" || last.Error != "bad" || last.Attempt != 3 {
				return "not the attempt's failure, in the history"
			}
			return ""
		}},
		{"retry", Retry, func(r *jetflow.Run) *jetflow.Run { return RetryRun(r, work, "again", due, now) }, func(cur, n *jetflow.Run) string {
			last := n.History[len(n.History)-1]
			if !n.ScheduledTime.Equal(due) || n.Error != "again" || !n.StartedTime.IsZero() || n.Children != nil || n.Attempts != 3 ||
				last.Outcome != "failed" || !n.CompletedTime.Equal(cur.CompletedTime) {
				return "not due again, unstarted, with the failed attempt in the history"
			}
			return ""
		}},
		{"unclaim", Retry, func(r *jetflow.Run) *jetflow.Run { return UnclaimRun(r, 3) }, func(cur, n *jetflow.Run) string {
			if n.Attempts != 2 || n.Owner != "" || !n.StartedTime.IsZero() || !n.Heartbeat.IsZero() || len(n.History) != len(cur.History) {
				return "not as before the claim"
			}
			return ""
		}},
		{"lose", Lost, func(r *jetflow.Run) *jetflow.Run { return LoseRun(r, now) }, func(cur, n *jetflow.Run) string {
			last := n.History[len(n.History)-1]
			if n.Error != jetflow.ErrWorkerLost.Error() || last.Outcome != "lost" || last.Worker != cur.Owner || last.Attempt != cur.Attempts {
				return "not lost with its lost attempt in the history"
			}
			return ""
		}},
		{"lose the last attempt", Lost, func(r *jetflow.Run) *jetflow.Run { return LoseLastAttempt(r, now) }, func(cur, n *jetflow.Run) string {
			if !strings.Contains(n.Error, "no attempts left") || n.History[len(n.History)-1].Outcome != "lost" {
				return "not lost with no attempts left"
			}
			return ""
		}},
		{"cancel", Cancel, func(r *jetflow.Run) *jetflow.Run { return CancelRun(r, now) }, func(cur, n *jetflow.Run) string {
			if n.Error != jetflow.ErrCanceled.Error() || !n.CompletedTime.Equal(now) {
				return "not canceled"
			}
			return ""
		}},
		{"orphan", Orphan, func(r *jetflow.Run) *jetflow.Run { return OrphanRun(r, now) }, func(cur, n *jetflow.Run) string {
			if n.Error != OrphanError || !n.CompletedTime.Equal(now) {
				return "not an orphan"
			}
			return ""
		}},
		{"release", Release, ReleaseRun, func(cur, n *jetflow.Run) string {
			if n.HeldBy != "" || n.State != cur.State {
				return "still held"
			}
			return ""
		}},
		{"hold", Schedule, HoldRun, func(cur, n *jetflow.Run) string {
			if n.HeldBy != cur.Parent {
				return "not held for its parent"
			}
			return ""
		}},
		{"dead letter", DeadLetter, func(r *jetflow.Run) *jetflow.Run { return DeadLetterRun(r, "bad message", now) }, func(cur, n *jetflow.Run) string {
			if !n.Permanent || n.Error != "bad message" || !n.CompletedTime.Equal(now) {
				return "not a permanent failure"
			}
			return ""
		}},
		{"start a record", Claim, func(r *jetflow.Run) *jetflow.Run { return StartRecord(r, "seg-1", now, nil) }, func(cur, n *jetflow.Run) string {
			if !slices.Contains(n.Children, "seg-1") || n.Attempts < 1 || n.StartedTime.IsZero() || !n.Heartbeat.Equal(now) {
				return "not started with its segment"
			}
			return ""
		}},
		{"end a record", Succeed, func(r *jetflow.Run) *jetflow.Run {
			return EndRecord(r, jetflow.Success, json.RawMessage(`1`), "", 1, now, now)
		}, func(cur, n *jetflow.Run) string {
			if string(n.Result) != "1" || n.Error != "" || n.Permanent || n.Attempts < 1 || !n.CompletedTime.Equal(now) || n.StartedTime.IsZero() {
				return "not ended with its result"
			}
			return ""
		}},
		{"fail a record", Fail, func(r *jetflow.Run) *jetflow.Run {
			return EndRecord(r, jetflow.Failed, nil, "broken", 0, time.Time{}, now)
		}, func(cur, n *jetflow.Run) string {
			if n.Error != "broken" || !n.Permanent || n.Attempts != cur.Attempts || !n.StartedTime.Equal(cur.StartedTime) {
				return "not failed for good, attempts and start as they were"
			}
			return ""
		}},
	}
	for _, c := range cases {
		legal := 0
		for _, from := range allStates {
			cur := record(from, now)
			before := deepCopy(cur)
			next := c.build(cur)
			if !reflect.DeepEqual(cur, before) {
				t.Errorf("%s from %q: the current record was changed", c.name, from)
			}
			if next.State != rules[c.step].to {
				t.Errorf("%s from %q: state %q, step %s leads to %q", c.name, from, next.State, c.step, rules[c.step].to)
			}
			err := Check(c.step, from, next.State)
			if (err == nil) != slices.Contains(rules[c.step].from, from) || from.Terminal() && err == nil {
				t.Errorf("%s from %q: Check says %v", c.name, from, err)
			}
			if err != nil {
				continue
			}
			legal++
			if why := c.check(cur, next); why != "" {
				t.Errorf("%s from %q: %s: %+v", c.name, from, why, next)
			}
			if next.ID != cur.ID || next.Name != cur.Name || string(next.Args) != string(cur.Args) || next.MaxAttempts != cur.MaxAttempts || next.Revision != cur.Revision {
				t.Errorf("%s from %q: the run's identity changed: %+v", c.name, from, next)
			}
			if len(next.History) > 0 && len(cur.History) > 0 && &next.History[0] == &cur.History[0] ||
				len(next.Children) > 0 && len(cur.Children) > 0 && &next.Children[0] == &cur.Children[0] {
				t.Errorf("%s from %q: shares History or Children with the current record", c.name, from)
			}
		}
		if legal == 0 {
			t.Errorf("%s: allowed from no state", c.name)
		}
	}
}

// A first attempt's success keeps no history (one write of the hot path
// less); TakeOverRun writes nothing by itself but the lost attempt, and
// the one history entry of a lost attempt is the same whoever writes it.
func TestTransitionDetails(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	first := &jetflow.Run{ID: "r1", State: jetflow.Pending}
	if n := SucceedRun(first, Work{Owner: "w1", Attempt: 1, Started: now}, nil, now); len(n.History) != 0 || !n.StartedTime.Equal(now) {
		t.Errorf("first attempt's success: %+v", n)
	}
	running := record(jetflow.InProgress, now)
	taken := TakeOverRun(running, now)
	if taken.State != jetflow.InProgress || taken.Owner != running.Owner || !reflect.DeepEqual(taken.History[len(taken.History)-1], LostAttempt(running, now)) {
		t.Errorf("take over: %+v", taken)
	}
	if !reflect.DeepEqual(LoseRun(running, now).History, taken.History) {
		t.Error("a lost attempt's history differs between a takeover and a loss")
	}
	long := strings.Repeat("é", MaxHistoryError)
	n := FailRun(running, Work{Attempt: 2}, long, false, now)
	if n.Error != long || len(n.History[len(n.History)-1].Error) > MaxHistoryError+len("…") {
		t.Errorf("a long error: the record keeps %d bytes, the history %d", len(n.Error), len(n.History[len(n.History)-1].Error))
	}
	if AddChild(record(jetflow.Pending, now), "c", now) != nil || AddChild(StartRecord(first, "c", now, nil), "c", now) != nil {
		t.Error("AddChild wrote a record not running, or a child listed already")
	}
	if NextAttempt(&jetflow.Run{Children: []string{"a-2"}, Attempts: 2}, "a-2", 2, "x") != nil {
		t.Error("NextAttempt wrote an attempt listed and counted")
	}
	if n := NextAttempt(&jetflow.Run{State: jetflow.InProgress, Children: []string{"a-1"}, Attempts: 0}, "a-2", 1, "boom"); n == nil ||
		n.Attempts != 1 || n.Error != "boom" || !slices.Equal(n.Children, []string{"a-1", "a-2"}) {
		t.Errorf("NextAttempt: %+v", n)
	}
}
