// Package puback is how jetflow's hot paths wait for JetStream publish
// acknowledgements on reply subjects of their own (the worker's claims and
// outcomes, the producer's enqueue window, the run indexer's entries),
// where nats.go's asynchronous publish would make a future and decode each
// one: Replies routes each reply to its write by token, Seq reads an
// acknowledgement without a JSON decoder.
package puback

import (
	"bytes"

	"github.com/nats-io/nats.go"
)

// Seq reads a publish acknowledgement: the stream sequence, or false for
// an error or a no-responders status. A plain acknowledgement,
// {"stream":"KV_...","seq":N} (maybe with "domain" or "duplicate"), is read
// without a JSON decoder.
func Seq(msg *nats.Msg) (uint64, bool) {
	data := msg.Data
	if len(data) == 0 || bytes.Contains(data, []byte(`"error"`)) {
		return 0, false
	}
	i := bytes.Index(data, []byte(`"seq":`))
	if i < 0 {
		return 0, false
	}
	var seq uint64
	digits := 0
	for _, c := range data[i+len(`"seq":`):] {
		if c < '0' || c > '9' {
			break
		}
		seq = seq*10 + uint64(c-'0')
		digits++
	}
	if digits == 0 || digits >= 20 || seq == 0 {
		return 0, false
	}
	return seq, true
}
