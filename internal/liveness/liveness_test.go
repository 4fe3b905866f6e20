package liveness

import (
	"testing"
	"time"
)

func TestWatch(t *testing.T) {
	var w Watch
	t0 := time.Now()
	const after = time.Minute
	steps := []struct {
		name string
		rev  uint64
		at   time.Duration
		lost bool
	}{
		{"first sight, however old the heartbeat it names", 5, 0, false},
		{"unchanged for less than after", 5, 59 * time.Second, false},
		{"unchanged for after", 5, 60 * time.Second, true},
		{"a heartbeat (new revision) resets", 6, 61 * time.Second, false},
		{"unchanged again, not yet", 6, 100 * time.Second, false},
		{"unchanged for after since the heartbeat", 6, 121 * time.Second, true},
	}
	for _, s := range steps {
		got := Lost(w.Unchanged("r1", s.rev, t0.Add(s.at)), after)
		if got != s.lost {
			t.Errorf("%s: lost = %v, want %v", s.name, got, s.lost)
		}
	}
	w.Forget("r1")
	if Lost(w.Unchanged("r1", 6, t0.Add(10*time.Minute)), after) {
		t.Error("a forgotten run is seen anew")
	}
	// A skewed wall clock changes nothing: only the checker's own
	// readings are compared.
	var v Watch
	v.Unchanged("r2", 1, t0)
	if Lost(v.Unchanged("r2", 1, t0.Add(30*time.Second)), after) {
		t.Error("30 s on the checker's clock is not a minute")
	}
}
