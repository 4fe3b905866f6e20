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

func runDev(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "dev", "[--data DIR] [--host H] [--port N] [--user U [--password P]] [--tlscert F --tlskey F [--tlsca F]] [--sync interval|always] [--once | --for D] [--http ADDR]")
	data := fs.String("data", filepath.Join(".jetflow", "data"), "JetStream data directory")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 4222, "client port; 0 picks a free one (a taken 4222 does too)")
	syncFlag := fs.String("sync", "interval", "fsync policy: interval (every --sync-every) or always (every write, 10-30x slower)")
	syncEvery := fs.Duration("sync-every", 10*time.Millisecond, "fsync interval of --sync interval")
	prefix := fs.String("prefix", "jetflow", "subject and bucket prefix")
	once := fs.Bool("once", false, "exit once the demo runs have ended")
	forD := fs.Duration("for", 0, "exit after this long (with --once: at most this long)")
	noDemo := fs.Bool("no-demo", false, "do not schedule the demo runs at start")
	httpAddr := fs.String("http", "", "also serve the web dashboard on this address, e.g. 127.0.0.1:8080")
	var sec dashboardSecurity
	sec.add(fs, "http-")
	user := fs.String("user", os.Getenv("NATS_USER"), "clients must log in as this user (with --password), or give this token (without); default: no login (env NATS_USER)")
	password := fs.String("password", os.Getenv("NATS_PASSWORD"), "the password of --user (env NATS_PASSWORD)")
	tlsCert := fs.String("tlscert", "", "server TLS certificate file (PEM): clients must use TLS")
	tlsKey := fs.String("tlskey", "", "server TLS private key file (PEM)")
	tlsCA := fs.String("tlsca", "", "certificate authority file (PEM): clients must present a certificate it signed")
	asJSON := fs.Bool("json", false, "print JSON lines on stdout: first {nats_url, data, prefix}, then each run change as its record (as runs watch --json); other text goes to stderr")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("dev: unexpected argument %q", pos[0])
	}
	var syncMode embedded.Sync
	switch *syncFlag {
	case "interval":
		syncMode = embedded.SyncInterval
	case "always":
		syncMode = embedded.SyncAlways
	default:
		return fmt.Errorf("dev: --sync %q: want interval or always", *syncFlag)
	}
	if *once && *noDemo {
		return errors.New("dev: --once waits for the demo runs; it cannot go with --no-demo")
	}
	if *syncEvery <= 0 {
		return fmt.Errorf("dev: --sync-every %s: must be positive", *syncEvery)
	}
	if *forD < 0 {
		return fmt.Errorf("dev: --for %s: must be positive", *forD)
	}
	portSet := false
	fs.Visit(func(f *flag.Flag) { portSet = portSet || f.Name == "port" })

	out := &lockedWriter{w: stdout(ctx)}
	if *asJSON {
		// Text to stderr; stdout carries only the JSON lines.
		out = &lockedWriter{w: stderr(ctx)}
	}
	dir, err := filepath.Abs(*data)
	if err != nil {
		return fmt.Errorf("dev: --data %s: %w", *data, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	unlock, err := lockDataDir(dir)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	defer unlock()

	listen := *port
	if listen != 0 && !portFree(*host, listen) {
		if portSet {
			return fmt.Errorf("dev: port %d on %s is in use; pass another --port, or --port 0 for a free one", listen, *host)
		}
		fmt.Fprintf(out, "port %d on %s is in use (another NATS server?); using a free port instead\n", listen, *host)
		listen = 0
	}
	opts := embedded.Options{Dir: dir, Host: *host, Port: listen, Sync: syncMode, SyncEvery: *syncEvery, ServerName: devID,
		TLSCert: *tlsCert, TLSKey: *tlsKey, TLSCA: *tlsCA}
	switch {
	case *user != "" && *password != "":
		opts.User, opts.Password = *user, *password
	case *user != "":
		opts.Token = *user
	case *password != "":
		return errors.New("dev: --password needs --user")
	}
	addSecrets(ctx, *password, opts.Token)
	srv, err := embedded.Start(opts)
	if err != nil {
		return fmt.Errorf("dev: start server: %w", err)
	}
	defer srv.Stop()
	url := srv.ClientURL()
	if !isLoopback(*host) && !opts.Secured() {
		where := *host
		if isUnspecified(*host) || *host == "" {
			where = "every interface (" + *host + ")"
		}
		fmt.Fprintf(stderr(ctx), "\nWARNING: jetflow dev serves NATS with JetStream on %s WITHOUT ANY LOGIN:\n"+
			"anyone who can reach port %d can read, enqueue, cancel and delete runs and every stream.\n"+
			"Set --user and --password (or --user TOKEN), with --tlscert and --tlskey, or keep --host 127.0.0.1.\n\n", where, srv.Addr().(*net.TCPAddr).Port)
	}

	nc, err := srv.Connect()
	if err != nil {
		return fmt.Errorf("dev: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	sc := streams.Config{Prefix: *prefix}
	p, err := producer.New(ctx, js, producer.Config{Streams: sc})
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}

	// Watch every run before anything is scheduled, so no change is missed.
	tr := newRunTracker(out)
	if *asJSON {
		tr.json = json.NewEncoder(&lockedWriter{w: stdout(ctx)})
	}
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watchDone, err := tr.watch(wctx, engine.Of(p).Store())
	if err != nil {
		stopWatch()
		return fmt.Errorf("dev: watch runs: %w", err)
	}
	defer func() { stopWatch(); <-watchDone }()

	w, err := worker.New(ctx, js, worker.Config{Streams: sc, ID: devID})
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	if err := demo.Register(w); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	s, err := scheduler.New(ctx, js, scheduler.Config{Streams: sc, ID: devID})
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	// Started with a context of their own: they are stopped gracefully below.
	if err := w.Start(context.Background()); err != nil {
		return fmt.Errorf("dev: start worker: %w", err)
	}
	if err := s.Start(context.Background()); err != nil {
		stopQuietly(w.Stop)
		return fmt.Errorf("dev: start scheduler: %w", err)
	}
	// Triggers added at run time (jetflow triggers add) run here.
	trig := trigger.New(p, trigger.Config{ID: devID})
	if err := trig.Start(context.Background()); err != nil {
		stopQuietly(w.Stop)
		stopQuietly(s.Stop)
		return fmt.Errorf("dev: start triggers: %w", err)
	}
	defer func() {
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
	}()

	printDevBanner(out, url, dir, syncMode, *syncEvery, *prefix, tr.existing(), opts)
	if tr.json != nil {
		tr.emit(map[string]any{"nats_url": url, "data": dir, "prefix": *prefix, "unfinished_runs": tr.existing()})
	}
	if *httpAddr != "" {
		dcfg, err := sec.config(*httpAddr)
		if err != nil {
			return fmt.Errorf("dev: --http: %w", err)
		}
		dcfg.Crons = s.Crons()
		dcfg.Steps = workflow.StepsFunc(p)
		dout := io.Writer(out)
		if *asJSON {
			sec.json, dout = true, stdout(ctx)
		}
		hctx := withHealth(ctx, devHealth(w, s)) // the worker's and scheduler's probes (health.go)
		stopHTTP, err := startDashboard(withOutput(hctx, dout, stderr(ctx)), *httpAddr, p, dcfg, sec)
		if err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		defer stopHTTP()
	}

	var seeded []demo.Scheduled
	if !*noDemo {
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

	var deadline <-chan time.Time
	limit := *forD
	if *once && limit == 0 {
		limit = devOnceLimit
	}
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		deadline = t.C
	}
	for {
		if *once {
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
			if *once {
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
	_ = l.Close()
	return true
}

func stopQuietly(stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = stop(ctx)
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
	return prev.State != r.State || prev.Attempts != r.Attempts || prev.Error != r.Error ||
		!sameProgress(prev.Progress, r.Progress)
}

// emit writes v as one JSON line (--json).
func (t *runTracker) emit(v any) {
	t.jmu.Lock()
	defer t.jmu.Unlock()
	_ = t.json.Encode(v)
}
