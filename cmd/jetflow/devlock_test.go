//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package main

import (
	"strings"
	"testing"
)

func TestDevRefusesASharedDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	unlock, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	_, _, err = cli(testCtx(t), t, "dev", "--once", "--port", "0", "--data", dir, "--sync-every", testSyncEvery.String())
	if err == nil || !strings.Contains(err.Error(), "is in use") {
		t.Fatalf("dev on a locked data dir: %v", err)
	}
}
