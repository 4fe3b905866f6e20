package srvclock

import (
	"testing"
	"time"
)

func TestEstimate(t *testing.T) {
	srv := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		t0, t1 time.Time
		want   time.Duration
	}{
		{"in step", srv.Add(-time.Millisecond), srv.Add(time.Millisecond), 0},
		{"30 s ahead", srv.Add(30*time.Second - time.Millisecond), srv.Add(30*time.Second + time.Millisecond), 30 * time.Second},
		{"30 s behind", srv.Add(-30*time.Second - 2*time.Millisecond), srv.Add(-30*time.Second + 2*time.Millisecond), -30 * time.Second},
	}
	for _, c := range cases {
		if got := Estimate(c.t0, c.t1, srv); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
