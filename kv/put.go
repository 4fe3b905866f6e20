package kv

import (
	"strconv"
	"time"

	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
)

// PutOption conditions or marks a raw write built by PutMsg.
type PutOption func(h nats.Header)

// PutExpect makes the write conditional on the key's last revision being
// rev (0: the key must not exist): the compare-and-swap that every state
// change in jetflow's buckets goes through. The server refuses a write
// whose condition fails with an error that IsWrongSequence matches.
func PutExpect(rev uint64) PutOption {
	return func(h nats.Header) { h[hdrExpectSubjSeq] = []string{strconv.FormatUint(rev, 10)} }
}

// PutTTL gives the entry a Nats-TTL: JetStream removes it d after the write
// (the bucket must allow per-message TTLs: LimitMarkerTTL).
func PutTTL(d time.Duration) PutOption {
	ttl := d.String()
	return func(h nats.Header) { h[hdrTTL] = []string{ttl} }
}

// PutMsg builds the raw write of key in bucket, the message the KV API
// would publish, for the writes that API cannot make: conditional writes
// carrying headers, per-key TTLs, pipelined (asynchronous) and atomic-batch
// writes. Every write of jetflow's buckets that does not go through the KV
// API is built here. Publish it with JetStream (PublishMsg,
// PublishMsgAsync); the ack's sequence is the entry's new revision.
func PutMsg(bucket, key string, data []byte, opts ...PutOption) *nats.Msg {
	h := make(nats.Header, len(opts)+4)
	for _, o := range opts {
		o(h)
	}
	return &nats.Msg{Subject: streams.KVSubject(bucket, key), Header: h, Data: data}
}
