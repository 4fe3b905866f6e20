package jetflowtest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
)

// RequireOpts narrows what RequireEnqueued and RequireNotEnqueued match
// beyond the function and its arguments. Zero fields match anything.
type RequireOpts struct {
	// State is the run's state now.
	State jetflow.State
	// ScheduledAt is when the run is due (to the millisecond).
	ScheduledAt time.Time
	// MaxAttempts is the run's own attempt limit (producer.WithMaxAttempts).
	MaxAttempts int
	// Parent is the run that scheduled it.
	Parent string
}

// RequireEnqueued asserts that exactly one run of fn with args (compared as
// JSON values) was scheduled, in any state unless opts say which, and
// returns it. It fails the test otherwise, listing the runs of fn it found.
func RequireEnqueued[A any](t testing.TB, e *Env, fn jetflow.Function[A], args A, opts ...RequireOpts) *jetflow.Run {
	t.Helper()
	match, all := e.matching(t, fn.With(args), opts)
	if len(match) != 1 {
		t.Fatalf("jetflowtest: want 1 run of %s with args %s%s, found %d; runs of %s: %s",
			fn.Name(), argsText(t, fn.With(args)), optsText(opts), len(match), fn.Name(), describeAll(all))
	}
	return match[0]
}

// RequireNotEnqueued asserts that no run of fn with args (compared as JSON
// values, and narrowed by opts) was scheduled.
func RequireNotEnqueued[A any](t testing.TB, e *Env, fn jetflow.Function[A], args A, opts ...RequireOpts) {
	t.Helper()
	match, _ := e.matching(t, fn.With(args), opts)
	if len(match) > 0 {
		t.Fatalf("jetflowtest: want no run of %s with args %s%s, found %s",
			fn.Name(), argsText(t, fn.With(args)), optsText(opts), describeAll(match))
	}
}

// matching returns the runs of c's function with c's args that opts
// accept, and every run of the function.
func (e *Env) matching(t testing.TB, c jetflow.Call, opts []RequireOpts) (match, all []*jetflow.Run) {
	t.Helper()
	want, err := c.Encode()
	if err != nil {
		t.Fatalf("jetflowtest: args of %s: %v", c.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.Timeout)
	defer cancel()
	all, err = e.list(ctx, producer.Filter{Function: c.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.Name == c.Name && sameJSON(r.Args, want) && accepts(opts, r) {
			match = append(match, r)
		}
	}
	return match, all
}

func accepts(opts []RequireOpts, r *jetflow.Run) bool {
	for _, o := range opts {
		switch {
		case o.State != "" && r.State != o.State,
			!o.ScheduledAt.IsZero() && !r.ScheduledTime.Truncate(time.Millisecond).Equal(o.ScheduledAt.Truncate(time.Millisecond)),
			o.MaxAttempts != 0 && r.MaxAttempts != o.MaxAttempts,
			o.Parent != "" && r.Parent != o.Parent:
			return false
		}
	}
	return true
}

// sameJSON compares two JSON texts as values (key order and spacing aside).
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(x, y)
}

func argsText(t testing.TB, c jetflow.Call) string {
	b, err := c.Encode()
	if err != nil {
		t.Fatalf("jetflowtest: args of %s: %v", c.Name, err)
	}
	return string(b)
}

func optsText(opts []RequireOpts) string {
	var parts []string
	for _, o := range opts {
		if o.State != "" {
			parts = append(parts, "state "+string(o.State))
		}
		if !o.ScheduledAt.IsZero() {
			parts = append(parts, "scheduled at "+o.ScheduledAt.UTC().Format(time.RFC3339Nano))
		}
		if o.MaxAttempts != 0 {
			parts = append(parts, fmt.Sprintf("max attempts %d", o.MaxAttempts))
		}
		if o.Parent != "" {
			parts = append(parts, "parent "+o.Parent)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func describeAll(runs []*jetflow.Run) string {
	if len(runs) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(runs))
	for i, r := range runs {
		if i == 20 {
			parts = append(parts, fmt.Sprintf("and %d more", len(runs)-20))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s args %s scheduled %s", r.ID, r.State, r.Args, r.ScheduledTime.UTC().Format(time.RFC3339Nano)))
	}
	return strings.Join(parts, "; ")
}
