package kv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WatchWait is the first bound of a watch's start (WatchWithin); a caller
// that meets ErrWatchSlow doubles it for the next try, up to MaxWatchWait.
// A consumer is created in milliseconds on a healthy server; the fault
// suite saw a first request after an election go unanswered for 3 s where
// the one sent again was answered at once.
const (
	WatchWait    = time.Second
	MaxWatchWait = 16 * time.Second
)

// ErrWatchSlow is returned by WatchWithin when the watch did not start in
// time. Starting it again at once is the remedy.
var ErrWatchSlow = errors.New("kv: watch not started in time")

// NextWatchWait is the bound of the try after one that ended with err and
// had wait: doubled after ErrWatchSlow (a server that is only slow still
// gets its watch started), WatchWait again otherwise.
func NextWatchWait(wait time.Duration, err error) time.Duration {
	if errors.Is(err, ErrWatchSlow) {
		return min(2*max(wait, WatchWait), MaxWatchWait)
	}
	return WatchWait
}

// WatchWithin starts a watch of the keys of b under filter (">" for all),
// as Watch does, but returns ErrWatchSlow if it has not started within
// wait. A watch starts by creating a consumer, and after a node of a
// cluster dies a creation request sent before the cluster can create
// consumers again may go unanswered for the client's whole timeout (5 s,
// seen twice in a row after a scheduler's term began) where one sent again
// a moment later is answered. The watch is not bounded by a shorter
// context instead: nats.go ends the watch when the context it was started
// with ends. A watch that starts after WatchWithin gave up on it is
// stopped.
func WatchWithin(ctx context.Context, b jetstream.KeyValue, filter string, wait time.Duration, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	type started struct {
		w   jetstream.KeyWatcher
		err error
	}
	ch := make(chan started, 1)
	go func() {
		var s started
		if filter == ">" {
			s.w, s.err = b.WatchAll(ctx, opts...)
		} else {
			s.w, s.err = b.Watch(ctx, filter, opts...)
		}
		ch <- s
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s := <-ch:
		return s.w, s.err
	case <-t.C:
	case <-ctx.Done():
	}
	go func() {
		if s := <-ch; s.w != nil {
			_ = s.w.Stop()
		}
	}()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("%w (%s)", ErrWatchSlow, wait)
}
