package trigger

import (
	"errors"
	"testing"

	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
)

func TestSubjectsOverlap(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"_INBOX.>", "_INBOX.>", true},
		{"_INBOX.abc", "_INBOX.>", true},
		{"_INBOX.*", "_INBOX.>", true},
		{"*.*", "_INBOX.>", true},
		{"*.x.>", "_INBOX.>", true},
		{">", "jetflow.>", true},
		{"*.cancel", "jetflow.>", true},
		{"jetflow.cancel", "jetflow.>", true},
		{"a.*.c", "a.b.*", true},
		{"_INBOX", "_INBOX.>", false}, // '>' takes one token at least
		{"*", "_INBOX.>", false},
		{"jetflowx.a", "jetflow.>", false},
		{"a.b", "a.b.c", false},
		{"a.*", "b.>", false},
		{"orders.created", "orders.*", true},
		{"orders.created", "orders.canceled", false},
	}
	for _, c := range cases {
		if got := subjectsOverlap(c.a, c.b); got != c.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := subjectsOverlap(c.b, c.a); got != c.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", c.b, c.a, got, c.want)
		}
	}
}

// The reserved names and subjects follow the configured prefix, and the
// connection's inbox prefix is reserved too.
func TestReservedFollowsPrefixAndInbox(t *testing.T) {
	acme := streams.Config{Prefix: "acme"}
	for _, s := range []string{"ACME_FN", "ACME_RUNIDX", "KV_acme_runs", "KV_acme_delayed", "KV_acme_leases",
		"KV_acme_functions", "KV_acme_crons", "KV_acme_journal", "KV_acme_pools"} {
		d := kv.TriggerDef{Name: "t", Function: "f", Stream: s}
		if err := ValidateFor(&d, acme); !errors.Is(err, ErrInvalid) {
			t.Errorf("prefix acme, stream %s: %v, want ErrInvalid", s, err)
		}
	}
	for _, s := range []string{"KV_jetflow_runs", "JETFLOW_FN", "KV_acmeruns", "KV_orders"} {
		d := kv.TriggerDef{Name: "t", Function: "f", Stream: s}
		if err := ValidateFor(&d, acme); err != nil {
			t.Errorf("prefix acme, stream %s (not acme's): %v", s, err)
		}
	}
	d := kv.TriggerDef{Name: "t", Function: "f", Subjects: []string{"acme.fn.x.y"}}
	if err := ValidateFor(&d, acme); !errors.Is(err, ErrInvalid) {
		t.Errorf("prefix acme, subject acme.fn.x.y: %v, want ErrInvalid", err)
	}
	d = kv.TriggerDef{Name: "t", Function: "f", Subjects: []string{"jetflow.fn.x.y"}}
	if err := ValidateFor(&d, acme); err != nil {
		t.Errorf("prefix acme, subject jetflow.fn.x.y (not acme's): %v", err)
	}
	d = kv.TriggerDef{Name: "t", Function: "f", Subjects: []string{"my.replies.>"}}
	if err := validate(&d, streams.Config{}, "my.replies"); !errors.Is(err, ErrInvalid) {
		t.Errorf("inbox prefix my.replies, subject my.replies.>: %v, want ErrInvalid", err)
	}
}
