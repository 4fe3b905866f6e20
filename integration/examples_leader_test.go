package integration_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The examples of code-defined crons (scheduler.ConfigureCrons) run with
// --url against a server where another scheduler leads, as jetflow dev's
// does on the README's quick-start server: the leader syncs code-defined
// crons at the start of its term, so theirs is never registered. Each
// says so at once and exits 1; they waited their whole demo and failed
// with "cron not found".
func TestExamplesCodeCronsUnderAnotherLeader(t *testing.T) {
	t.Parallel()
	url := exampleServer(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The scheduler lives as long as the test, not under a deadline: the
	// parallel subtests below may wait minutes for a slot before they run
	// (under .ci/run a 2-minute context had expired before they started).
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := scheduler.New(ctx, js, scheduler.Config{ID: "other-leader"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(sctx)
	})
	leadBy := time.Now().Add(2 * time.Minute)
	for !s.IsLeader() {
		if time.Now().After(leadBy) {
			t.Fatal("the test's scheduler never led")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, name := range []string{"dailydigest", "intervalcleanup"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bin := goBuild(t, "./examples/"+name)
			// The program waits 7 s for a lead before it gives up; a
			// loaded machine adds its start and its end to that. --for
			// is what it would run for if it did not give up: 2 minutes,
			// far past the bound below.
			rctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			var err error
			var took time.Duration
			// Once under .ci/run the program was SIGKILLed a second or
			// two after it started, by nothing of this test's (its
			// context was live): a kill from outside is run again, once.
			for try := 0; try < 2; try++ {
				cmd := exec.CommandContext(rctx, bin, "--url", url, "--for", "2m")
				cmd.WaitDelay = 5 * time.Second
				stdout.Reset()
				stderr.Reset()
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				start := time.Now()
				err = cmd.Run()
				took = time.Since(start)
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != -1 || rctx.Err() != nil {
					break
				}
				t.Logf("%s killed from outside after %v (%v); running it again", name, took, err)
			}
			if err == nil || rctx.Err() != nil {
				t.Fatalf("%s --url (another scheduler leads): %v after %v, want exit 1\nstdout:\n%s\nstderr:\n%s", name, err, took, stdout.String(), stderr.String())
			}
			if !strings.Contains(stderr.String(), "scheduler other-leader leads this server") {
				t.Fatalf("%s: stderr does not name the leader:\n%s", name, stderr.String())
			}
			if took > time.Minute {
				t.Fatalf("%s: gave up after %v, not at once", name, took)
			}
		})
	}
}
