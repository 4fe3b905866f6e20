package pool

import (
	"fmt"
	"log/slog"
	"testing"
	"time"
)

// The turns of the dispatcher's per-key queues, without a server: the
// order in which pick hands out starts.

func testDispatcher(cfg Config) *dispatcher {
	cfg.Name = "t"
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg = cfg.withDefaults()
	now := time.Unix(1e9, 0)
	cfg.Now = func() time.Time { return now }
	pl := &Pool{cfg: cfg, name: cfg.Name, core: core{now: cfg.Now, log: cfg.Logger}}
	return newDispatcher(pl)
}

var seq uint64

// ready adds n ready items of key to d and admits them.
func (d *dispatcher) testReady(t testing.TB, key string, n int, st *poolState) {
	t.Helper()
	for i := range n {
		seq++
		e := &entry{id: fmt.Sprintf("%s-%d-%d", key, seq, i), seq: seq, q: queued{Attempt: 1, Key: key, Ready: 1}, rank: int64(seq)}
		d.index[e.id] = e
		d.arrive(e)
	}
	d.admit(st, st.runningByKey())
}

// startAll picks k starts and returns their keys, as if each had started
// and finished at once.
func (d *dispatcher) picks(st *poolState, k int) []string {
	var keys []string
	for range k {
		picked, _ := d.pick(st, st.runningByKey(), 1, 1)
		if len(picked) == 0 {
			break
		}
		e := picked[0]
		delete(d.index, e.id)
		keys = append(keys, e.q.Key)
	}
	return keys
}

func newState() *poolState { return &poolState{Max: 10, Running: map[string]slot{}} }

// A key with a long queue, served all along, and a key that arrives with
// 30 items: the newcomer takes its turn and KeyBurst (10) more starts, then
// the two alternate.
func TestTurnsBurstThenAlternate(t *testing.T) {
	d := testDispatcher(Config{})
	st := newState()
	d.testReady(t, "A", 1000, st)
	if got := d.picks(st, 50); len(got) != 50 || got[0] != "A" || got[49] != "A" {
		t.Fatalf("A alone: %v", got)
	}
	d.testReady(t, "B", 30, st)
	got := d.picks(st, 30)
	want := []string{}
	for range 11 {
		want = append(want, "B")
	}
	for range 10 {
		want = append(want, "A", "B")
	}
	want = want[:30]
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("turns %v\nwant  %v", got, want)
	}
}

// Without the burst credit (KeyBurst < 0) the keys alternate at once; with
// weights 3:1 the heavier key gets three starts per one.
func TestTurnsWeights(t *testing.T) {
	d := testDispatcher(Config{KeyBurst: -1, KeyWeight: func(k string) int {
		if k == "H" {
			return 3
		}
		return 1
	}})
	st := newState()
	d.testReady(t, "H", 100, st)
	d.testReady(t, "L", 100, st)
	got := d.picks(st, 40)
	// Both keys have 100 items waiting: every one of the 40 starts asked
	// for is handed out, 30 of H and 10 of L.
	if len(got) != 40 {
		t.Fatalf("%d starts, want 40: %v", len(got), got)
	}
	h := 0
	for i, k := range got {
		if k == "H" {
			h++
		}
		if (i+1)%4 == 0 && h != 3*(i+1)/4 {
			t.Fatalf("after %d starts H has %d: %v", i+1, h, got)
		}
	}
	if h != 30 {
		t.Fatalf("H has %d of 40 starts, want 30: %v", h, got)
	}
}

// A key at its limit steps aside (its items wait, the others go on) and
// comes back when a slot of its own is released.
func TestTurnsKeyLimit(t *testing.T) {
	d := testDispatcher(Config{})
	st := newState()
	st.KeyLimit = 1
	d.testReady(t, "A", 5, st)
	d.testReady(t, "B", 5, st)
	picked, _ := d.pick(st, st.runningByKey(), 5, 1)
	if len(picked) != 2 || picked[0].q.Key == picked[1].q.Key {
		t.Fatalf("picked %d: want one of each key", len(picked))
	}
	for _, e := range picked {
		st.Running[e.id] = slot{Attempt: 1, Key: e.q.Key}
		delete(d.index, e.id)
	}
	if again, _ := d.pick(st, st.runningByKey(), 5, 1); len(again) != 0 {
		t.Fatalf("picked %d while both keys are at their limit", len(again))
	}
	for id, s := range st.Running {
		if s.Key == "B" {
			delete(st.Running, id)
		}
	}
	d.unblock(st, st.runningByKey())
	picked, _ = d.pick(st, st.runningByKey(), 5, 1)
	if len(picked) != 1 || picked[0].q.Key != "B" {
		t.Fatalf("after B's release: %d picked", len(picked))
	}
}

// The cost of a start does not grow with the number of keys waiting.
func BenchmarkPick(b *testing.B) {
	for _, keys := range []int{10, 1000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			d := testDispatcher(Config{})
			st := newState()
			per := max(b.N/keys+1, 2)
			for k := range keys {
				d.testReady(b, fmt.Sprintf("k%d", k), per, st)
			}
			b.ResetTimer()
			for range b.N {
				picked, _ := d.pick(st, map[string]int{}, 1, 1)
				if len(picked) == 0 {
					b.Fatal("nothing to pick")
				}
				delete(d.index, picked[0].id)
			}
		})
	}
}
