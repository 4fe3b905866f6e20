// Package jsbatch publishes JetStream atomic batches (ADR-50): messages
// that one stream stores all or none of. The producer's Batch and the pool
// package's EnqueueBatch both go through Publish.
package jsbatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Headers of an atomic batch.
const (
	HeaderID       = "Nats-Batch-Id"
	HeaderSequence = "Nats-Batch-Sequence"
	HeaderCommit   = "Nats-Batch-Commit"
)

// DefaultTimeout bounds the commit's request when ctx has no deadline.
const DefaultTimeout = 10 * time.Second

// ErrEmpty: Publish was given no message.
var ErrEmpty = errors.New("jsbatch: empty batch")

// Publish sends msgs, all to subjects of one stream created with
// AllowAtomicPublish, as one atomic batch: the stream stores every one of
// them or none. The batch headers are set on msgs (their other headers,
// such as an expected last subject sequence, are checked for the batch as
// a whole). It returns the stream sequence of the last message; message i
// is stored at that sequence - (len(msgs)-1-i).
//
// A batch the server refuses returns its *jetstream.APIError unwrapped, so
// that a failed compare-and-swap of any message matches what a single
// publish would (kv.IsWrongSequence). When ctx has no deadline the commit
// waits at most DefaultTimeout.
func Publish(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg) (uint64, error) {
	if len(msgs) == 0 {
		return 0, ErrEmpty
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	id := nuid.Next()
	last := len(msgs) - 1
	for i, m := range msgs {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header[HeaderID] = []string{id}
		m.Header[HeaderSequence] = []string{strconv.Itoa(i + 1)}
		if i == last {
			m.Header[HeaderCommit] = []string{"1"}
			break
		}
		if err := nc.PublishMsg(m); err != nil {
			return 0, err
		}
	}
	resp, err := nc.RequestMsgWithContext(ctx, msgs[last])
	if err != nil {
		return 0, err
	}
	var ack struct {
		Seq   uint64              `json:"seq"`
		Count int                 `json:"count"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, fmt.Errorf("jsbatch: batch ack: %w", err)
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	if ack.Count != len(msgs) {
		return 0, fmt.Errorf("jsbatch: batch stored %d of %d messages", ack.Count, len(msgs))
	}
	return ack.Seq, nil
}
