package worker

import "math"

// ConsumersClosed reports whether every function's consumer of w has been
// drained and closed: a stopping worker takes no new delivery.
func ConsumersClosed(w *Worker) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.fns {
		if e.cc == nil {
			continue
		}
		select {
		case <-e.cc.Closed():
		default:
			return false
		}
	}
	return w.stopping
}

// ReplayBoundRead reports whether w has noticed a reconnect and read the
// function stream's last sequence since.
func ReplayBoundRead(w *Worker) bool {
	b := w.replay.bound.Load()
	return b != nil && b.read && w.replay.before.Load() != math.MaxInt64
}
