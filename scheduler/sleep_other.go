//go:build !linux

package scheduler

import "time"

// sleepFine sleeps d (sleep_linux.go sleeps in the kernel instead).
func sleepFine(d time.Duration) { time.Sleep(d) }
