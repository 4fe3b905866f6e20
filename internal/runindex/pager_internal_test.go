package runindex

import (
	"fmt"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/nats-io/nats.go/jetstream"
)

func TestIndexShows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                       string
		rev, lastIndexed, revBelow uint64
		want                       bool
	}{
		{"indexed, no cursor in the tail", 5, 10, 0, true},
		{"after the index's end as read: the tail shows it", 11, 10, 0, false},
		{"the index's last entry", 10, 10, 0, true},
		{"below a tail cursor", 5, 10, 6, true},
		{"at a tail cursor: shown on the page before", 6, 10, 6, false},
		{"above a tail cursor", 8, 10, 6, false},
	} {
		if got := indexShows(tc.rev, tc.lastIndexed, tc.revBelow); got != tc.want {
			t.Errorf("%s: indexShows = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		q     Query
		state jetflow.State
		fn    string
		want  bool
	}{
		{Query{}, jetflow.Failed, "a", true},
		{Query{State: jetflow.Failed}, jetflow.Failed, "a", true},
		{Query{State: jetflow.Failed}, jetflow.Success, "a", false},
		{Query{Function: "a"}, jetflow.Success, "a", true},
		{Query{Function: "a"}, jetflow.Success, "b", false},
		{Query{State: jetflow.Failed, Function: "a"}, jetflow.Failed, "a", true},
		{Query{State: jetflow.Failed, Function: "a"}, jetflow.Failed, "b", false},
		{Query{State: jetflow.Failed, Function: "a"}, jetflow.Pending, "a", false},
	} {
		p := &pager{q: tc.q}
		if got := p.match(tc.state, tc.fn); got != tc.want {
			t.Errorf("%+v: match(%s, %s) = %v, want %v", tc.q, tc.state, tc.fn, got, tc.want)
		}
	}
}

func TestCaughtUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		index  bool
		before pos
		want   bool
	}{
		{"tail cursor, index past it", true, pos{class: classTail, seq: 5}, true},
		{"tail cursor, index not past it", true, pos{class: classTail, seq: 10}, false},
		{"no index", false, pos{class: classTail, seq: 5}, false},
		{"index cursor", true, pos{class: classIndex, seq: 5}, false},
		{"queued cursor", true, pos{class: classQueued, seq: 5}, false},
	} {
		p := &pager{lastIndexed: 10}
		if tc.index {
			p.idx = fakeStream{}
		}
		if got := p.caughtUp(tc.before); got != tc.want {
			t.Errorf("%s: caughtUp = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// fakeStream stands for an index stream that nothing reads.
type fakeStream struct{ jetstream.Stream }

func TestNextSpan(t *testing.T) {
	for _, c := range []struct {
		w, scanned, found, need, want uint64
	}{
		{w: 70, scanned: 70, found: 0, need: 51, want: 280},               // nothing found: four times
		{w: 70, scanned: 70, found: 35, need: 20, want: 50},               // half the sequences hold a message: 40, a quarter more
		{w: 70, scanned: 70, found: 70, need: 1, want: 16},                // at least 16
		{w: 20, scanned: 20, found: 1, need: 50, want: 80},                // at most four times the last
		{w: maxSpan, scanned: 1 << 20, found: 1, need: 50, want: maxSpan}, // at most maxSpan
		{w: maxSpan, scanned: maxSpan, found: 0, need: 50, want: maxSpan},
	} {
		if got := nextSpan(c.w, c.scanned, c.found, c.need); got != c.want {
			t.Errorf("nextSpan(%d, %d, %d, %d) = %d, want %d", c.w, c.scanned, c.found, c.need, got, c.want)
		}
	}
}

func TestBatchFits(t *testing.T) {
	full := batch{subject: "a"}
	for range maxBatch {
		full.runs = append(full.runs, "r")
	}
	for _, c := range []struct {
		name    string
		b       batch
		subject string
		max     int
		want    bool
	}{
		{"empty: any subject", batch{}, "b", 100, true},
		{"same subject, room", batch{subject: "a", runs: []string{"r1"}, bytes: 50}, "a", 200, true},
		{"another subject", batch{subject: "a", runs: []string{"r1"}, bytes: 50}, "b", 200, false},
		{"bytes over max", batch{subject: "a", runs: []string{"r1"}, bytes: 160}, "a", 200, false},
		{"maxBatch entries", full, "a", 1 << 20, false},
	} {
		if got := c.b.fits(c.subject, "r2", c.max); got != c.want {
			t.Errorf("%s: fits = %v, want %v", c.name, got, c.want)
		}
	}
}

// The staged entries become messages in revision order; a run's entry
// replaced by a later write of it staged with it is dropped, and the
// entries that were apart only because of it share a message.
func TestStagedBatches(t *testing.T) {
	type w struct {
		subject, id string
		rev         uint64
	}
	for _, c := range []struct {
		name   string
		writes []w
		max    int
		want   string // messages: subject[run@rev ...]
	}{
		{"nothing staged", nil, 1 << 10, "[]"},
		{"one subject", []w{{"s", "a", 1}, {"s", "b", 2}}, 1 << 10, "[s[a@1 b@2]]"},
		{"subjects alternate: a message each", []w{{"i", "a", 1}, {"s", "b", 2}, {"i", "c", 3}}, 1 << 10,
			"[i[a@1] s[b@2] i[c@3]]"},
		{"claims replaced by outcomes: the outcomes share a message", []w{
			{"i", "a", 1}, {"i", "b", 2}, {"s", "a", 3}, {"i", "c", 4}, {"s", "b", 5}, {"s", "c", 6}}, 1 << 10,
			"[s[a@3 b@5 c@6]]"},
		{"a claim not ended yet stays, in its place", []w{
			{"i", "a", 1}, {"s", "z", 2}, {"i", "b", 3}, {"s", "a", 4}}, 1 << 10,
			"[s[z@2] i[b@3] s[a@4]]"},
		{"bytes over max split a message", []w{{"s", "a", 1}, {"s", "b", 2}, {"s", "c", 3}}, 2 * entryBytes("a"),
			"[s[a@1 b@2] s[c@3]]"},
	} {
		var s staged
		for _, x := range c.writes {
			s.add(x.subject, x.id, x.rev)
		}
		var got []string
		for _, b := range s.batches(c.max) {
			var es []string
			for i := range b.runs {
				es = append(es, b.runs[i]+"@"+b.revs[i])
			}
			got = append(got, b.subject+fmt.Sprint(es))
		}
		if g := fmt.Sprint(got); g != c.want {
			t.Errorf("%s: %s, want %s", c.name, g, c.want)
		}
		s.reset()
		if len(s.batches(c.max)) != 0 || len(s.at) != 0 || s.full() {
			t.Errorf("%s: entries left after reset", c.name)
		}
	}
	var s staged
	for i := range window {
		if s.full() {
			t.Fatalf("full after %d writes, window %d", i, window)
		}
		s.add("s", fmt.Sprint(i), uint64(i+1))
	}
	if !s.full() {
		t.Fatalf("not full after %d writes", window)
	}
	bs := s.batches(1 << 30)
	if want := (window + maxBatch - 1) / maxBatch; len(bs) != want {
		t.Fatalf("%d writes of one subject: %d messages, want %d of at most %d entries", window, len(bs), want, maxBatch)
	}
	for _, b := range bs {
		if len(b.runs) > maxBatch {
			t.Fatalf("a message of %d entries, max %d", len(b.runs), maxBatch)
		}
	}
}
