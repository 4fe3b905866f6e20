package pool

import (
	"fmt"
	"testing"
)

// A flood of new keys, one item each, arriving one per start, does not
// starve a key served all along: a newcomer may go first, but the
// newcomers together take no more than their turns and their burst
// credit, and the keys that ran are forgotten.
func TestTurnsNewKeysFlood(t *testing.T) {
	d := testDispatcher(Config{})
	st := newState()
	d.testReady(t, "A", 10000, st)
	d.picks(st, 5)
	a := 0
	for i := range 200 {
		d.testReady(t, fmt.Sprintf("new-%d", i), 1, st)
		for _, k := range d.picks(st, 1) {
			if k == "A" {
				a++
			}
		}
	}
	t.Logf("A had %d of 200 starts against a flood of new keys", a)
	if a < 50 {
		t.Errorf("A had %d of 200 starts against a flood of new keys", a)
	}
	d.picks(st, 500) // the newcomers waiting start
	if n := len(d.keys); n != 1 {
		t.Errorf("%d key queues kept", n)
	}
}
