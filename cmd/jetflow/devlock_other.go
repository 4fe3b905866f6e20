//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package main

// lockDataDir is a no-op where flock(2) is not available: do not run two
// `jetflow dev` processes on one data directory there.
func lockDataDir(dir string) (unlock func(), err error) { return func() {}, nil }
