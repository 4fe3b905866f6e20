package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// workerProc is examples/gracefulworker --serve running as its own
// process, its stdout collected line by line.
type workerProc struct {
	name  string
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	done  chan error
}

func startWorkerProc(t *testing.T, name, bin string, args ...string) *workerProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GORACE=exitcode=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &workerProc{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		err := cmd.Wait()
		if ours, _ := dataRaces(stderr.String()); len(ours) > 0 {
			err = fmt.Errorf("data race in %s:\n%s", name, strings.Join(ours, "\n"))
		} else if err != nil {
			err = fmt.Errorf("%s: %w\nstderr:\n%s", name, err, stderr.String())
		}
		p.done <- err
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return p
}

// count is how many lines start with prefix.
func (p *workerProc) count(prefix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

func (p *workerProc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

func (p *workerProc) waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s within a minute; output:\n%s", p.name, what, strings.Join(p.output(), "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *workerProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s did not exit within a minute of SIGTERM", p.name)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func readyStatus(addr string) int {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestGracefulDeployUnderLoad deploys a worker under load: the worker of
// examples/gracefulworker runs as its own process while runs keep being
// enqueued, gets SIGTERM in the middle, and a second process takes over.
// The stopped worker's readiness fails while it drains, its quick runs
// finish, its slow ones (longer than its grace) are handed back, and in
// the end every run succeeded after exactly one attempt (a run handed back
// does not count one), ran to the end exactly once (one "ran" line across
// both processes), and none is left pending or in progress.
func TestGracefulDeployUnderLoad(t *testing.T) {
	t.Parallel()
	url := exampleServer(t)
	bin := goBuild(t, "./examples/gracefulworker")
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	type reportArgs struct {
		Millis int `json:"millis"`
	}
	build := jetflow.Define[reportArgs]("reports.build")
	const slow, total = 2, 300
	var mu sync.Mutex
	var ids []string
	enqueue := func(millis int) {
		id, err := p.Enqueue(ctx, build.With(reportArgs{Millis: millis}))
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
	}
	// The slow runs come first, so that the first worker is running them
	// when it gets SIGTERM; they outlast its grace of 1 s.
	for range slow {
		enqueue(8000)
	}
	for range 50 {
		enqueue(20)
	}
	workerArgs := func(health string) []string {
		return []string{"--serve", "--url", url, "--grace", "1s", "--concurrency", "4", "--health", health}
	}
	healthA := freeAddr(t)
	a := startWorkerProc(t, "worker A", bin, workerArgs(healthA)...)
	a.waitFor(t, "ready line", func() bool { return a.count("ready") == 1 })
	a.waitFor(t, "200 from /readyz", func() bool { return readyStatus(healthA) == http.StatusOK })

	// The load goes on through the deploy.
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for range total - slow - 50 {
			enqueue(20)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	a.waitFor(t, "30 runs done", func() bool { return a.count("ran ") >= 30 && a.count("start ") >= slow })

	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Readiness fails first, while the worker still drains (its slow
	// handlers hold it for the grace of 1 s).
	a.waitFor(t, "503 from /readyz after SIGTERM", func() bool { return readyStatus(healthA) == http.StatusServiceUnavailable })
	select {
	case err := <-a.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("worker A did not exit within a minute of SIGTERM")
	}
	if n := a.count("handed back "); n < 1 {
		t.Errorf("worker A handed back %d runs, want its slow ones (it was running them at SIGTERM)", n)
	}
	if n := a.count("stopped: "); n != 1 {
		t.Errorf("worker A printed %d stopped lines, want 1", n)
	}

	b := startWorkerProc(t, "worker B", bin, workerArgs(freeAddr(t))...)
	<-loadDone
	mu.Lock()
	all := append([]string(nil), ids...)
	mu.Unlock()
	if len(all) != total {
		t.Fatalf("enqueued %d runs, want %d", len(all), total)
	}
	for _, id := range all {
		r, err := p.Wait(ctx, id)
		if err != nil {
			t.Fatalf("run %s: %v", id, err)
		}
		if r.State != jetflow.Success || r.Attempts != 1 {
			t.Errorf("run %s: %s after %d attempts, want success after 1", id, r.State, r.Attempts)
		}
	}
	b.stop(t)

	ran := map[string]int{}
	for _, proc := range []*workerProc{a, b} {
		for _, l := range proc.output() {
			if rest, ok := strings.CutPrefix(l, "ran "); ok {
				id, _, _ := strings.Cut(rest, " ")
				ran[id]++
			}
		}
	}
	for _, id := range all {
		if ran[id] != 1 {
			t.Errorf("run %s ran to the end %d times, want once", id, ran[id])
		}
	}
	if len(ran) != total {
		t.Errorf("%d runs ran, want %d", len(ran), total)
	}
	t.Logf("worker A: %d ran, %d handed back; worker B: %d ran", a.count("ran "), a.count("handed back "), b.count("ran "))
}
