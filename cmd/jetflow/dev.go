package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/cmd/jetflow/internal/demo"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

func init() {
	register("dev", "embedded server + scheduler + demo worker, printing every run's changes", runDev)
}

// devOnceLimit bounds --once when --for is not given.
const devOnceLimit = 2 * time.Minute

// devID names the dev worker and scheduler, so that a restarted dev takes
// its own scheduler lease back at once and replaces its registry entries.
const devID = "jetflow-dev"

// devConfig is what dev's flags say.
type devConfig struct {
	data, host, prefix, httpAddr string
	user, password               string
	tlsCert, tlsKey, tlsCA       string
	port                         int
	portSet                      bool // --port given: a taken port is an error, not a reason to pick another
	sync                         embedded.Sync
	syncEvery, forD              time.Duration
	once, noDemo, asJSON         bool
	sec                          dashboardSecurity
}

func runDev(ctx context.Context, args []string) error {
	c, err := parseDevFlags(ctx, args)
	if err != nil {
		return err
	}
	out := &lockedWriter{w: stdout(ctx)}
	if c.asJSON {
		// Text to stderr; stdout carries only the JSON lines.
		out = &lockedWriter{w: stderr(ctx)}
	}
	dir, err := filepath.Abs(c.data)
	if err != nil {
		return fmt.Errorf("dev: --data %s: %w", c.data, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	unlock, err := lockDataDir(dir)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	defer unlock()
	srv, opts, err := startDevServer(ctx, c, dir, out)
	if err != nil {
		return err
	}
	defer srv.Stop()
	nc, err := srv.Connect()
	if err != nil {
		return fmt.Errorf("dev: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	sc := streams.Config{Prefix: c.prefix}
	p, err := producer.New(ctx, js, producer.Config{Streams: sc})
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}

	// Watch every run before anything is scheduled, so no change is missed.
	tr := newRunTracker(out)
	if c.asJSON {
		tr.json = json.NewEncoder(&lockedWriter{w: stdout(ctx)})
	}
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watchDone, err := tr.watch(wctx, engine.Of(p).Store())
	if err != nil {
		stopWatch()
		return fmt.Errorf("dev: watch runs: %w", err)
	}
	defer func() { stopWatch(); <-watchDone }()

	s, stopRoles, err := startDevRoles(js, p, sc)
	if err != nil {
		return err
	}
	defer stopRoles(out)

	url := srv.ClientURL()
	printDevBanner(out, url, dir, c.sync, c.syncEvery, c.prefix, tr.existing(), opts)
	if tr.json != nil {
		tr.emit(map[string]any{"nats_url": url, "data": dir, "prefix": c.prefix, "unfinished_runs": tr.existing()})
	}
	if c.httpAddr != "" {
		stopHTTP, err := startDevDashboard(ctx, c, p, s, out)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}

	var seeded []demo.Scheduled
	if !c.noDemo {
		seeded, err = demo.Seed(ctx, p)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("dev: %w", err)
		}
		if ctx.Err() != nil {
			// Ctrl-C while it seeded, right after the banner: a graceful
			// stop, as any other.
			fmt.Fprintln(out, "stopping...")
			return nil
		}
	}
	return c.wait(ctx, out, tr, seeded, watchDone)
}

// parseDevFlags reads and checks dev's flags.
func parseDevFlags(ctx context.Context, args []string) (*devConfig, error) {
	c := &devConfig{}
	fs := newFlagSet(ctx, "dev", "[--data DIR] [--host H] [--port N] [--user U [--password P]] [--tlscert F --tlskey F [--tlsca F]] [--sync interval|always] [--once | --for D] [--http ADDR]")
	fs.StringVar(&c.data, "data", filepath.Join(".jetflow", "data"), "JetStream data directory")
	fs.StringVar(&c.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&c.port, "port", 4222, "client port; 0 picks a free one (a taken 4222 does too)")
	syncFlag := fs.String("sync", "interval", "fsync policy: interval (every --sync-every) or always (every write, 10-30x slower)")
	fs.DurationVar(&c.syncEvery, "sync-every", embedded.DefaultSyncEvery, "fsync interval of --sync interval")
	fs.StringVar(&c.prefix, "prefix", "jetflow", "subject and bucket prefix")
	fs.BoolVar(&c.once, "once", false, "exit once the demo runs have ended")
	fs.DurationVar(&c.forD, "for", 0, "exit after this long (with --once: at most this long)")
	fs.BoolVar(&c.noDemo, "no-demo", false, "do not schedule the demo runs at start")
	fs.StringVar(&c.httpAddr, "http", "", "also serve the web dashboard on this address, e.g. 127.0.0.1:8080")
	c.sec.add(fs, "http-")
	fs.StringVar(&c.user, "user", os.Getenv("NATS_USER"), "clients must log in as this user (with --password), or give this token (without); default: no login (env NATS_USER)")
	fs.StringVar(&c.password, "password", os.Getenv("NATS_PASSWORD"), "the password of --user (env NATS_PASSWORD)")
	fs.StringVar(&c.tlsCert, "tlscert", "", "server TLS certificate file (PEM): clients must use TLS")
	fs.StringVar(&c.tlsKey, "tlskey", "", "server TLS private key file (PEM)")
	fs.StringVar(&c.tlsCA, "tlsca", "", "certificate authority file (PEM): clients must present a certificate it signed")
	fs.BoolVar(&c.asJSON, "json", false, "print JSON lines on stdout: first {nats_url, data, prefix}, then each run change as its record (as runs watch --json); other text goes to stderr")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, usageErrorf("dev: unexpected argument %q", pos[0])
	}
	switch *syncFlag {
	case "interval":
		c.sync = embedded.SyncInterval
	case "always":
		c.sync = embedded.SyncAlways
	default:
		return nil, fmt.Errorf("dev: --sync %q: want interval or always", *syncFlag)
	}
	if c.once && c.noDemo {
		return nil, errors.New("dev: --once waits for the demo runs; it cannot go with --no-demo")
	}
	if c.syncEvery <= 0 {
		return nil, fmt.Errorf("dev: --sync-every %s: must be positive", c.syncEvery)
	}
	if c.forD < 0 {
		return nil, fmt.Errorf("dev: --for %s: must be positive", c.forD)
	}
	fs.Visit(func(f *flag.Flag) { c.portSet = c.portSet || f.Name == "port" })
	return c, nil
}

// startDevServer starts the embedded server on the data directory dir:
// on a free port when the default one is taken, with the login and TLS of
// the flags, and a warning on stderr when it serves other hosts without a
// login.
func startDevServer(ctx context.Context, c *devConfig, dir string, out io.Writer) (*embedded.Server, embedded.Options, error) {
	listen := c.port
	if listen != 0 && !portFree(c.host, listen) {
		if c.portSet {
			return nil, embedded.Options{}, fmt.Errorf("dev: port %d on %s is in use; pass another --port, or --port 0 for a free one", listen, c.host)
		}
		fmt.Fprintf(out, "port %d on %s is in use (another NATS server?); using a free port instead\n", listen, c.host)
		listen = 0
	}
	opts := embedded.Options{Dir: dir, Host: c.host, Port: listen, Sync: c.sync, SyncEvery: c.syncEvery, ServerName: devID,
		TLSCert: c.tlsCert, TLSKey: c.tlsKey, TLSCA: c.tlsCA}
	switch {
	case c.user != "" && c.password != "":
		opts.User, opts.Password = c.user, c.password
	case c.user != "":
		opts.Token = c.user
	case c.password != "":
		return nil, opts, errors.New("dev: --password needs --user")
	}
	addSecrets(ctx, c.password, opts.Token)
	srv, err := embedded.Start(opts)
	if err != nil {
		return nil, opts, fmt.Errorf("dev: start server: %w", err)
	}
	if !isLoopback(c.host) && !opts.Secured() {
		where := c.host
		if isUnspecified(c.host) || c.host == "" {
			where = "every interface (" + c.host + ")"
		}
		fmt.Fprintf(stderr(ctx), "\nWARNING: jetflow dev serves NATS with JetStream on %s WITHOUT ANY LOGIN:\n"+
			"anyone who can reach port %d can read, enqueue, cancel and delete runs and every stream.\n"+
			"Set --user and --password (or --user TOKEN), with --tlscert and --tlskey, or keep --host 127.0.0.1.\n\n", where, srv.Addr().(*net.TCPAddr).Port)
	}
	return srv, opts, nil
}

// startDevRoles starts the demo worker, the scheduler and the triggers'
// runner, with a context of their own: the returned stop stops them
// gracefully, printing to out.
func startDevRoles(js jetstream.JetStream, p *producer.Producer, sc streams.Config) (*scheduler.Scheduler, func(out io.Writer), error) {
	ctx := context.Background()
	w, err := worker.New(ctx, js, worker.Config{Streams: sc, ID: devID})
	if err != nil {
		return nil, nil, fmt.Errorf("dev: %w", err)
	}
	if err := demo.Register(w); err != nil {
		return nil, nil, fmt.Errorf("dev: %w", err)
	}
	s, err := scheduler.New(ctx, js, scheduler.Config{Streams: sc, ID: devID})
	if err != nil {
		return nil, nil, fmt.Errorf("dev: %w", err)
	}
	if err := w.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("dev: start worker: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		stopQuietly(w.Stop)
		return nil, nil, fmt.Errorf("dev: start scheduler: %w", err)
	}
	// Triggers added at run time (jetflow triggers add) run here.
	trig := trigger.New(p, trigger.Config{ID: devID})
	if err := trig.Start(ctx); err != nil {
		stopQuietly(w.Stop)
		stopQuietly(s.Stop)
		return nil, nil, fmt.Errorf("dev: start triggers: %w", err)
	}
	stop := func(out io.Writer) {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := trig.Stop(sctx); err != nil {
			fmt.Fprintf(out, "triggers stop: %v\n", err)
		}
		if err := w.Stop(sctx); err != nil {
			fmt.Fprintf(out, "worker stop: %v\n", err)
		}
		if err := s.Stop(sctx); err != nil {
			fmt.Fprintf(out, "scheduler stop: %v\n", err)
		}
		fmt.Fprintln(out, "jetflow dev stopped")
	}
	registerDevHealth(w, s)
	return s, stop, nil
}

// startDevDashboard serves the dashboard on --http.
func startDevDashboard(ctx context.Context, c *devConfig, p *producer.Producer, s *scheduler.Scheduler, out io.Writer) (func(), error) {
	dcfg, err := c.sec.config(c.httpAddr)
	if err != nil {
		return nil, fmt.Errorf("dev: --http: %w", err)
	}
	dcfg.Crons = s.Crons()
	dcfg.Steps = workflow.StepsFunc(p)
	dout := out
	if c.asJSON {
		c.sec.json, dout = true, stdout(ctx)
	}
	ctx = withHealth(ctx, devHealthOf(s)) // the worker's and scheduler's probes (health.go)
	stop, err := startDashboard(withOutput(ctx, dout, stderr(ctx)), c.httpAddr, p, dcfg, c.sec)
	if err != nil {
		return nil, fmt.Errorf("dev: %w", err)
	}
	return stop, nil
}

// wait runs until Ctrl-C, --for, or with --once the end of the seeded
// demo runs.
func (c *devConfig) wait(ctx context.Context, out io.Writer, tr *runTracker, seeded []demo.Scheduled, watchDone <-chan struct{}) error {
	var deadline <-chan time.Time
	limit := c.forD
	if c.once && limit == 0 {
		limit = devOnceLimit
	}
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		deadline = t.C
	}
	for {
		if c.once {
			if done, sum := tr.ended(seeded); done {
				fmt.Fprintf(out, "demo runs ended: %s\n", sum)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "stopping...")
			return nil
		case <-deadline:
			if c.once {
				_, sum := tr.ended(seeded)
				return fmt.Errorf("dev: demo runs did not all end within %s: %s", limit, sum)
			}
			return nil
		case <-tr.changed:
		case <-watchDone:
			return errors.New("dev: the runs watch ended unexpectedly")
		}
	}
}

func printDevBanner(out io.Writer, url, dir string, sync embedded.Sync, every time.Duration, prefix string, existing int, o embedded.Options) {
	mode := "interval: fsync every " + every.String()
	if sync == embedded.SyncAlways {
		mode = "always: fsync before every ack"
	}
	cmd := "go run ./cmd/jetflow"
	var b strings.Builder
	fmt.Fprintf(&b, "jetflow dev: NATS server with JetStream at %s\n", url)
	fmt.Fprintf(&b, "  data       %s (sync %s)", dir, mode)
	if existing > 0 {
		fmt.Fprintf(&b, ", %d unfinished runs from earlier", existing)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  worker     serves %s\n", strings.Join(demo.Names, ", "))
	b.WriteString("  scheduler  delayed runs, retries, repair sweep\n\n")
	b.WriteString("In another terminal:\n")
	fmt.Fprintf(&b, "  export JETFLOW_URL=%s\n", url)
	switch {
	case o.User != "":
		fmt.Fprintf(&b, "  # and log in: pass --user %s --password <the --password value> (or NATS_USER, NATS_PASSWORD)\n", o.User)
	case o.Token != "":
		b.WriteString("  # and log in: pass --user <the token> (or NATS_USER)\n")
	}
	if o.TLSCert != "" {
		b.WriteString("  # with TLS: --tlsca <the CA of the server's certificate>")
		if o.TLSCA != "" {
			b.WriteString(" --tlscert <client cert> --tlskey <client key>")
		}
		b.WriteString("\n")
	}
	if prefix != "jetflow" {
		fmt.Fprintf(&b, "  # and pass --prefix %s to every command\n", prefix)
	}
	fmt.Fprintf(&b, "  %s runs list\n", cmd)
	fmt.Fprintf(&b, "  %s enqueue demo.hello '{\"name\":\"you\"}' --after 3s\n", cmd)
	fmt.Fprintf(&b, "  %s runs watch <id>\n", cmd)
	fmt.Fprintf(&b, "  %s runs get <id>\n", cmd)
	fmt.Fprintf(&b, "  %s functions list\n", cmd)
	b.WriteString("Ctrl-C stops.\n\n")
	_, _ = io.WriteString(out, b.String())
}

// portFree reports whether host:port can be listened on.
func portFree(host string, port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close() // a probe: the port is free whatever its close says
	return true
}

func stopQuietly(stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = stop(ctx) // on the way out after an earlier error, which is the one to report
}

// lockedWriter serializes writes from the watch goroutine and the command.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// runTracker prints a line for every notable change of every run and
// remembers the states of the runs it saw.
type runTracker struct {
	out     io.Writer
	changed chan struct{}
	// json, when set, takes each change as a run record (--json).
	json *json.Encoder
	jmu  sync.Mutex

	mu         sync.Mutex
	live       map[string]*jetflow.Run  // runs not yet terminal, last record seen
	endedState map[string]jetflow.State // terminal states seen since start
	loaded     int                      // unfinished runs found at start
}

func newRunTracker(out io.Writer) *runTracker {
	return &runTracker{out: out, changed: make(chan struct{}, 1), live: map[string]*jetflow.Run{}, endedState: map[string]jetflow.State{}}
}

// watch follows the runs bucket. It returns once the records that exist
// already are loaded (they are not printed); the returned channel is closed
// when the watch ends.
func (t *runTracker) watch(ctx context.Context, st *kv.Store) (<-chan struct{}, error) {
	kw, err := st.Runs().WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	loaded := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = kw.Stop() }()
		initial := true
		for {
			select {
			case <-ctx.Done():
				if initial {
					close(loaded)
				}
				return
			case e, ok := <-kw.Updates():
				if !ok {
					if initial {
						close(loaded)
					}
					return
				}
				if e == nil {
					if initial {
						initial = false
						t.mu.Lock()
						t.loaded = len(t.live)
						t.mu.Unlock()
						close(loaded)
					}
					continue
				}
				if e.Operation() != jetstream.KeyValuePut {
					continue
				}
				r, err := kv.Decode(e.Value(), e.Revision())
				if err != nil {
					fmt.Fprintf(t.out, "%s  undecodable run record %s: %s\n", time.Now().Format("15:04:05.000"), printable(e.Key()), printable(err.Error()))
					continue
				}
				t.apply(r, !initial)
			}
		}
	}()
	select {
	case <-loaded:
		return done, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (t *runTracker) apply(r *jetflow.Run, print bool) {
	t.mu.Lock()
	prev := t.live[r.ID]
	if r.State.Terminal() {
		delete(t.live, r.ID)
		if print {
			t.endedState[r.ID] = r.State
		}
	} else {
		t.live[r.ID] = r
	}
	t.mu.Unlock()
	if !print {
		return
	}
	if prev == nil || notable(prev, r) {
		if t.json != nil {
			t.emit(r)
		} else {
			fmt.Fprintln(t.out, describeChange(prev, r))
		}
	}
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// existing is the number of unfinished runs found in the data directory.
func (t *runTracker) existing() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.loaded
}

// ended reports whether every run in runs has ended, and a summary such as
// "4 success, 1 failed".
func (t *runTracker) ended(runs []demo.Scheduled) (bool, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	counts := map[jetflow.State]int{}
	all := true
	for _, s := range runs {
		st, ok := t.endedState[s.ID]
		if !ok {
			all = false
			st = "unfinished"
		}
		counts[st]++
	}
	var parts []string
	for _, st := range []jetflow.State{jetflow.Success, jetflow.Failed, jetflow.Canceled, "unfinished"} {
		if counts[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
		}
	}
	return all, strings.Join(parts, ", ")
}

// notable reports whether r differs from prev in something a person
// watching cares about: state, attempts, error or progress.
func notable(prev, r *jetflow.Run) bool {
	return !sameAttempt(prev, r) || prev.Error != r.Error || !sameProgress(prev.Progress, r.Progress)
}

// emit writes v as one JSON line (--json).
func (t *runTracker) emit(v any) {
	t.jmu.Lock()
	defer t.jmu.Unlock()
	// A stdout gone (a closed pipe) leaves nobody to tell: the runs go on.
	_ = t.json.Encode(v)
}
