package stall

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestStalled(t *testing.T) {
	const th, win = time.Second, 10 * time.Second
	cases := []struct {
		name                    string
		now, lastTick, stallEnd time.Duration
		want                    bool
	}{
		{"ticking, never stalled", 5 * time.Second, 4800 * time.Millisecond, -1, false},
		{"not ticked since a stop", 20 * time.Second, 4 * time.Second, -1, true},
		{"a stall ended just now", 20 * time.Second, 20 * time.Second, 20 * time.Second, true},
		{"a stall ended within the window", 25 * time.Second, 25 * time.Second, 20 * time.Second, true},
		{"a stall ended a window ago", 30 * time.Second, 30 * time.Second, 20 * time.Second, false},
	}
	for _, c := range cases {
		if got := Stalled(c.now, c.lastTick, c.stallEnd, th, win); got != c.want {
			t.Errorf("%s: Stalled = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestDetectorSeesAStop stops the test process itself with SIGSTOP (a
// child process sends SIGCONT a second later) and checks that the detector
// reports the stop once the process runs again.
func TestDetectorSeesAStop(t *testing.T) {
	d := New(300*time.Millisecond, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx)
	pid := strconv.Itoa(os.Getpid())
	resume := exec.Command("sh", "-c", "sleep 1; kill -CONT "+pid)
	if err := resume.Start(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := resume.Wait(); err != nil {
		t.Fatal(err)
	}
	if !d.Recent() {
		t.Fatal("a stop of the process was not reported")
	}
}
