package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// lease is the dispatcher lease of one pool: a key of the pools bucket whose
// message carries a Nats-TTL, renewed by compare-and-swap (the technique of
// the scheduler's lease). When the holder stops renewing, JetStream removes
// the key after the TTL and a standby creates it.
type lease struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	bucket string
	key    string
	holder string
	ttl    time.Duration
	rev    uint64
	now    func() time.Time
}

type leaseValue struct {
	Holder  string    `json:"holder"`
	Expires time.Time `json:"expires"`
}

// errNotLeader: another dispatcher holds the lease.
var errNotLeader = errors.New("pool: lease held by another dispatcher")

func (l *lease) publish(ctx context.Context, val []byte, expect uint64) (uint64, error) {
	m := &nats.Msg{Subject: streams.KVSubject(l.bucket, l.key), Data: val, Header: nats.Header{
		hdrExpectSubjSeq: []string{strconv.FormatUint(expect, 10)},
		hdrTTL:           []string{l.ttl.String()},
	}}
	ack, err := l.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// acquire takes the lease if it is free, or renews it if held by us.
func (l *lease) acquire(ctx context.Context) error {
	val, _ := json.Marshal(leaseValue{Holder: l.holder, Expires: l.now().Add(l.ttl).UTC()})
	if l.rev != 0 {
		rev, err := l.publish(ctx, val, l.rev)
		if err == nil {
			l.rev = rev
			return nil
		}
		l.rev = 0
		if !kv.IsWrongSequence(err) {
			return fmt.Errorf("pool: renew lease: %w", err)
		}
	}
	e, err := l.kv.Get(ctx, l.key)
	switch {
	case err == nil:
		var v leaseValue
		_ = json.Unmarshal(e.Value(), &v)
		if v.Holder != l.holder && l.now().Before(v.Expires.Add(l.ttl)) {
			return errNotLeader
		}
		// Ours (a renewal that lost its revision), or expired but not yet
		// removed by the server: take it by compare-and-swap.
		rev, err := l.publish(ctx, val, e.Revision())
		if err != nil {
			if kv.IsWrongSequence(err) {
				return errNotLeader
			}
			return fmt.Errorf("pool: take lease: %w", err)
		}
		l.rev = rev
		return nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err := l.kv.Create(ctx, l.key, val, jetstream.KeyTTL(l.ttl))
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				return errNotLeader
			}
			return fmt.Errorf("pool: create lease: %w", err)
		}
		l.rev = rev
		return nil
	default:
		return fmt.Errorf("pool: read lease: %w", err)
	}
}

// release gives the lease up (best effort) so a standby takes over at once.
func (l *lease) release(ctx context.Context) {
	if l.rev != 0 {
		_ = l.kv.Purge(ctx, l.key, jetstream.LastRevision(l.rev))
		l.rev = 0
	}
}
