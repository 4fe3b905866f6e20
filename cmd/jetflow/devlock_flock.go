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
		f.Close()
		holder := strings.TrimSpace(string(b))
		if holder == "" {
			holder = "another process"
		}
		return nil, fmt.Errorf("data directory %s is in use by %s; stop it or pass another --data", dir, holder)
	}
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "jetflow dev (pid %d)\n", os.Getpid())
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
