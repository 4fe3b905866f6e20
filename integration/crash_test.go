package integration_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// args is the argument type of jfproc's functions (jfproc.Args).
type args struct {
	N int `json:"n"`
}

// procResult is what a jfproc handler stores on success.
type procResult struct {
	Worker  string `json:"worker"`
	Attempt int    `json:"attempt"`
}

func newProducer(t *testing.T, js jetstream.JetStream, scfg streams.Config) *producer.Producer {
	t.Helper()
	var p *producer.Producer
	retry(t, 60*time.Second, "producer.New", func(ctx context.Context) error {
		var err error
		p, err = producer.New(ctx, js, producer.Config{Streams: scfg})
		return err
	})
	return p
}

func isLine(kind, id string, attempt int) func(string) bool {
	want := kind + " " + id + " " + strconv.Itoa(attempt)
	return func(l string) bool { return l == want }
}

func workerArgs(url, id, fn string, extra ...string) []string {
	return append([]string{"--url", url, "--role", "worker", "--id", id, "--function", fn, "--ack-wait", "2s", "--lost-after", "4s", "--concurrency", "1"}, extra...)
}

func resultOf(t *testing.T, r *jetflow.Run) procResult {
	t.Helper()
	var res procResult
	if err := json.Unmarshal(r.Result, &res); err != nil {
		t.Fatalf("result of %s: %q: %v", r.ID, r.Result, err)
	}
	return res
}

// A retryable run whose worker process is SIGKILLed mid-handler is
// redelivered after AckWait to another worker process and succeeds there:
// one recorded outcome, one successful handler.
func TestWorkerSIGKILLRetryable(t *testing.T) {
	t.Parallel()
	srv := startNATS(t)
	_, js := connect(t, srv.url())
	p := newProducer(t, js, streams.Config{})
	runs := watchRuns(t, js, streams.Config{})
	fn := jetflow.Define[args]("it.kill.retry")

	a := startProc(t, "worker-a", workerArgs(srv.url(), "a", fn.Name(), "--block-first")...)
	id, err := p.Enqueue(context.Background(), fn.With(args{N: 1}), producer.WithID("kill-retry"))
	if err != nil {
		t.Fatal(err)
	}
	a.waitLine(30*time.Second, isLine("STARTED", id, 1))
	// Killed once its claim is stored (ClaimAfter, 100 ms by default).
	if r := runs.waitState(t, 30*time.Second, id, jetflow.InProgress); r.Owner != "a" {
		t.Fatalf("claimed by %q, want a", r.Owner)
	}
	a.kill()

	b := startProc(t, "worker-b", workerArgs(srv.url(), "b", fn.Name())...)
	runs.waitDone(t, 60*time.Second, []string{id})
	waitMarkers(t, 30*time.Second, "SUCCESS", []string{id}, b)

	r, terminal := runs.get(id)
	if r.State != jetflow.Success {
		t.Fatalf("state = %s (error %q), want success", r.State, r.Error)
	}
	if res := resultOf(t, r); res.Worker != "b" {
		t.Fatalf("outcome written by %q, want worker b", res.Worker)
	}
	if terminal != 1 {
		t.Fatalf("%d terminal records written, want 1", terminal)
	}
	started, succeeded := markers("STARTED", a, b), markers("SUCCESS", a, b)
	if started[id] != 2 || succeeded[id] != 1 {
		t.Fatalf("handler started %d times (want 2: killed, then redelivered), succeeded %d times (want 1)", started[id], succeeded[id])
	}
	// The attempt the kill interrupted counts: the new worker took the run
	// over from the stale claim as attempt 2.
	if r.Attempts != 2 {
		t.Fatalf("attempts = %d, want 2 (the lost attempt counts)", r.Attempts)
	}
}

// A retryable run whose worker is SIGKILLed before its claim was written
// (ClaimAfter not reached) is redelivered after AckWait; the redelivery is
// claimed before its handler starts and runs as the same attempt.
func TestWorkerSIGKILLBeforeClaim(t *testing.T) {
	t.Parallel()
	srv := startNATS(t)
	_, js := connect(t, srv.url())
	p := newProducer(t, js, streams.Config{})
	runs := watchRuns(t, js, streams.Config{})
	fn := jetflow.Define[args]("it.kill.early")

	a := startProc(t, "worker-a", workerArgs(srv.url(), "a", fn.Name(), "--block-first", "--claim-after", "1h")...)
	id, err := p.Enqueue(context.Background(), fn.With(args{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	a.waitLine(30*time.Second, isLine("STARTED", id, 1))
	a.kill()

	b := startProc(t, "worker-b", workerArgs(srv.url(), "b", fn.Name(), "--block-first", "--claim-after", "1h")...)
	// The redelivery claims first, though b's ClaimAfter is an hour.
	if r := runs.waitState(t, 30*time.Second, id, jetflow.InProgress); r.Owner != "b" || r.Attempts != 1 {
		t.Fatalf("claim %+v, want owner b at attempt 1", r)
	}
	b.waitLine(30*time.Second, isLine("STARTED", id, 1))
	b.kill()

	c := startProc(t, "worker-c", workerArgs(srv.url(), "c", fn.Name())...)
	runs.waitDone(t, 60*time.Second, []string{id})
	waitMarkers(t, 30*time.Second, "SUCCESS", []string{id}, c)
	r, terminal := runs.get(id)
	if r.State != jetflow.Success || terminal != 1 {
		t.Fatalf("state %s with %d terminal records, want one success", r.State, terminal)
	}
	// Attempt 1 died unclaimed (not counted), attempt 1 again died claimed
	// (counted): c ran attempt 2.
	if r.Attempts != 2 {
		t.Fatalf("attempts = %d, want 2", r.Attempts)
	}
	if started := markers("STARTED", a, b, c); started[id] != 3 {
		t.Fatalf("handler started %d times, want 3", started[id])
	}
}

// An at-most-once run whose worker process is SIGKILLed mid-handler is never
// run again: the next delivery finds the claim and fails the run with
// "worker lost".
func TestWorkerSIGKILLAtMostOnce(t *testing.T) {
	t.Parallel()
	srv := startNATS(t)
	_, js := connect(t, srv.url())
	p := newProducer(t, js, streams.Config{})
	runs := watchRuns(t, js, streams.Config{})
	fn := jetflow.Define[args]("it.kill.amo", jetflow.WithKind(jetflow.AtMostOnce))

	a := startProc(t, "worker-a", workerArgs(srv.url(), "a", fn.Name(), "--kind", "atmostonce", "--block-first")...)
	id, err := p.Enqueue(context.Background(), fn.With(args{N: 1}), producer.WithID("kill-amo"))
	if err != nil {
		t.Fatal(err)
	}
	a.waitLine(30*time.Second, isLine("STARTED", id, 1))
	a.kill()

	b := startProc(t, "worker-b", workerArgs(srv.url(), "b", fn.Name(), "--kind", "atmostonce")...)
	runs.waitDone(t, 60*time.Second, []string{id})

	r, terminal := runs.get(id)
	if r.State != jetflow.Failed || !strings.Contains(r.Error, "worker lost") {
		t.Fatalf("state = %s, error %q; want failed with worker lost", r.State, r.Error)
	}
	if terminal != 1 {
		t.Fatalf("%d terminal records written, want 1", terminal)
	}
	if started := markers("STARTED", a, b); started[id] != 1 {
		t.Fatalf("handler started %d times across both processes, want 1", started[id])
	}
	if n := markers("SUCCESS", a, b)[id]; n != 0 {
		t.Fatalf("handler succeeded %d times, want 0", n)
	}
}

// A worker stopped (SIGSTOP: no heartbeats) past AckWait is a zombie: its
// run is redelivered and completed by another worker; when the zombie wakes
// and finishes, its late result loses the compare-and-swap and is
// discarded. The record stays the one the second worker wrote.
func TestZombieResultDiscarded(t *testing.T) {
	t.Parallel()
	srv := startNATS(t)
	_, js := connect(t, srv.url())
	p := newProducer(t, js, streams.Config{})
	runs := watchRuns(t, js, streams.Config{})
	fn := jetflow.Define[args]("it.zombie")
	release := filepath.Join(t.TempDir(), "release")

	a := startProc(t, "worker-a", workerArgs(srv.url(), "a", fn.Name(), "--release-file", release)...)
	id, err := p.Enqueue(context.Background(), fn.With(args{N: 1}), producer.WithID("zombie"))
	if err != nil {
		t.Fatal(err)
	}
	a.waitLine(30*time.Second, isLine("STARTED", id, 1))
	a.signal(syscall.SIGSTOP)

	b := startProc(t, "worker-b", workerArgs(srv.url(), "b", fn.Name())...)
	runs.waitDone(t, 60*time.Second, []string{id})
	won, _ := runs.get(id)
	if won.State != jetflow.Success || resultOf(t, won).Worker != "b" {
		t.Fatalf("record = %s by %q, want success by worker b", won.State, won.Result)
	}

	// Wake the zombie and let its handler finish.
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a.signal(syscall.SIGCONT)
	// The zombie's handler either returns (its outcome is then discarded) or
	// is canceled first, when its heartbeat finds the run taken over.
	testserver.Eventually(t, 30*time.Second, "zombie's outcome discarded", func() bool {
		return strings.Contains(a.stderr.String(), "outcome discarded")
	})

	r, err := p.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Revision != won.Revision || resultOf(t, r).Worker != "b" {
		t.Fatalf("record changed after the zombie finished: rev %d -> %d, result %s", won.Revision, r.Revision, r.Result)
	}
	if _, terminal := runs.get(id); terminal != 1 {
		t.Fatalf("%d terminal records written, want 1", terminal)
	}
	waitMarkers(t, 30*time.Second, "SUCCESS", []string{id}, b)
	if s := markers("SUCCESS", b)[id]; s != 1 {
		t.Fatalf("replacement handler returned success %d times, want 1", s)
	}
}
