package kv_test

import (
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/kv"
)

func TestPutMsg(t *testing.T) {
	t.Parallel()
	m := kv.PutMsg("jetflow_runs", "r1", []byte("{}"), kv.PutExpect(0), kv.PutTTL(30*time.Second))
	if m.Subject != "$KV.jetflow_runs.r1" || string(m.Data) != "{}" {
		t.Fatalf("msg = %s %q", m.Subject, m.Data)
	}
	if got := m.Header.Get("Nats-Expected-Last-Subject-Sequence"); got != "0" {
		t.Fatalf("expected sequence header = %q", got)
	}
	if got := m.Header.Get("Nats-TTL"); got != "30s" {
		t.Fatalf("TTL header = %q", got)
	}
	plain := kv.PutMsg("b", "k", nil)
	if plain.Header == nil || len(plain.Header) != 0 {
		t.Fatalf("unconditional write headers = %v", plain.Header)
	}
}
