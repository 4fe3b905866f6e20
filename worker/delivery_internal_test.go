package worker

import (
	"testing"

	"github.com/jetflow-dev/jetflow"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name  string
		f     deliveryFacts
		want  deliveryKind
		read  bool
		claim bool
	}{
		{"first delivery of a new run", deliveryFacts{numDelivered: 1, isNew: true, attempt: 1}, fresh, false, false},
		{"first delivery naming its record", deliveryFacts{numDelivered: 1, rev: 7, attempt: 1}, fresh, false, false},
		{"a retry naming its record", deliveryFacts{numDelivered: 1, rev: 9, attempt: 2}, fresh, false, false},
		{"another producer's message", deliveryFacts{numDelivered: 1, attempt: 1}, incomplete, true, false},
		{"a new run's retry without a record", deliveryFacts{numDelivered: 1, isNew: true, attempt: 2}, incomplete, true, false},
		{"record has more than the message", deliveryFacts{numDelivered: 1, rev: 7, reload: true}, incomplete, true, false},
		{"redelivery", deliveryFacts{numDelivered: 2, isNew: true, attempt: 1}, redelivered, true, true},
		{"possible replay", deliveryFacts{numDelivered: 1, isNew: true, attempt: 1, replay: true}, replayed, true, true},
		{"held here long", deliveryFacts{numDelivered: 1, isNew: true, attempt: 1, held: true}, waited, true, true},
		{"received across a stall", deliveryFacts{numDelivered: 1, rev: 3, held: true}, waited, true, true},
		{"redelivery held long", deliveryFacts{numDelivered: 3, held: true}, redelivered, true, true},
	}
	for _, c := range cases {
		k := classify(c.f)
		if k != c.want || k.readsRecord() != c.read || k.claimsFirst() != c.claim {
			t.Errorf("%s: %v (reads %v, claims first %v), want %v (%v, %v)", c.name, k, k.readsRecord(), k.claimsFirst(), c.want, c.read, c.claim)
		}
	}
}

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
