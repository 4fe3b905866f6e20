package worker

import (
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
)

func TestDecideOnRecord(t *testing.T) {
	rec := func(st jetflow.State, attempts int, owner string) *jetflow.Run {
		return &jetflow.Run{State: st, Attempts: attempts, Owner: owner}
	}
	cases := []struct {
		name      string
		r         *jetflow.Run
		attempt   int
		amo, lost bool
		max       int
		want      recordVerdict
	}{
		{"ended", rec(jetflow.Success, 1, ""), 1, false, false, 5, ackOver},
		{"canceled pending run", rec(jetflow.Canceled, 0, ""), 1, false, false, 5, ackOver},
		{"pending, first attempt", rec(jetflow.Pending, 0, ""), 1, false, false, 5, runFromRecord},
		{"pending, a retry's message", rec(jetflow.Pending, 1, ""), 2, false, false, 5, runFromRecord},
		{"pending, an older attempt's message", rec(jetflow.Pending, 2, ""), 1, false, false, 5, ackOver},
		{"pending, the attempt that ran", rec(jetflow.Pending, 2, ""), 2, false, false, 5, ackOver},
		{"claimed by a live worker", rec(jetflow.InProgress, 1, "w1"), 1, false, false, 5, lookLater},
		{"at-most-once, worker lost", rec(jetflow.InProgress, 1, "w1"), 1, true, true, 1, failLost},
		{"at-most-once in progress without owner", rec(jetflow.InProgress, 1, ""), 1, true, false, 1, failLost},
		{"retryable, worker lost", rec(jetflow.InProgress, 1, "w1"), 1, false, true, 5, takeOver},
		{"retryable, worker lost, none left", rec(jetflow.InProgress, 5, "w1"), 5, false, true, 5, failNoneLeft},
		{"in progress by itself (a workflow's), newer message", rec(jetflow.InProgress, 1, ""), 2, false, false, 5, runFromRecord},
	}
	for _, c := range cases {
		if got := decideOnRecord(c.r, c.attempt, c.amo, c.lost, c.max); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestMayHaveWaited(t *testing.T) {
	const ackWait = 30 * time.Second
	cases := []struct {
		name             string
		age              time.Duration
		measured, stalls bool
		want             bool
	}{
		{"fresh", 50 * time.Millisecond, true, false, false},
		{"just under half of AckWait", 14 * time.Second, true, false, false},
		{"half of AckWait", 15 * time.Second, true, false, true},
		{"stored long ago (a backlog, a replay)", 10 * time.Minute, true, false, true},
		{"no probe answered yet", 0, false, false, true},
		{"fresh, after a stall of the process", 50 * time.Millisecond, true, true, true},
	}
	for _, c := range cases {
		if got := mayHaveWaited(c.age, c.measured, c.stalls, ackWait); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
