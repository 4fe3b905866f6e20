package srvclock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/srvclock"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/nats-io/nats.go/jetstream"
)

// The age of a message, by the time the server stored it, is measured
// right whatever the local clock says: 30 s ahead, 30 s behind, or a fake
// clock pinned as the server's. Before a probe there is no measure.
func TestAgeOfAStoredMessageIgnoresTheLocalClock(t *testing.T) {
	env := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "AGE", Subjects: []string{"age.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.Publish(ctx, "age.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "age.1")
	if err != nil {
		t.Fatal(err)
	}
	stored := m.Time
	fake := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	clocks := map[string]*srvclock.Clock{
		"in step":     srvclock.New(nil),
		"30 s ahead":  srvclock.New(func() time.Time { return time.Now().Add(30 * time.Second) }),
		"30 s behind": srvclock.New(func() time.Time { return time.Now().Add(-30 * time.Second) }),
		"pinned fake": srvclock.NewPinned(func() time.Time { return fake }),
	}
	const wait = 300 * time.Millisecond
	time.Sleep(wait)
	for name, c := range clocks {
		if _, ok := c.Age(stored); ok {
			t.Errorf("%s: an age before any probe", name)
		}
		if err := c.Probe(ctx, env.NC, "$JS.API.", "AGE", 3); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		age, ok := c.Age(stored)
		// At least the wait (less a probe's half round trip), and far from
		// any 30 s skew.
		if !ok || age < wait-50*time.Millisecond || age > 10*time.Second {
			t.Errorf("%s: age %v (measured %v), want about %v or a little more", name, age, ok, wait)
		}
	}
	if off := clocks["pinned fake"].Offset(); off != 0 {
		t.Errorf("pinned clock: offset %v, want 0", off)
	}
	if off := clocks["30 s ahead"].Offset(); off < 29*time.Second || off > 31*time.Second {
		t.Errorf("30 s ahead: offset %v", off)
	}
}

// A followed clock tells the server's time from a local clock 30 s ahead
// (a producer's due times, a scheduler's), and a small offset, within a
// probe's own error, is taken as none.
func TestFollowTellsTheServersTime(t *testing.T) {
	env := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "FOLLOW", Subjects: []string{"follow.>"}}); err != nil {
		t.Fatal(err)
	}
	ahead := srvclock.Follow(ctx, func() time.Time { return time.Now().Add(30 * time.Second) }, env.NC, "$JS.API.", "FOLLOW", time.Hour)
	if d := time.Until(ahead()); d.Abs() > 5*time.Second {
		t.Errorf("a clock 30 s ahead, followed: %v off the server's", d)
	}
	little := srvclock.Follow(ctx, func() time.Time { return time.Now().Add(20 * time.Millisecond) }, env.NC, "$JS.API.", "FOLLOW", time.Hour)
	if d := time.Until(little()); d < 15*time.Millisecond || d > time.Second {
		t.Errorf("a clock 20 ms ahead, followed: %v off, want its own 20 ms (under srvclock.Noise)", d)
	}
}
