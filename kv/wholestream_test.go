package kv_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-dev/jetflow/kv"
)

func TestWholeStream(t *testing.T) {
	cases := []struct {
		name     string
		subjects []string
		filter   string
		want     bool
	}{
		{"a bucket read whole", []string{"$KV.runs.>"}, "$KV.runs.>", true},
		{"a prefix of the bucket", []string{"$KV.runs.>"}, "$KV.runs.f.>", false},
		{"another bucket", []string{"$KV.runs.>"}, "$KV.delayed.>", false},
		{"a stream of two subjects", []string{"$KV.runs.>", "other.>"}, "$KV.runs.>", false},
		{"a stream of no subjects", nil, "$KV.runs.>", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := kv.WholeStream(jetstream.StreamConfig{Subjects: c.subjects}, c.filter)
			if got != c.want {
				t.Fatalf("WholeStream(%v, %q) = %v, want %v", c.subjects, c.filter, got, c.want)
			}
		})
	}
}
