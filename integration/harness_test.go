package integration_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// binDir holds the programs built for this test binary: the jfproc helper
// and nats-server. TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jetflow-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// binaries builds jfproc and nats-server once per test binary (only when a
// test needs them) and returns their paths.
func binaries(t *testing.T) (jfproc, natsServer string) {
	t.Helper()
	jfproc = filepath.Join(binDir, "jfproc")
	natsServer = filepath.Join(binDir, "nats-server")
	buildOnce.Do(func() {
		race := []string{}
		if raceEnabled {
			race = append(race, "-race")
		}
		builds := [][]string{
			append(append([]string{"build", "-o", jfproc}, race...), "./internal/jfproc"),
			{"build", "-o", natsServer, "github.com/nats-io/nats-server/v2"},
		}
		errs := make([]error, len(builds))
		var wg sync.WaitGroup
		for i, b := range builds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if out, err := exec.Command("go", b...).CombinedOutput(); err != nil {
					errs[i] = fmt.Errorf("go %s: %v\n%s", strings.Join(b, " "), err, out)
				}
			}()
		}
		wg.Wait()
		buildErr = errors.Join(errs...)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return jfproc, natsServer
}

// freePort returns a TCP port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		// The system may hand a port just closed out again: a client port
		// equal to another node's route port made a node fail to start
		// while its port answered.
		if !portsUsed[port] {
			portsUsed[port] = true
			return port
		}
	}
}

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{} // ports freePort handed out in this process
)

// syncBuffer is a bytes.Buffer safe for a process writer and a reader.
type syncBuffer = testserver.Buffer

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// natsServer is a nats-server process with JetStream on its own store dir.
type natsServer struct {
	t           *testing.T
	name        string
	port        int
	clusterPort int
	dir         string
	routes      []string
	args        []string // more nats-server arguments (a partitioned cluster's advertised proxies)
	log         *syncBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// newNATS prepares a server (not started). clusterPort 0 means standalone.
func newNATS(t *testing.T, name string, clusterPort int) *natsServer {
	t.Helper()
	s := &natsServer{t: t, name: name, port: freePort(t), clusterPort: clusterPort, dir: t.TempDir(), log: &syncBuffer{}}
	t.Cleanup(func() {
		s.stop(syscall.SIGKILL)
		if dir := os.Getenv("JETFLOW_FAULT_LOGS"); dir != "" {
			// The whole log, for diagnosis (the test's output keeps a tail).
			if err := os.WriteFile(filepath.Join(dir, "nats-"+s.name+".log"), []byte(s.log.String()), 0o644); err != nil {
				t.Logf("keep %s's log: %v", s.name, err)
			}
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", s.name, tail(s.log.String(), 4000))
		}
	})
	return s
}

// startNATS starts a standalone server and waits for JetStream.
func startNATS(t *testing.T) *natsServer {
	t.Helper()
	s := newNATS(t, "solo", 0)
	s.start()
	nc, js := connect(t, s.url())
	defer nc.Close()
	waitJetStream(t, js)
	return s
}

func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// start runs the server process (again, after stop: same port and store)
// and waits until it accepts client connections.
func (s *natsServer) start() {
	s.t.Helper()
	_, bin := binaries(s.t)
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", s.dir, "-n", s.name}
	if s.clusterPort != 0 {
		args = append(args, "--cluster_name", "jf",
			"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", s.clusterPort),
			"--routes", strings.Join(s.routes, ","))
	}
	args = append(args, s.args...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			s.t.Fatalf("%s exited at start:\n%s", s.name, tail(s.log.String(), 4000))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s does not accept connections:\n%s", s.name, tail(s.log.String(), 4000))
		}
	}
}

// stop sends sig and waits for the process to exit (SIGKILL after 30 s).
func (s *natsServer) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// signal sends sig to the running server process (SIGSTOP, SIGCONT).
func (s *natsServer) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		s.t.Fatalf("%s: not running", s.name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("%s: signal %v: %v", s.name, sig, err)
	}
}

// connect opens a client connection that reconnects forever, closed at
// cleanup.
func connect(t *testing.T, urls ...string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// waitJetStream waits until JetStream answers on js.
func waitJetStream(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	testserver.Eventually(t, 30*time.Second, "JetStream available", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
}

// retry calls f until it succeeds (a cluster may be electing leaders).
func retry(t *testing.T, within time.Duration, what string, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %s: %v", what, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// proc is a jfproc process. Its stdout marker lines are collected.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}

	mu     sync.Mutex
	lines  []string
	notify chan struct{} // closed and replaced at each new line
}

// startProc runs jfproc with args and waits for its READY marker.
func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	bin, _ := binaries(t)
	p := &proc{t: t, name: name, stderr: &syncBuffer{}, exited: make(chan struct{}), notify: make(chan struct{})}
	startCmd(t, p, exec.Command(bin, args...))
	p.waitLine(60*time.Second, func(l string) bool { return strings.HasPrefix(l, "READY ") })
	return p
}

// startCmd starts cmd as process p, collecting its stdout lines, and kills
// it when the test ends.
func startCmd(t *testing.T, p *proc, cmd *exec.Cmd) {
	t.Helper()
	p.cmd = cmd
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.notify)
			p.notify = make(chan struct{})
			p.mu.Unlock()
		}
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		errs := p.stderr.String()
		if strings.Contains(errs, "WARNING: DATA RACE") {
			t.Errorf("%s: data race:\n%s", p.name, tail(errs, 8000))
		} else if t.Failed() {
			t.Logf("%s stderr:\n%s", p.name, tail(errs, 4000))
		}
	})
}

// waitLine waits for a stdout line matching ok and returns it.
func (p *proc) waitLine(within time.Duration, ok func(string) bool) string {
	p.t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	seen := 0
	for {
		p.mu.Lock()
		lines, notify := p.lines[seen:], p.notify
		seen = len(p.lines)
		p.mu.Unlock()
		for _, l := range lines {
			if ok(l) {
				return l
			}
		}
		select {
		case <-notify:
		case <-p.exited:
			// Read what came before the exit, then give up.
			p.mu.Lock()
			rest := p.lines[seen:]
			p.mu.Unlock()
			for _, l := range rest {
				if ok(l) {
					return l
				}
			}
			p.t.Fatalf("%s exited before the expected line:\n%s", p.name, tail(p.stderr.String(), 4000))
		case <-deadline.C:
			p.t.Fatalf("%s: no expected line within %s; stdout tail %q", p.name, within, p.snapshot())
		}
	}
}

func (p *proc) snapshot() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// markers counts the marker lines of kind ("STARTED", "SUCCESS") per run id.
func markers(kind string, ps ...*proc) map[string]int {
	n := map[string]int{}
	for _, p := range ps {
		for _, l := range p.snapshot() {
			f := strings.Fields(l)
			if len(f) >= 2 && f[0] == kind {
				n[f[1]]++
			}
		}
	}
	return n
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
}

// kill SIGKILLs the process (if alive) and waits until it is gone.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies as well, but be explicit
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// runLog watches every write of the runs bucket: the latest record of each
// run and how many terminal records were written for it. With the
// compare-and-swap on every transition, a second terminal write for one run
// would be a broken guarantee.
type runLog struct {
	mu       sync.Mutex
	last     map[string]*jetflow.Run
	terminal map[string]int
	ended    map[string]time.Time // when the watch first saw a terminal record of each run (this process's clock)
	writes   map[string][]string  // each write of each run, in short (for explanations)
}

func watchRuns(t *testing.T, js jetstream.JetStream, scfg streams.Config) *runLog {
	t.Helper()
	l := &runLog{last: map[string]*jetflow.Run{}, terminal: map[string]int{}, ended: map[string]time.Time{}, writes: map[string][]string{}}
	var w jetstream.KeyWatcher
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	retry(t, 30*time.Second, "watch runs bucket", func(c context.Context) error {
		b, err := js.KeyValue(c, scfg.WithDefaults().RunsBucket())
		if err != nil {
			return err
		}
		w, err = b.WatchAll(ctx)
		return err
	})
	go func() {
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			r, err := kv.Decode(e.Value(), e.Revision())
			if err != nil {
				continue
			}
			l.mu.Lock()
			l.writes[r.ID] = append(l.writes[r.ID], fmt.Sprintf("%s rev %d %s attempts %d owner %q beat %s",
				time.Now().Format("15:04:05.000"), r.Revision, r.State, r.Attempts, r.Owner, r.Heartbeat.Format("15:04:05.000")))
			if old := l.last[r.ID]; old == nil || old.Revision < r.Revision {
				l.last[r.ID] = r
			}
			if r.State.Terminal() {
				l.terminal[r.ID]++
				if _, ok := l.ended[r.ID]; !ok {
					l.ended[r.ID] = time.Now()
				}
			}
			l.mu.Unlock()
		}
	}()
	return l
}

// done reports how many of ids have a terminal record.
func (l *runLog) done(ids []string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, id := range ids {
		if r := l.last[id]; r != nil && r.State.Terminal() {
			n++
		}
	}
	return n
}

func (l *runLog) get(id string) (*jetflow.Run, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last[id], l.terminal[id]
}

// waitState waits until run id's latest record is in state st.
func (l *runLog) waitState(t *testing.T, within time.Duration, id string, st jetflow.State) *jetflow.Run {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if r, _ := l.get(id); r != nil && r.State == st {
			return r
		}
		if time.Now().After(deadline) {
			r, _ := l.get(id)
			t.Fatalf("run %s not %s within %s (last record: %+v)", id, st, within, r)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitDone waits until every one of ids has a terminal record.
func (l *runLog) waitDone(t *testing.T, within time.Duration, ids []string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		n := l.done(ids)
		if n == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			var missing []string
			for _, id := range ids {
				if r, _ := l.get(id); r == nil || !r.State.Terminal() {
					missing = append(missing, id)
					if len(missing) == 5 {
						break
					}
				}
			}
			t.Fatalf("after %s only %d of %d runs are terminal; e.g. %v", within, n, len(ids), missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMarkers waits until every id has a kind marker line from one of ps:
// a process prints its marker before jetflow writes the record, but the
// test reads its output asynchronously, so a terminal record can be seen
// before the line that preceded it.
func waitMarkers(t *testing.T, within time.Duration, kind string, ids []string, ps ...*proc) {
	t.Helper()
	testserver.Eventually(t, within, kind+" markers of every run", func() bool {
		m := markers(kind, ps...)
		for _, id := range ids {
			if m[id] == 0 {
				return false
			}
		}
		return true
	})
}
