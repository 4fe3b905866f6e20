package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Lease is a leader lease in a KV bucket: one key whose message
// carries a Nats-TTL, renewed by compare-and-swap. When the holder stops
// renewing, JetStream removes the key after the TTL and a standby creates it.
type Lease struct {
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

// LeaseInfo says who holds a lease.
type LeaseInfo struct {
	Holder  string
	Expires time.Time
}

// ErrNotLeader: the lease is held by someone else.
var ErrNotLeader = errors.New("kv: lease held by another")

// Acquire takes the lease if it is free, or renews it if held by us. It
// returns ErrNotLeader when another holder has it.
func (l *Lease) Acquire(ctx context.Context) error {
	val, _ := json.Marshal(leaseValue{Holder: l.holder, Expires: l.now().Add(l.ttl).UTC()})
	if l.rev != 0 {
		ack, err := l.js.PublishMsg(ctx, PutMsg(l.bucket, l.key, val, PutExpect(l.rev), PutTTL(l.ttl)))
		if err == nil {
			l.rev = ack.Sequence
			return nil
		}
		l.rev = 0
		if !IsWrongSequence(err) {
			return fmt.Errorf("kv: renew lease: %w", err)
		}
	}
	e, err := l.kv.Get(ctx, l.key)
	if err == nil {
		var v leaseValue
		_ = json.Unmarshal(e.Value(), &v)
		if v.Holder == l.holder {
			l.rev = e.Revision()
			return l.Acquire(ctx)
		}
		// A lease lives ttl after its last write (the server removes it
		// then, by its Nats-TTL): a value claiming far more (written by
		// another client, without a TTL) holds no longer than that. Within
		// ten TTLs the holder's own clock is taken, as it always was: the
		// server's write time and the holder's clock may differ a little.
		exp := v.Expires
		if last := e.Created().Add(l.ttl); exp.After(last.Add(10 * l.ttl)) {
			exp = last
		}
		if l.now().Before(exp.Add(l.ttl)) {
			return ErrNotLeader
		}
		// Expired but not yet removed by the server: take it over by CAS.
		ack, err := l.js.PublishMsg(ctx, PutMsg(l.bucket, l.key, val, PutExpect(e.Revision()), PutTTL(l.ttl)))
		if err != nil {
			if IsWrongSequence(err) {
				return ErrNotLeader
			}
			return err
		}
		l.rev = ack.Sequence
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("kv: read lease: %w", err)
	}
	rev, err := l.kv.Create(ctx, l.key, val, jetstream.KeyTTL(l.ttl))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return ErrNotLeader
		}
		return fmt.Errorf("kv: create lease: %w", err)
	}
	l.rev = rev
	return nil
}

// Release gives the lease up so a standby takes over at once. A release
// that fails leaves the lease to expire at its TTL; the error says so.
func (l *Lease) Release(ctx context.Context) error {
	if l.rev == 0 {
		return nil
	}
	err := l.kv.Purge(ctx, l.key, jetstream.LastRevision(l.rev))
	l.rev = 0
	if err != nil {
		return fmt.Errorf("kv: release lease %s (it expires at its TTL): %w", l.key, err)
	}
	return nil
}

// Info reads the lease.
func (l *Lease) Info(ctx context.Context) (LeaseInfo, error) {
	e, err := l.kv.Get(ctx, l.key)
	if err != nil {
		return LeaseInfo{}, err
	}
	var v leaseValue
	_ = json.Unmarshal(e.Value(), &v)
	return LeaseInfo(v), nil
}

// NewLease returns a lease on key in bucket kvb (a bucket created with
// LimitMarkerTTL, so that its keys may carry a TTL) held as holder, expiring
// ttl after its last renewal.
func NewLease(js jetstream.JetStream, kvb jetstream.KeyValue, key, holder string, ttl time.Duration, now func() time.Time) *Lease {
	if now == nil {
		now = time.Now
	}
	return &Lease{js: js, kv: kvb, bucket: kvb.Bucket(), key: key, holder: holder, ttl: ttl, now: now}
}
