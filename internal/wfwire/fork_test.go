package wfwire

import (
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
)

func TestForkSource(t *testing.T) {
	t.Parallel()
	wf := func(held string) *jetflow.Run {
		return &jetflow.Run{ID: "new", Children: []string{SegmentID("new", 1)}, HeldBy: held}
	}
	for _, tc := range []struct {
		name string
		r    *jetflow.Run
		want string
	}{
		{"held by its Restart", wf(ForkHolder("old")), "old"},
		{"released", wf(""), ""},
		{"a workflow held otherwise", wf("parent-1"), ""},
		{"a run, not a workflow, with a holder's name", &jetflow.Run{ID: "r", HeldBy: ForkHolder("old")}, ""},
	} {
		if got := ForkSource(tc.r); got != tc.want {
			t.Errorf("%s: ForkSource = %q, want %q", tc.name, got, tc.want)
		}
	}
	// The record a Restart writes is held by it, and the first segment the
	// repair sweep rebuilds from that record knows its source.
	rec := RecordOf("def", SegArgs{WF: "new", N: 1, Forked: true, Fork: "old"})
	if got := ForkSource(rec); got != "old" {
		t.Errorf("RecordOf a fork: ForkSource = %q, want old", got)
	}
	if plain := RecordOf("def", SegArgs{WF: "new", N: 1}); plain.HeldBy != "" {
		t.Errorf("RecordOf a plain start: held by %q", plain.HeldBy)
	}
	seg := FirstSegment(rec)
	if want := `"forked":true,"fork":"old"`; !strings.Contains(string(seg.Args), want) {
		t.Errorf("first segment of a held fork: args %s, want %s", seg.Args, want)
	}
}
