package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-dev/jetflow/cmd/jetflow/internal/demo"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
)

// restartable is an embedded server that a test stops and starts again on
// the same port and data, as an operator restarts NATS.
type restartable struct {
	t    *testing.T
	o    embedded.Options
	s    *embedded.Server
	URL  string
	Addr string // host:port, as the CLI's messages name it
}

func startRestartable(t *testing.T, o embedded.Options) *restartable {
	t.Helper()
	o.Dir, o.SyncEvery = t.TempDir(), testSyncEvery
	r := &restartable{t: t, o: o}
	r.start()
	r.o.Port = r.s.Addr().(*net.TCPAddr).Port
	r.Addr = "127.0.0.1:" + strconv.Itoa(r.o.Port)
	r.URL = "nats://" + r.Addr
	t.Cleanup(func() {
		if r.s != nil {
			r.s.Stop()
		}
	})
	return r
}

func (r *restartable) start() {
	r.t.Helper()
	s, err := embedded.Start(r.o)
	if err != nil {
		r.t.Fatal(err)
	}
	r.s = s
}

func (r *restartable) stop() {
	r.s.Stop()
	r.s = nil
}

// producer connects a producer of its own (another process), provisioning
// the streams; it reconnects across restarts.
func (r *restartable) producer(ctx context.Context) *producer.Producer {
	r.t.Helper()
	nc, err := r.s.Connect()
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		r.t.Fatal(err)
	}
	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

// fastReconnect makes the CLI's reconnect attempts 5 ms apart, a one-shot
// command's budget 20 of them, and counts the failed ones.
func fastReconnect(ctx context.Context) (context.Context, *atomic.Int64) {
	var failed atomic.Int64
	return withReconnectPolicy(ctx, reconnectPolicy{wait: 5 * time.Millisecond, attempts: 20, failed: func() { failed.Add(1) }}), &failed
}

// bgCLI is a command line run in the background as main runs it.
type bgCLI struct {
	out, errw syncBuffer
	done      chan struct{}
	code      int
}

func startCLI(t *testing.T, ctx context.Context, args ...string) *bgCLI {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	b := &bgCLI{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.code = runMain(withOutput(ctx, &b.out, &b.errw), args)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-b.done:
		case <-time.After(30 * time.Second):
			t.Errorf("jetflow %s did not stop within 30 s", strings.Join(args, " "))
		}
	})
	return b
}

// exit waits for the command to end and returns its exit code.
func (b *bgCLI) exit(t *testing.T, within time.Duration, what string) int {
	t.Helper()
	select {
	case <-b.done:
		return b.code
	case <-time.After(within):
		t.Fatalf("%s: still running after %s\nstdout:\n%s\nstderr:\n%s", what, within, b.out.String(), b.errw.String())
	}
	return 0
}

func (b *bgCLI) running(t *testing.T, what string) {
	t.Helper()
	select {
	case <-b.done:
		t.Fatalf("%s: the command ended (exit %d)\nstdout:\n%s\nstderr:\n%s", what, b.code, b.out.String(), b.errw.String())
	default:
	}
}

// httpStatus is the status of GET url (0 if it did not answer).
func httpStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// The dashboard stays up through an outage longer than nats.go's default
// reconnect budget, says once that it lost the server and when it is back,
// and answers again.
func TestDashboardRecoversFromALongOutage(t *testing.T) {
	t.Parallel()
	srv := startRestartable(t, embedded.Options{})
	ctx := testCtx(t)
	p := srv.producer(ctx)
	if _, err := p.RunAfter(ctx, time.Hour, demo.Hello.With(demo.HelloArgs{Name: "outage"})); err != nil {
		t.Fatal(err)
	}
	cctx, failed := fastReconnect(ctx)
	d := startCLI(t, cctx, "dashboard", "--url", srv.URL, "--listen", "127.0.0.1:0")
	url := waitDashboard(t, &d.out) + "api/runs"
	if code := httpStatus(url); code != http.StatusOK {
		t.Fatalf("GET %s: %d", url, code)
	}

	srv.stop()
	lost := "jetflow: disconnected from " + srv.URL + ": "
	testserver.Eventually(t, 20*time.Second, "the disconnect line", func() bool {
		return strings.Contains(d.errw.String(), lost) && strings.Contains(d.errw.String(), "; reconnecting\n")
	})
	// Three times the attempts a one-shot command gets, and on.
	testserver.Eventually(t, 30*time.Second, "60 failed reconnect attempts", func() bool { return failed.Load() >= 60 })
	d.running(t, "dashboard during the outage")

	srv.start()
	testserver.Eventually(t, 30*time.Second, "the reconnect line", func() bool {
		return strings.Contains(d.errw.String(), "jetflow: reconnected to "+srv.URL+"\n")
	})
	testserver.Eventually(t, 30*time.Second, "the dashboard answering again", func() bool { return httpStatus(url) == http.StatusOK })
	if n := strings.Count(d.errw.String(), "disconnected from"); n != 1 {
		t.Errorf("%d disconnect lines, want 1:\n%s", n, d.errw.String())
	}
	if strings.Contains(d.errw.String(), "connection closed") {
		t.Errorf("stderr:\n%s", d.errw.String())
	}
	d.running(t, "dashboard after the outage")
}

// runs watch waits out an outage (longer than a watch's consumer
// heartbeat and than nats.go's default budget) with one line about it, no
// "consumer not active" every few seconds, and sees the run end once the
// server is back.
func TestRunsWatchAcrossAnOutage(t *testing.T) {
	t.Parallel()
	srv := startRestartable(t, embedded.Options{})
	ctx := testCtx(t)
	p := srv.producer(ctx)
	id, err := p.RunAfter(ctx, time.Hour, demo.Hello.With(demo.HelloArgs{Name: "watched"}))
	if err != nil {
		t.Fatal(err)
	}
	cctx, failed := fastReconnect(ctx)
	w := startCLI(t, cctx, "runs", "watch", id, "--url", srv.URL)
	testserver.Eventually(t, 20*time.Second, "the watch's first line", func() bool { return strings.Contains(w.out.String(), id) })

	srv.stop()
	down := time.Now()
	testserver.Eventually(t, 20*time.Second, "the disconnect line", func() bool {
		return strings.Contains(w.errw.String(), "jetflow: disconnected from "+srv.URL+": ")
	})
	testserver.Eventually(t, 30*time.Second, "60 failed reconnect attempts", func() bool { return failed.Load() >= 60 })
	// The watch's ordered consumer misses its heartbeats while the server
	// is down: nats.go checks every 10 s and reports the second check on.
	testserver.Eventually(t, 40*time.Second, "an outage of 25 s", func() bool { return time.Since(down) > 25*time.Second })
	w.running(t, "runs watch during the outage")

	srv.start()
	testserver.Eventually(t, 30*time.Second, "the reconnect line", func() bool {
		return strings.Contains(w.errw.String(), "jetflow: reconnected to "+srv.URL+"\n")
	})
	testserver.Eventually(t, 30*time.Second, "the cancel", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return p.Cancel(cctx, id) == nil
	})
	if code := w.exit(t, 30*time.Second, "runs watch after the server came back"); code != exitRunCanceled {
		t.Errorf("exit %d, want %d (canceled)\nstdout:\n%s\nstderr:\n%s", code, exitRunCanceled, w.out.String(), w.errw.String())
	}
	errw := w.errw.String()
	t.Logf("runs watch across an outage:\n%s%s", w.out.String(), errw)
	if n := strings.Count(errw, "disconnected from"); n != 1 {
		t.Errorf("%d disconnect lines, want 1:\n%s", n, errw)
	}
	if strings.Contains(errw, "consumer not active") || !strings.Contains(errw, "run "+id+" canceled") {
		t.Errorf("stderr:\n%s", errw)
	}
}

// A long-running command whose connection closes anyway (here: the server
// comes back refusing its login) ends with an error that says so, instead
// of staying up broken.
func TestLongRunningCommandsEndWhenTheConnectionCloses(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"dashboard", "runs watch"} {
		t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) {
			t.Parallel()
			srv := startRestartable(t, embedded.Options{User: "op", Password: "first-pass-0123"})
			ctx := testCtx(t)
			p := srv.producer(ctx)
			id, err := p.RunAfter(ctx, time.Hour, demo.Hello.With(demo.HelloArgs{}))
			if err != nil {
				t.Fatal(err)
			}
			login := []string{"--url", srv.URL, "--user", "op", "--password", "first-pass-0123"}
			cctx, _ := fastReconnect(ctx)
			var c *bgCLI
			if name == "dashboard" {
				c = startCLI(t, cctx, append([]string{"dashboard", "--listen", "127.0.0.1:0"}, login...)...)
				waitDashboard(t, &c.out)
			} else {
				c = startCLI(t, cctx, append([]string{"runs", "watch", id}, login...)...)
				testserver.Eventually(t, 20*time.Second, "the watch's first line", func() bool { return strings.Contains(c.out.String(), id) })
			}
			srv.stop()
			srv.o.Password = "second-pass-0123"
			srv.start()
			if code := c.exit(t, 30*time.Second, name+" refused on reconnect"); code != exitError {
				t.Errorf("exit %d, want %d", code, exitError)
			}
			errw := c.errw.String()
			t.Logf("%s, login refused on reconnect:\n%s", name, errw)
			want := "jetflow: " + strings.Fields(name)[0] + ": lost the connection to " + srv.URL
			if name == "runs watch" {
				want = "jetflow: watch of run " + id + " ended before the run did: lost the connection to " + srv.URL
			}
			if !strings.Contains(errw, want) || !strings.Contains(errw, "authorization violation") {
				t.Errorf("stderr lacks %q and the reason:\n%s", want, errw)
			}
			if strings.Contains(errw, "first-pass-0123") {
				t.Errorf("stderr shows the password:\n%s", errw)
			}
		})
	}
}

// A one-shot command keeps a bounded reconnect budget, and its error
// names the connection it lost.
func TestOneShotCommandNamesTheLostConnection(t *testing.T) {
	t.Parallel()
	srv := startRestartable(t, embedded.Options{})
	ctx := testCtx(t)
	p := srv.producer(ctx)
	id, err := p.RunAfter(ctx, time.Hour, demo.Hello.With(demo.HelloArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	connected, serverDown := make(chan struct{}), make(chan struct{})
	// A one-shot command as runs get is, that reads the run again once the
	// server has gone.
	run := commandRun("test-get-twice", func(ctx context.Context, args []string) error {
		fs := flag.NewFlagSet("test-get-twice", flag.ContinueOnError)
		var cf connFlags
		cf.add(fs)
		if err := fs.Parse(args); err != nil {
			return err
		}
		c, err := cf.client(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.getRun(ctx, id); err != nil {
			return err
		}
		close(connected)
		<-serverDown
		_, err = c.getRun(ctx, id)
		return err
	})
	cctx, _ := fastReconnect(ctx)
	var out, errw syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(withOutput(cctx, &out, &errw), []string{"--url", srv.URL}) }()
	<-connected
	srv.stop()
	close(serverDown)
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a one-shot command still running 30 s after its server went away")
	}
	if err == nil || !strings.Contains(err.Error(), "lost the connection to "+srv.URL) {
		t.Fatalf("error %v, want it to name the lost connection", err)
	}
	t.Logf("one-shot command, server gone: %v\nstderr:\n%s", err, errw.String())
	if !errors.Is(err, nats.ErrConnectionClosed) && !strings.Contains(err.Error(), "(reconnecting)") {
		t.Errorf("error %v: neither closed nor reconnecting", err)
	}
}
