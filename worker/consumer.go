package worker

import (
	"context"
	"errors"
	"github.com/jetflow-dev/jetflow/internal/sentinel"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A function's consumer can go away while the worker runs: an operator
// deletes it (nats consumer rm), or the function stream is deleted and
// provisioned again. nats.go's Consume then stops for good (the server
// says the consumer was deleted) or pulls in vain (missed heartbeats, no
// responders). Either way the worker would serve the function no more, and
// its runs would wait in the stream until a restart. So on those errors
// the worker looks the consumer up, and when it is gone (or Consume has
// stopped) it creates it again and consumes anew, retrying with backoff
// while the stream is missing.
//
// A consumer created again delivers every message not yet acknowledged as
// a first delivery, the runs in flight here and in other workers included.
// As after a reconnect (replay.go), the worker first takes every message
// stored before that moment for a possible replay: its own runs in flight
// are claimed at once, and a possible replay that finds its run unclaimed
// waits ReplayGrace for the worker running it to claim it.

// consumerMayBeGone reports whether a Consume error may mean that the
// consumer no longer exists.
func consumerMayBeGone(err error) bool {
	return sentinel.IsAny(err, jetstream.ErrConsumerDeleted, jetstream.ErrConsumerNotFound,
		jetstream.ErrNoHeartbeat, nats.ErrNoResponders)
}

// recoverBackoff bounds the wait between two tries to create a consumer
// again.
const recoverBackoff = 5 * time.Second

// checkConsumer looks e's consumer up and, when it is gone or Consume has
// stopped (stopped: the server said it was deleted), creates it again and
// consumes anew. One check per function runs at a time; a stop it hears of
// while one runs is remembered (e.consumeStopped), so that a consumer
// created again by someone else meanwhile is still consumed anew.
func (w *Worker) checkConsumer(e *fnEntry, stopped bool) {
	if stopped {
		e.consumeStopped.Store(true)
	}
	if !e.checking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer e.checking.Store(false)
		wait := 250 * time.Millisecond
		for try := 0; ; try++ {
			done, err := w.recoverConsumer(e)
			if done {
				return
			}
			if try == 0 || wait == recoverBackoff && try%12 == 0 {
				w.log.Warn("consumer of a function is gone; creating it again", "function", e.name, "error", err)
			}
			select {
			case <-w.stopCh:
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, recoverBackoff)
		}
	}()
}

// recoverConsumer is one try of checkConsumer: done reports that there is
// nothing (more) to do.
func (w *Worker) recoverConsumer(e *fnEntry) (done bool, err error) {
	stopped := e.consumeStopped.Load()
	w.mu.Lock()
	cons, skip := e.cons, w.stopping || e.paused || e.cons == nil
	w.mu.Unlock()
	if skip {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !stopped {
		_, err := cons.Info(ctx)
		if err == nil {
			return true, nil // there: nats.go pulls again by itself
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			// Not known to be gone (a server down, a timeout, a user who
			// may not read it): nats.go pulls again by itself, and the
			// next missed heartbeat looks again.
			return true, err
		}
	}
	stream, err := w.js.Stream(ctx, w.scfg.FunctionStream())
	if err != nil {
		return false, err
	}
	// Every message stored until now may have been delivered before.
	w.suspectReplays()
	cons, err = w.createConsumer(ctx, stream, e)
	if err != nil {
		return false, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping || e.paused {
		return true, nil
	}
	if e.cc != nil {
		// Deliveries already buffered still reach the runners; stopped,
		// they would wait out AckWait before coming back.
		e.cc.Drain()
	}
	e.cons, e.cc = cons, nil
	cc, err := w.consume(e)
	if err != nil {
		return false, err
	}
	e.cc = cc
	e.consumeStopped.Store(false)
	w.log.Info("consumer of a function created again", "function", e.name)
	return true, nil
}

// A Consume can stop pulling while runs wait for it: nats.go's count of
// messages its pull requests still owe it outlives the requests, and it
// pulls again only after two heartbeats go missing, a second later (see
// pullHeartbeat). The bench shows it about once in ten runs of 100,000:
// deliveries stop at once, the server has no pull request waiting, and
// tens of thousands of runs pending. So the worker looks sooner: when a
// function's deliveries stop after a busy spell, it asks the consumer once
// whether runs are pending with no pull waiting and acknowledgements to
// spare, and again stallConfirm later; if so, with nothing delivered
// meanwhile, it consumes anew (the old Consume drains, so that nothing it
// holds waits out AckWait). A function that runs dry costs one consumer
// info (at most one a second); an idle one no traffic. Several workers
// share a consumer: another worker's waiting pull hides this one's stall,
// which nats.go's heartbeats then end.

// stallCheck is how often watchPulls looks at a function's deliveries.
const stallCheck = 100 * time.Millisecond

// watchPulls watches e's deliveries until the worker stops.
func (w *Worker) watchPulls(e *fnEntry) {
	t := time.NewTicker(stallCheck)
	defer t.Stop()
	burst := uint64(max(e.opts.Prefetch/4, 16))
	var last uint64
	var lastCheck time.Time
	active := false
	for {
		select {
		case <-w.stopCh:
			return
		case now := <-t.C:
			n, busy := e.arrivals.snapshot()
			// A look held back by the once-a-second bound stays due.
			if stalled(n, last, burst, busy, active, &active) && now.Sub(lastCheck) >= time.Second {
				active, lastCheck = false, now
				w.unstall(e, n)
			}
			last = n
		}
	}
}

// stalled decides, at one look, whether deliveries have stopped after a
// busy spell: n dispatches so far, last at the look before, burst the
// dispatches between two looks that make a spell busy, busy that a
// dispatch waits for a runner, active that a busy spell has not been
// looked at since it ended (set here when a spell is busy; the caller
// clears it once it looks). A trickle of runs is no busy spell: nats.go's
// counts only drift while it pulls again and again.
func stalled(n, last, burst uint64, busy, active bool, setActive *bool) bool {
	switch {
	case n-last >= burst:
		*setActive = true
		return false
	case n != last || busy || !active:
		// Still moving, or every runner busy (the Consume is not what
		// holds the runs back), or no busy spell to end.
		return false
	}
	return true
}

// stallConfirm is how long a suspected stall must last, the consumer
// still showing runs pending, no pull request waiting and nothing more
// delivered, before the worker consumes anew: a pull request the server
// has received but not yet queued is not counted as waiting.
const stallConfirm = 250 * time.Millisecond

// unstall consumes e anew if its consumer has runs pending and no pull
// request waiting for them, and still so stallConfirm later with nothing
// delivered meanwhile (n: e's dispatches at the look).
func (w *Worker) unstall(e *fnEntry, n uint64) {
	w.mu.Lock()
	cons, cc := e.cons, e.cc
	skip := w.stopping || e.paused || cons == nil || cc == nil
	w.mu.Unlock()
	if skip {
		return
	}
	look := func() (*jetstream.ConsumerInfo, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		info, err := cons.Info(ctx)
		stuck := err == nil && info.NumPending > 0 && info.NumWaiting == 0 &&
			(info.Config.MaxAckPending <= 0 || info.NumAckPending < info.Config.MaxAckPending)
		return info, stuck
	}
	first, stuck := look()
	if !stuck {
		return
	}
	select {
	case <-w.stopCh:
		return
	case <-time.After(stallConfirm):
	}
	info, stuck := look()
	if now, _ := e.arrivals.snapshot(); !stuck || now != n || info.Delivered.Consumer != first.Delivered.Consumer {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping || e.paused || e.cc != cc {
		return
	}
	ncc, err := w.consume(e)
	if err != nil {
		w.log.Debug("consuming anew after a stall failed; nats.go pulls again by itself", "function", e.name, "error", err)
		return
	}
	cc.Drain()
	e.cc = ncc
	w.log.Debug("deliveries stopped with runs pending and no pull waiting: consuming anew",
		"function", e.name, "pending", info.NumPending)
}
