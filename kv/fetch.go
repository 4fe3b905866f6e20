package kv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrFetchStalled: a consumer kept messages pending that fetch after fetch
// did not deliver.
var ErrFetchStalled = errors.New("kv: pending messages not delivered")

// fetchTries bounds the empty fetches in a row FetchPending makes while its
// consumer still has messages pending.
const fetchTries = 10

// FetchPending hands each the messages consumer c has pending, oldest
// first, up to n of them, fetching at most batch at a time without waiting
// on the server. It ends when n were handed, each returns false or an
// error, or c has nothing left to deliver (messages removed since c counted
// them: the rest is all there is).
//
// An empty fetch is not taken for the end while c still has messages
// pending: nats.go ends a no-wait fetch when a second passes without a
// message (a busy server, a block read from disk, a cluster's extra hop),
// which would otherwise look like the end and leave the read short. Such a
// fetch is made again, up to fetchTries in a row; then ErrFetchStalled.
// A short read is never returned as the whole.
func FetchPending(ctx context.Context, c jetstream.Consumer, n, batch int, each func(jetstream.Msg) (bool, error)) error {
	handed, empty := 0, 0
	for handed < n {
		b, err := c.FetchNoWait(min(n-handed, batch))
		if err != nil {
			return err
		}
		got := 0
		for m := range b.Messages() {
			got++
			handed++
			more, err := each(m)
			if err != nil || !more {
				return err // the batch's channel holds the rest: nothing blocks
			}
		}
		if err := b.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return err
		}
		if got > 0 {
			empty = 0
			continue
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending == 0 {
			return nil // removed since the count
		}
		if empty++; empty >= fetchTries {
			return fmt.Errorf("%w: %d of %d handed, %d still pending on consumer %s after %d empty fetches",
				ErrFetchStalled, handed, n, info.NumPending, info.Name, empty)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(empty) * 10 * time.Millisecond):
		}
	}
	return nil
}
