package workflow

import (
	"testing"
)

func TestMayResume(t *testing.T) {
	t.Parallel()
	// parked: an execution cached by segment 4's park, which wrote
	// revision 10 of a generation-1 cursor; next: segment 5 taking over
	// that cursor.
	parked := stickyCheck{cached: true, parkedRev: 10, parkedGen: 1, parkedSeg: 4, rev: 10, gen: 1, seg: 5}
	with := func(f func(c *stickyCheck)) stickyCheck {
		c := parked
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		c    stickyCheck
		want stickyVerdict
	}{
		{"the next segment, the cursor where the park left it", parked, resumeCached},
		{"nothing cached: another worker, a restart, an eviction, the cache off", with(func(c *stickyCheck) { c.cached = false }), replayNothingCached},
		{"the cursor written since (a segment elsewhere)", with(func(c *stickyCheck) { c.rev = 12 }), replayCursorMoved},
		{"a cursor older than the park (a replica behind)", with(func(c *stickyCheck) { c.rev = 9 }), replayCursorMoved},
		{"another run (continued as new)", with(func(c *stickyCheck) { c.gen = 2 }), replayOtherRun},
		{"the parked segment again (a duplicate made by a resume that found the next one ended)", with(func(c *stickyCheck) { c.seg = 4 }), resumeCached},
		{"a segment before the parked one", with(func(c *stickyCheck) { c.seg = 3 }), replayNotNext},
		{"a segment further on", with(func(c *stickyCheck) { c.seg = 6 }), replayNotNext},
	} {
		if got := mayResume(tc.c); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestExecCacheEvictsTheLeastRecentlyParked(t *testing.T) {
	t.Parallel()
	x := func(wf string, rev uint64) *execution {
		e := newExecution(true)
		e.wf, e.rev = wf, rev
		return e
	}
	c := newExecCache(2)
	a, b, cc := x("a", 1), x("b", 1), x("c", 1)
	if out := c.put(a); len(out) != 0 {
		t.Fatalf("put a: dropped %d", len(out))
	}
	if out := c.put(b); len(out) != 0 {
		t.Fatalf("put b: dropped %d", len(out))
	}
	if out := c.put(cc); len(out) != 1 || out[0] != a {
		t.Fatalf("put c: dropped %v, want a", out)
	}
	// A later park of b replaces it.
	b2 := x("b", 5)
	if out := c.put(b2); len(out) != 1 || out[0] != b {
		t.Fatalf("put b again: dropped %v, want the older b", out)
	}
	// remove forgets only the execution it is given.
	c.remove(b)
	if c.len() != 2 {
		t.Fatal("remove of an execution no longer kept removed another")
	}
	if got := c.take("a"); got != nil {
		t.Fatal("a was evicted, still taken")
	}
	if got := c.take("b"); got != b2 {
		t.Fatal("take b: not the latest")
	}
	if got := c.take("b"); got != nil {
		t.Fatal("take b twice")
	}
	if out := c.close(); len(out) != 1 || out[0] != cc {
		t.Fatalf("close: %v, want c", out)
	}
	if out := c.put(x("d", 1)); len(out) != 1 || c.len() != 0 {
		t.Fatal("a closed cache kept an execution")
	}
	off := newExecCache(0)
	if out := off.put(x("e", 1)); off.on() || len(out) != 1 || off.len() != 0 {
		t.Fatal("a cache of size 0 kept an execution")
	}
}

func TestCachedExecutionsDefault(t *testing.T) {
	t.Parallel()
	for in, want := range map[int]int{0: DefaultCachedExecutions, -1: 0, 1: 1, 10: 10} {
		if got := (RegisterOptions{CachedExecutions: in}).cachedExecutions(); got != want {
			t.Errorf("CachedExecutions %d: %d, want %d", in, got, want)
		}
	}
}

// An await reads the events of its name after the last one an await took
// (the floor), and from below a claim its own step made without
// journaling it (its segment stopped between the two).
func TestReadFloor(t *testing.T) {
	t.Parallel()
	done := func(step, name string, kind StepKind, seq uint64) *Entry {
		return &Entry{Step: step, Name: name, Kind: kind, State: StepDone, Waits: &Waits{Event: name, Seq: seq}}
	}
	s := &segment{
		steps: map[string]*Entry{
			"1":   done("1", "tick", KindEvent, 4),
			"2.1": done("2.1", "tick", KindEvent, 9),
			"3":   done("3", "add", KindUpdate, 12),
			"4":   {Step: "4", Name: "tick", Kind: KindEvent, State: StepFailed, Waits: &Waits{Event: "tick"}},
		},
		claims: map[uint64]string{4: "1", 7: "2.2", 9: "2.1", 12: "3", 13: "-"},
	}
	for _, tc := range []struct {
		kind     StepKind
		name, id string
		want     uint64
	}{
		{KindEvent, "tick", "5", 9},   // after the last taken
		{KindEvent, "tick", "2.2", 6}, // its own claim of 7, not journaled
		{KindUpdate, "add", "5", 12},  // updates apart
		{KindEvent, "add", "5", 0},    // no event "add" taken
		{KindEvent, "other", "5", 0},  // none of that name
		{KindSleep, "sleep", "5", 0},  // not an await of events
	} {
		if got := s.readFloor(tc.kind, tc.name, tc.id); got != tc.want {
			t.Errorf("%s %q for step %s: %d, want %d", tc.kind, tc.name, tc.id, got, tc.want)
		}
	}
	// Kept up as the segment goes on.
	s.addClaim(15, "6")
	s.keepStored(done("6", "tick", KindEvent, 15))
	if got := s.readFloor(KindEvent, "tick", "7"); got != 15 {
		t.Errorf("after step 6 took 15: %d, want 15", got)
	}
}
