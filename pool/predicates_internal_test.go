package pool

import (
	"math"
	"testing"
	"time"
)

func TestStrategyApplies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit int
		strat Strategy
		want  bool
	}{
		{0, DropNewest, false},
		{2, "", false},
		{2, Queue, false},
		{2, DropNewest, true},
		{2, CancelInProgress, true},
	} {
		st := &poolState{KeyLimit: tc.limit, KeyStrategy: tc.strat}
		if got := st.strategyApplies(); got != tc.want {
			t.Errorf("limit %d strategy %q: strategyApplies = %v, want %v", tc.limit, tc.strat, got, tc.want)
		}
	}
}

func TestKeyQStandingAndItems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		kq                 keyQ
		standing, hasItems bool
	}{
		{"idle", keyQ{hidx: -1}, false, false},
		{"in the turns", keyQ{hidx: 0}, true, false},
		{"at its limit", keyQ{hidx: -1, limited: true}, true, false},
		{"throttled", keyQ{hidx: -1, throttled: true}, true, false},
		{"ready item", keyQ{hidx: -1, ready: rankHeap{{}}}, false, true},
		{"arriving item", keyQ{hidx: -1, incoming: []*entry{{}}}, false, true},
		{"admitted item", keyQ{hidx: -1, fifo: []*entry{{}}}, false, true},
		{"debounced item", keyQ{hidx: -1, deb: &entry{}}, false, true},
	} {
		if got := tc.kq.standing(); got != tc.standing {
			t.Errorf("%s: standing = %v, want %v", tc.name, got, tc.standing)
		}
		if got := tc.kq.hasItems(); got != tc.hasItems {
			t.Errorf("%s: hasItems = %v, want %v", tc.name, got, tc.hasItems)
		}
	}
}

func TestQueuedDebounced(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		q    queued
		want bool
	}{
		{"new item with a window", queued{Attempt: 1, Deb: &debounceEntry{Window: time.Second}}, true},
		{"retry", queued{Attempt: 2, Deb: &debounceEntry{Window: time.Second}}, false},
		{"no debounce", queued{Attempt: 1}, false},
		{"zero window", queued{Attempt: 1, Deb: &debounceEntry{}}, false},
	} {
		if got := tc.q.debounced(); got != tc.want {
			t.Errorf("%s: debounced = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMulSat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b, want int64 }{
		{0, math.MaxInt64, 0},
		{3, -4, -12},
		{math.MaxInt64, 2, math.MaxInt64},
		{math.MaxInt64, -2, math.MinInt64},
		{-1, math.MinInt64, math.MaxInt64},
		{math.MinInt64, -1, math.MaxInt64},
		{math.MinInt64, 1, math.MinInt64},
		{-1, math.MaxInt64, -math.MaxInt64},
	} {
		if got := mulSat(tc.a, tc.b); got != tc.want {
			t.Errorf("mulSat(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestDebounceValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d  Debounce
		ok bool
	}{
		{Debounce{}, true},
		{Debounce{Window: time.Second}, true},
		{Debounce{Window: time.Second, MaxWait: time.Second}, true},
		{Debounce{Window: time.Second, MaxWait: time.Millisecond}, false},
		{Debounce{Window: time.Second, MaxWait: -1}, false},
		{Debounce{Window: time.Microsecond}, false},
		{Debounce{MaxWait: time.Second}, false},
	} {
		if err := tc.d.validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: validate = %v, want ok %v", tc.d, err, tc.ok)
		}
	}
}

func TestNameByte(t *testing.T) {
	t.Parallel()
	for c := 0; c < 256; c++ {
		b := byte(c)
		want := b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_'
		if got := nameByte(b); got != want {
			t.Errorf("nameByte(%q) = %v, want %v", b, got, want)
		}
	}
}
