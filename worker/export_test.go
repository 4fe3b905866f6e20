package worker

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
