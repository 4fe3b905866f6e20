//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// lockDataDir takes an exclusive lock on dir so that two `jetflow dev`
// processes never share one JetStream store directory (nats-server does not
// guard against it). The lock goes with the process, even on a crash.
func lockDataDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "jetflow-dev.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		_ = f.Close() // read-only use of a file another dev holds
		holder := strings.TrimSpace(string(b))
		if holder == "" {
			holder = "another process"
		}
		return nil, fmt.Errorf("data directory %s is in use by %s; stop it or pass another --data", dir, holder)
	}
	// The holder's name, for the message of a second dev on this
	// directory: the lock holds without it.
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "jetflow dev (pid %d)\n", os.Getpid())
	return func() {
		// Closing the file releases the lock too: the first error is
		// the only one that could say more, and nothing is left to do.
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
