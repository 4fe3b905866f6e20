// Package lifecycle is the one Start/Stop/Stopped implementation shared by
// every long-running part (worker, scheduler, pool dispatcher): Start
// returns at once and the part runs until Stop, or until Start's ctx ends;
// Stopped is closed when it has stopped. (The worker stops gracefully
// first, then ends its L; its StopAndCancel cancels the handlers before.)
package lifecycle

import (
	"context"
	"errors"
	"sync"
)

// ErrStarted: Start was called twice.
var ErrStarted = errors.New("already started")

// L runs a function in the background until stopped.
type L struct {
	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	stopped chan struct{}
}

// Start runs run(ctx) in a goroutine; ctx ends when Stop is called or the
// parent ctx ends. It returns at once.
func (l *L) Start(parent context.Context, run func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return ErrStarted
	}
	l.started = true
	if l.stopped == nil {
		l.stopped = make(chan struct{})
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	l.cancel = cancel
	go func() {
		select {
		case <-parent.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		defer close(l.stopped)
		run(ctx)
	}()
	return nil
}

// Stop ends the run context and waits for run to return or ctx to end.
func (l *L) Stop(ctx context.Context) error {
	l.mu.Lock()
	if !l.started {
		l.mu.Unlock()
		return nil
	}
	l.cancel()
	ch := l.stopped
	l.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stopped is closed once run has returned.
func (l *L) Stopped() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped == nil {
		l.stopped = make(chan struct{})
	}
	return l.stopped
}
