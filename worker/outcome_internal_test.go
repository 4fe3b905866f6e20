package worker

import (
	"errors"
	"testing"
	"time"
)

func TestDeliveredFromAckSubjects(t *testing.T) {
	for _, c := range []struct {
		reply string
		n     uint64
		ok    bool
	}{
		{"$JS.ACK.JETFLOW_FN.jetflow_demo_hello.3.42.40.1764115200000000000.0", 3, true},
		{"$JS.ACK.hub.ACCHASH.JETFLOW_FN.jetflow_demo_hello.1.42.40.1764115200000000000.7.rnd", 1, true},
		{"$JS.ACK.hub.ACCHASH.JETFLOW_FN.jetflow_demo_hello.12.42.40.1764115200000000000.7", 12, true},
		{"_INBOX.abc", 0, false},
		{"$JS.ACK.S.C.x.42.40.1.0", 0, false},
		{"", 0, false},
	} {
		n, ok := deliveredFrom(c.reply)
		if n != c.n || ok != c.ok {
			t.Errorf("deliveredFrom(%q) = %d, %v; want %d, %v", c.reply, n, ok, c.n, c.ok)
		}
	}
}

// A worker claims late on a cluster only where the server counts a
// consumer leader change's redeliveries (nats-server 2.12 on).
func TestDeliversAfterQuorum(t *testing.T) {
	for v, want := range map[string]bool{
		"2.15.2": true, "2.12.0": true, "2.12.0-RC.1": true, "3.0.0": true, "2.13.1-beta": true,
		"2.11.9": false, "2.10.22": false, "2.9.0": false, "": false, "2": false, "x.y.z": false, "2.x.0": false,
	} {
		if got := deliversAfterQuorum(v); got != want {
			t.Errorf("deliversAfterQuorum(%q) = %v, want %v", v, got, want)
		}
	}
}

// A redelivered unclaimed run on a cluster waits for a claim in its second
// delivery, and for outcomes written again after the runs bucket's leader
// changed, whatever its delivery count.
func TestHoldBack(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ca, grace := 100*time.Millisecond, 5*time.Second
	settle := outcomeTimeout + grace + replaySlack // 21 s
	for _, c := range []struct {
		name  string
		n     uint64
		since time.Time
		err   error
		want  time.Duration
	}{
		{"second delivery, leader long in place", 2, now.Add(-time.Hour), nil, ca + grace},
		{"third delivery, leader long in place", 3, now.Add(-time.Hour), nil, 0},
		{"second delivery, leader new", 2, now.Add(-time.Second), nil, settle - time.Second},
		{"fourth delivery, leader new", 4, now.Add(-10 * time.Second), nil, settle - 10*time.Second},
		{"third delivery, just settled", 3, now.Add(-settle), nil, 0},
		{"third delivery, no leader", 3, time.Time{}, errors.New("no leader"), time.Second},
		{"second delivery, no leader", 2, time.Time{}, errors.New("no leader"), ca + grace},
		{"third delivery, since unknown", 3, time.Time{}, nil, 0},
	} {
		if got := holdBack(c.n, ca, grace, c.since, c.err, now); got != c.want {
			t.Errorf("%s: holdBack = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestStalled: a consumer is looked at once when a busy spell of
// deliveries stops, never during a trickle, while runs still move, or
// while every runner is busy; a look held back (the once-a-second bound)
// stays due.
func TestStalled(t *testing.T) {
	type look struct {
		n    uint64
		busy bool
		want bool
		held bool // the caller does not look now (throttled)
	}
	cases := []struct {
		name  string
		looks []look
	}{
		{"a busy spell that stops is looked at once", []look{{100, false, false, false}, {200, false, false, false}, {200, false, true, false}, {200, false, false, false}}},
		{"a trickle is never looked at", []look{{3, false, false, false}, {6, false, false, false}, {6, false, false, false}, {9, false, false, false}, {9, false, false, false}}},
		{"slowing down to a trickle, then stopping", []look{{100, false, false, false}, {103, false, false, false}, {103, false, true, false}}},
		{"every runner busy is no stall", []look{{100, false, false, false}, {100, true, false, false}, {100, true, false, false}, {100, false, true, false}}},
		{"a second spell is looked at again", []look{{100, false, false, false}, {100, false, true, false}, {200, false, false, false}, {200, false, true, false}}},
		{"a look held back stays due", []look{{100, false, false, false}, {100, false, true, true}, {100, false, true, true}, {100, false, true, false}, {100, false, false, false}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var last uint64
			active := false
			for i, l := range tc.looks {
				got := stalled(l.n, last, 16, l.busy, active, &active)
				if got != l.want {
					t.Fatalf("look %d (%d dispatches, busy %v): stalled %v, want %v", i, l.n, l.busy, got, l.want)
				}
				if got && !l.held {
					active = false
				}
				last = l.n
			}
		})
	}
}
