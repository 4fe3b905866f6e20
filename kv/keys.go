package kv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrListStalled: a listing of a bucket's keys did not end. nats.go's key
// lister ends when its watcher has delivered the keys there were when it
// started; a watcher whose ordered consumer stalls (seen once in a full
// test run under load: 10 minutes) would keep the caller waiting for ever,
// and a listing cut short by a deadline looks complete.
var ErrListStalled = errors.New("kv: key listing did not end")

// listAttempt bounds one listing; ListKeys tries listAttempts times.
var listAttempt = 10 * time.Second

const listAttempts = 3

// ListKeys lists the keys of bucket b matching filter: all of them, or an
// error (ErrListStalled when no attempt ended, each bounded by
// listAttempt). No keys is an empty list.
func ListKeys(ctx context.Context, b jetstream.KeyValue, filter string) ([]string, error) {
	for range listAttempts {
		keys, done, err := listOnce(ctx, b, filter)
		if err != nil || done {
			return keys, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("%w: %s in bucket %s, %d tries of %s", ErrListStalled, filter, b.Bucket(), listAttempts, listAttempt)
}

func listOnce(ctx context.Context, b jetstream.KeyValue, filter string) (keys []string, done bool, err error) {
	lctx, cancel := context.WithTimeout(ctx, listAttempt)
	defer cancel()
	kl, err := b.ListKeysFiltered(lctx, filter)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, true, nil
	}
	if err != nil {
		if lctx.Err() != nil && ctx.Err() == nil {
			return nil, false, nil // this attempt's time ran out: try again
		}
		return nil, false, err
	}
	defer func() {
		if err := kl.Stop(); err != nil {
			_ = err // a key lister's consumer is ephemeral: nothing to undo
		}
	}()
	for k := range kl.Keys() {
		keys = append(keys, k)
	}
	// The channel also closes when lctx ends: then the list may be short.
	return keys, lctx.Err() == nil, nil
}
