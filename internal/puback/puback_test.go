package puback

import (
	"testing"

	"github.com/nats-io/nats.go"
)

func TestSeqReadsAcknowledgements(t *testing.T) {
	for _, c := range []struct {
		data string
		seq  uint64
		ok   bool
	}{
		{`{"stream":"KV_jetflow_runs","seq":42}`, 42, true},
		{`{"stream":"KV_jetflow_runs","domain":"hub","seq":18446744073709551,"duplicate":true}`, 18446744073709551, true},
		{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 7"}}`, 0, false},
		{`{"stream":"KV_x","seq":0}`, 0, false},
		{`{"stream":"KV_x"}`, 0, false},
		{`{"stream":"KV_x","seq":123456789012345678901}`, 0, false},
		{``, 0, false},
	} {
		seq, ok := Seq(&nats.Msg{Data: []byte(c.data)})
		if seq != c.seq || ok != c.ok {
			t.Errorf("Seq(%s) = %d, %v; want %d, %v", c.data, seq, ok, c.seq, c.ok)
		}
	}
}
