package trigger

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestFetchFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{jetstream.ErrNoMessages, false},
		{fmt.Errorf("fetch: %w", nats.ErrTimeout), false},
		{errors.New("consumer deleted"), true},
	} {
		if got := fetchFailed(tc.err); got != tc.want {
			t.Errorf("fetchFailed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", jetflow.ErrBadArgs), true},
		{jetflow.ErrInvalidName, true},
		{jetflow.ErrInvalidRunID, true},
		{producer.ErrArgsTooLarge, true},
		{errors.New("timeout"), false},
		{nil, false},
	} {
		if got := badInput(tc.err); got != tc.want {
			t.Errorf("badInput(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestSameAccount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		src  *jetstream.StreamSource
		want bool
	}{
		{"none", nil, false},
		{"local", &jetstream.StreamSource{Name: "A"}, true},
		{"another domain", &jetstream.StreamSource{Name: "A", Domain: "hub"}, false},
		{"another account", &jetstream.StreamSource{Name: "A", External: &jetstream.ExternalStream{APIPrefix: "$JS.x.API"}}, false},
	} {
		if got := sameAccount(tc.src); got != tc.want {
			t.Errorf("%s: sameAccount = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestValidStreamName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"ORDERS", true},
		{"", false},
		{strings.Repeat("A", maxStreamName), true},
		{strings.Repeat("A", maxStreamName+1), false},
		{"A B", false},
		{"A.B", false},
		{"A*", false},
		{"A>", false},
		{"A/B", false},
		{`A\B`, false},
	} {
		if got := validStreamName(tc.s); got != tc.want {
			t.Errorf("validStreamName(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestSameSource(t *testing.T) {
	t.Parallel()
	base := kv.TriggerDef{Name: "t", Function: "f", Kind: "stream", Stream: "S", Subjects: []string{"a", "b"}, IDHeader: "Id",
		Window: 10, Origin: "code"}
	for _, tc := range []struct {
		name   string
		change func(d *kv.TriggerDef)
		want   bool
	}{
		{"same", func(d *kv.TriggerDef) {}, true},
		{"paused", func(d *kv.TriggerDef) { d.Paused = true }, true},
		{"revision", func(d *kv.TriggerDef) { d.Revision = 9 }, true},
		{"function", func(d *kv.TriggerDef) { d.Function = "g" }, false},
		{"kind", func(d *kv.TriggerDef) { d.Kind = "core" }, false},
		{"stream", func(d *kv.TriggerDef) { d.Stream = "T" }, false},
		{"subjects", func(d *kv.TriggerDef) { d.Subjects = []string{"a"} }, false},
		{"id header", func(d *kv.TriggerDef) { d.IDHeader = "" }, false},
		{"window", func(d *kv.TriggerDef) { d.Window = 11 }, false},
		{"deliver new", func(d *kv.TriggerDef) { d.DeliverNew = true }, false},
		{"origin", func(d *kv.TriggerDef) { d.Origin = "runtime" }, false},
	} {
		b := base
		b.Subjects = append([]string(nil), base.Subjects...)
		tc.change(&b)
		if got := sameSource(base, b); got != tc.want {
			t.Errorf("%s: sameSource = %v, want %v", tc.name, got, tc.want)
		}
	}
}
