package pool

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"
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

// Figures (no assertion on time): the cost of a start after 1k and after
// 100k distinct keys have each had one item start, and what the dispatcher
// keeps of them; and the size of the state record, rewritten at every
// start, with a per-key rate whose window holds that many keys.
func TestManyKeysCost(t *testing.T) {
	if testing.Short() {
		t.Skip("figures")
	}
	for _, n := range []int{1000, 100_000} {
		d := testDispatcher(Config{})
		st := newState()
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		start := time.Now()
		for i := range n {
			d.testReady(t, fmt.Sprintf("tenant-%d", i), 1, st)
			if got := d.picks(st, 1); len(got) != 1 {
				t.Fatalf("key %d: nothing picked", i)
			}
		}
		per := time.Since(start) / time.Duration(n)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		t.Logf("%d keys, one item each: %s per arrive+admit+pick, %d key queues kept, heap +%d KB",
			n, per, len(d.keys), (int64(ms.HeapAlloc)-int64(before))/1024)
		if len(d.keys) != 0 {
			t.Errorf("%d key queues kept after every key's item started", len(d.keys))
		}
	}
	for _, n := range []int{1000, 20_000} {
		st := newState()
		st.KeyRate = RateLimit{N: 1, Per: time.Minute}
		for i := range n {
			st.recordKeyStart(fmt.Sprintf("tenant-%d", i), int64(1e18)+int64(i))
		}
		data, _ := json.Marshal(st)
		t.Logf("per-key rate, %d keys started within its window: state record of %d KB, rewritten at every start", n, len(data)/1024)
	}
}
