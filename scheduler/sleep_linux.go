package scheduler

import (
	"syscall"
	"time"
)

// sleepFine sleeps d in the kernel (nanosleep), to the microsecond: Go's
// timers wake an idle process in whole milliseconds (its poller waits at
// least 1 ms), so a run due 0.3 ms from now would start 0.7 ms late. A
// signal (the runtime's preemption) ends a nanosleep early: it sleeps
// again for what is left.
func sleepFine(d time.Duration) {
	until := time.Now().Add(d)
	for left := d; left > 0; left = time.Until(until) {
		ts := syscall.NsecToTimespec(left.Nanoseconds())
		_ = syscall.Nanosleep(&ts, nil) // EINTR: the loop sleeps what is left
	}
}
