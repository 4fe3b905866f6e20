package runindex_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
)

// Seeded runs come back from Candidates as given, those not ended only,
// and a match keeps only the runs it names.
func TestCandidatesMatch(t *testing.T) {
	ix := runindex.New(nil, streams.Config{})
	due := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	subject := "$KV.jetflow_runs.run-a" // a header's id is a substring of its subject
	ix.Seed([]kv.Header{
		{ID: subject[len("$KV.jetflow_runs."):], State: jetflow.Pending, Function: "f", Due: due},
		{ID: "run-b", State: jetflow.InProgress, Function: "g"},
		{ID: "run-c", State: jetflow.Success, Function: "f"},
		{ID: "run-d", State: jetflow.Pending, Function: "f", Due: due.Add(time.Hour)},
	})
	ids := func(ls []runindex.Live) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.ID)
		}
		slices.Sort(out)
		return out
	}
	if got := ids(ix.Candidates(nil)); !slices.Equal(got, []string{"run-a", "run-b", "run-d"}) {
		t.Fatalf("candidates %v, want run-a, run-b, run-d", got)
	}
	early := ix.Candidates(func(l runindex.Live) bool { return l.State == jetflow.InProgress || l.Due.Before(due.Add(time.Minute)) })
	if got := ids(early); !slices.Equal(got, []string{"run-a", "run-b"}) {
		t.Fatalf("matched %v, want run-a, run-b", got)
	}
	for _, l := range early {
		if l.ID == "run-a" && (l.State != jetflow.Pending || l.Function != "f" || !l.Due.Equal(due) || strings.Compare(l.ID, "run-a") != 0) {
			t.Fatalf("run-a came back as %+v", l)
		}
	}
}
