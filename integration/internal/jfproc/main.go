// Command jfproc runs one jetflow role (worker, scheduler, producer, pool (a
// pool worker and dispatcher with a start/end ledger, see pool.go), or load:
// a producer of the fault tests' mix of runs) as its own OS process, so that
// integration tests can SIGKILL, SIGSTOP and restart it. It reports what it does as marker lines on stdout, one per event:
//
//	READY <role> <id>                 the role has started
//	STARTED <run id> <attempt>        a handler began
//	SUCCESS <run id> <attempt>        a handler is about to return nil
//	LEADER <id>                       the scheduler holds the lease
//	STANDBY <id>                      the scheduler lost (or waits for) the lease
//	ENQUEUED <run id> [<class> [exists]] the producer (or load) scheduled a run
//	                                  (exists: the call answered ErrAlreadyExists)
//	FAILED <i> <class> <ms> <error>   a load call failed (without -retry)
//	DONE [<accepted> <failed>]        the producer has scheduled every run
//	STATS heap=<bytes> goroutines=<n> the worker's heap after a GC (on
//	                                  SIGUSR1, and every -stats-every)
//
// With -trigger, the worker also runs a trigger (package trigger) that
// turns the messages of -trigger-stream on -trigger-subject into runs of
// its first function: a message with a Bad header is refused by the
// mapping (a failed run), one with a Skip header skipped by the filter.
//
// With -ledger, every handler execution appends "<run id> <attempt> <pid>
// <unix ns>" to that file (O_APPEND, fsynced) when it starts, before it
// returns: the record of side effects the fault tests count; and the same
// line to <ledger>.ends when it returns. The times are the process's real
// clock (time.Now), whatever -clock-offset says.
//
// With -clock-offset, the role's jetflow clock (worker, scheduler and
// producer Config.Now) is time.Now() plus that offset: a host whose clock
// is skewed.
//
// Logs (slog, text) go to stderr. SIGINT and SIGTERM stop the role
// gracefully; the test decides whether a process dies any other way.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/retrier"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Args are the arguments of every function jfproc serves. The optional
// fields script the handler (the load role sets them).
type Args struct {
	N int `json:"n"`
	// Fail: attempts up to Fail return an error (retried).
	Fail int `json:"fail,omitempty"`
	// Perm: the handler fails permanently.
	Perm bool `json:"perm,omitempty"`
	// Children: the handler schedules this many runs of Child, due now.
	Children int    `json:"children,omitempty"`
	Child    string `json:"child,omitempty"`
	// WorkMs: the handler works this long (milliseconds) before returning.
	WorkMs int `json:"workMs,omitempty"`
}

// Result is what a handler stores on success: which process ran it.
type Result struct {
	Worker  string `json:"worker"`
	Attempt int    `json:"attempt"`
}

type config struct {
	workflow    bool
	url         string
	role        string
	id          string
	function    string
	kind        string
	replicas    int
	ackWait     time.Duration
	lostAfter   time.Duration
	claimAfter  time.Duration
	concurrency int
	blockFirst  bool
	releaseFile string
	work        time.Duration

	leaseTTL       time.Duration
	repairInterval time.Duration
	repairGrace    time.Duration

	count  int
	spread time.Duration
	after  time.Duration
	idPfx  string

	ledger     string
	prefetch   int
	clockOff   time.Duration
	statsEvery time.Duration
	retrier    bool

	// worker: a trigger run beside it
	trigger        string
	triggerStream  string
	triggerSubject string
	quiet          bool

	// load role
	parallel    int
	retry       bool
	callTimeout time.Duration
	fnRetry     string
	fnAMO       string
	fnChild     string
	maxDelay    time.Duration
	workMs      int

	// updater role
	updates int
	events  bool
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", nats.DefaultURL, "NATS URLs, comma separated")
	flag.StringVar(&c.role, "role", "worker", "worker, scheduler, producer, load (a mix of runs for the fault tests), pool (see pool.go) or updater (see entity.go)")
	flag.StringVar(&c.id, "id", "", "worker or scheduler id (default: generated)")
	flag.StringVar(&c.function, "function", "it.work", "function name; a worker serves a comma-separated list, each name optionally followed by :retryable or :atmostonce")
	flag.StringVar(&c.kind, "kind", "retryable", "retryable or atmostonce (functions without a :kind suffix)")
	flag.IntVar(&c.replicas, "replicas", 1, "replicas of streams and buckets")
	flag.DurationVar(&c.ackWait, "ack-wait", 2*time.Second, "worker AckWait")
	flag.DurationVar(&c.lostAfter, "lost-after", 0, "worker LostAfter (0: the default)")
	flag.DurationVar(&c.claimAfter, "claim-after", 0, "worker Options.ClaimAfter (0: the default, negative: claim first)")
	flag.IntVar(&c.concurrency, "concurrency", 10, "worker concurrency")
	flag.BoolVar(&c.blockFirst, "block-first", false, "handler blocks forever on attempt 1")
	flag.StringVar(&c.releaseFile, "release-file", "", "handler waits until this file exists")
	flag.DurationVar(&c.work, "work", 0, "handler sleeps this long before returning")
	flag.DurationVar(&c.leaseTTL, "lease-ttl", 2*time.Second, "scheduler lease TTL")
	flag.DurationVar(&c.repairInterval, "repair-interval", 500*time.Millisecond, "scheduler repair interval")
	flag.DurationVar(&c.repairGrace, "repair-grace", 500*time.Millisecond, "scheduler repair grace")
	flag.IntVar(&c.count, "count", 1, "producer: runs to schedule")
	flag.DurationVar(&c.after, "after", 0, "producer: delay of the first run")
	flag.DurationVar(&c.spread, "spread", 0, "producer: due times spread over this span")
	flag.StringVar(&c.idPfx, "id-prefix", "run", "producer: run ids are <prefix>-<i>")
	flag.StringVar(&c.ledger, "ledger", "", "worker: append \"<run id> <attempt> <pid>\" to this file at each handler start (fsynced)")
	flag.IntVar(&c.prefetch, "prefetch", 0, "worker: Options.Prefetch of every function (0: the default)")
	flag.DurationVar(&c.clockOff, "clock-offset", 0, "worker, scheduler, producer, load: the jetflow clock (Config.Now) is time.Now() plus this")
	flag.BoolVar(&c.workflow, "workflow", false, "worker: also serve the workflows it.flow (steps a, b at-most-once, c; each appends \"<workflow id>/<step> 0 <pid>\" to the ledger and works -work long), it.sleep (sleeps an hour, then a step), it.chain and it.entity (entity.go)")
	flag.DurationVar(&c.statsEvery, "stats-every", 0, "worker: print a STATS line this often (0: only on SIGUSR1)")
	flag.StringVar(&c.trigger, "trigger", "", "worker: also run a trigger of this name starting runs of the first function (bad messages: header Bad; skipped: header Skip)")
	flag.StringVar(&c.triggerStream, "trigger-stream", "", "worker: the trigger's stream (\"\": plain subjects, captured)")
	flag.StringVar(&c.triggerSubject, "trigger-subject", "", "worker: the trigger's subject filter (or captured subject)")
	flag.BoolVar(&c.retrier, "retrier", false, "worker: also serve the retrier's internal functions")
	flag.BoolVar(&c.quiet, "quiet", false, "worker: no STARTED and SUCCESS markers")
	flag.IntVar(&c.parallel, "parallel", 4, "load: concurrent calls")
	flag.BoolVar(&c.retry, "retry", true, "load: retry a failed call until it returns an id (else report it FAILED)")
	flag.DurationVar(&c.callTimeout, "call-timeout", 5*time.Second, "load: context timeout of one call")
	flag.StringVar(&c.fnRetry, "fn-retry", "ft.retry", "load: retryable function")
	flag.StringVar(&c.fnAMO, "fn-amo", "ft.amo", "load: at-most-once function")
	flag.StringVar(&c.fnChild, "fn-child", "ft.child", "load: function of the children runs schedule")
	flag.DurationVar(&c.maxDelay, "max-delay", 3*time.Second, "load: longest delay of a delayed run")
	flag.IntVar(&c.workMs, "work-ms", 0, "load: handler work (ms) of each run")
	flag.IntVar(&c.updates, "updates", 10, "updater: valid updates to send each workflow")
	flag.BoolVar(&c.events, "events", false, "updater: send events \"tick\" (it.inbox), not updates")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "jfproc:", err)
		os.Exit(1)
	}
}

// out serializes marker lines; each is one write, so a SIGKILL never leaves
// half a line.
var outMu sync.Mutex

func marker(format string, a ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", a...)
}

// both sends each record to two handlers, each at its own level.
type both [2]slog.Handler

func (b both) Enabled(ctx context.Context, l slog.Level) bool {
	return b[0].Enabled(ctx, l) || b[1].Enabled(ctx, l)
}

func (b both) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range b {
		if h.Enabled(ctx, r.Level) {
			if err := h.Handle(ctx, r.Clone()); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b both) WithAttrs(as []slog.Attr) slog.Handler {
	return both{b[0].WithAttrs(as), b[1].WithAttrs(as)}
}

func (b both) WithGroup(name string) slog.Handler {
	return both{b[0].WithGroup(name), b[1].WithGroup(name)}
}

func run(ctx context.Context, c config) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if dir := os.Getenv("JETFLOW_FAULT_LOGS"); dir != "" {
		// Diagnosis of a fault run: every process's debug log in a file
		// of its own under dir, beside the usual output.
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%s-%s-%d.log", c.role, c.id, os.Getpid())), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer closeLedger(f)
		log = slog.New(both{log.Handler(), slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})})
	}
	nc, err := nats.Connect(c.url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.Name("jfproc-"+c.role+"-"+c.id))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	scfg := streams.Config{Replicas: c.replicas}
	fns, err := functions(c.function, c.kind)
	if err != nil {
		return err
	}
	fn := fns[0]
	// Provisioning needs a JetStream leader; on a cluster just formed it may
	// take a moment.
	setup := func(f func(ctx context.Context) error) error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := f(sctx)
			cancel()
			if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				return err
			}
			log.Info("setup retry", "error", err)
			time.Sleep(100 * time.Millisecond)
		}
	}
	switch c.role {
	case "worker":
		return runWorker(ctx, c, js, scfg, fns, log, setup)
	case "scheduler":
		return runScheduler(ctx, c, js, scfg, log, setup)
	case "producer":
		return runProducer(ctx, c, js, scfg, fn, setup)
	case "load":
		return runLoad(ctx, c, js, scfg, log, setup)
	case "pool":
		return runPool(ctx, c, js, scfg, log, setup)
	case "updater":
		return runUpdater(ctx, c, js, scfg, log, setup)
	}
	return fmt.Errorf("unknown role %q", c.role)
}

// now is the role's jetflow clock: nil (the default, time.Now) without
// -clock-offset.
func (c config) now() func() time.Time {
	if c.clockOff == 0 {
		return nil
	}
	off := c.clockOff
	return func() time.Time { return time.Now().Add(off) }
}

// functions parses -function: names separated by commas, each optionally
// followed by ":retryable" or ":atmostonce" (default kind: -kind).
func functions(list, defKind string) ([]jetflow.Function[Args], error) {
	var fns []jetflow.Function[Args]
	for _, spec := range strings.Split(list, ",") {
		name, k, _ := strings.Cut(spec, ":")
		if k == "" {
			k = defKind
		}
		kind := jetflow.Retryable
		switch k {
		case "retryable":
		case "atmostonce":
			kind = jetflow.AtMostOnce
		default:
			return nil, fmt.Errorf("unknown kind %q", k)
		}
		fn, err := jetflow.NewFunction[Args](name, jetflow.WithKind(kind))
		if err != nil {
			return nil, err
		}
		fns = append(fns, fn)
	}
	return fns, nil
}

// ledger appends one fsynced line per handler execution.
type ledger struct {
	mu   sync.Mutex
	f    *os.File
	ends *os.File
}

func openLedger(path string) (*ledger, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	ends, err := os.OpenFile(path+".ends", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &ledger{f: f, ends: ends}, nil
}

// note writes "<run id> <attempt> <pid> <unix ns>" in one write and syncs
// it: a SIGKILL right after leaves the whole line on disk or none of it.
func (l *ledger) note(id string, attempt int) error {
	if l == nil {
		return nil
	}
	return l.write(l.f, id, attempt)
}

// ended notes the end of a handler in <ledger>.ends.
func (l *ledger) ended(id string, attempt int) error {
	if l == nil {
		return nil
	}
	return l.write(l.ends, id, attempt)
}

func (l *ledger) write(f *os.File, id string, attempt int) error {
	line := fmt.Sprintf("%s %d %d %d\n", id, attempt, os.Getpid(), time.Now().UnixNano())
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := f.WriteString(line); err != nil {
		return err
	}
	return f.Sync()
}

// Flow is the workflow it.flow: three inline steps, the second at most
// once, each noted in the ledger as "<workflow id>/<step>" when it starts
// and working for work. Its result is "abc".
type Flow = workflow.Workflow[Args, string]

func flowDef(led *ledger, work time.Duration) *Flow {
	step := func(wf *workflow.Context, name string) func(ctx context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			if err := led.note(wf.ID()+"/"+name, 0); err != nil {
				os.Exit(3)
			}
			select {
			case <-ctx.Done():
				return "", context.Cause(ctx)
			case <-time.After(work):
			}
			return name, nil
		}
	}
	return workflow.Define("it.flow", func(wf *workflow.Context, in Args) (string, error) {
		a, err := workflow.Step(wf, "a", step(wf, "a"))
		if err != nil {
			return "", err
		}
		b, err := workflow.Step(wf, "b", step(wf, "b"), workflow.StepOptions{Kind: jetflow.AtMostOnce})
		if err != nil {
			return "", err
		}
		c, err := workflow.Step(wf, "c", step(wf, "c"))
		return a + b + c, err
	})
}

// sleepDef is the workflow it.sleep: a durable sleep of an hour, then a
// step. The tests start thousands and measure what they cost the worker
// while they sleep.
var sleepDef = workflow.Define("it.sleep", func(wf *workflow.Context, in Args) (int, error) {
	wf.Sleep(time.Hour)
	return workflow.Step(wf, "woke", func(context.Context) (int, error) { return in.N, nil })
})

// stats prints the heap after a GC and the goroutine count.
func stats() {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	marker("STATS heap=%d goroutines=%d", ms.HeapAlloc, runtime.NumGoroutine())
}

func runWorker(ctx context.Context, c config, js jetstream.JetStream, scfg streams.Config, fns []jetflow.Function[Args], log *slog.Logger, setup func(func(context.Context) error) error) error {
	led, err := openLedger(c.ledger)
	if err != nil {
		return err
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	var w *worker.Worker
	err = setup(func(ctx context.Context) error {
		var err error
		w, err = worker.New(ctx, js, worker.Config{Streams: scfg, Logger: log, ID: c.id, AckWait: c.ackWait, LostAfter: c.lostAfter, Concurrency: c.concurrency, Now: c.now()})
		return err
	})
	if err != nil {
		return err
	}
	id := c.id
	h := (&faultHandler{c: c, led: led, log: log}).handle
	for _, fn := range fns {
		worker.Handle(w, fn, h, worker.Options{ClaimAfter: c.claimAfter, Prefetch: c.prefetch})
	}
	fn0 := fns[0]
	if c.retrier {
		if err := retrier.New(w.Producer(), retrier.Options{}).Register(w); err != nil {
			return err
		}
	}
	if c.workflow {
		if err := workflow.Register(w, sleepDef); err != nil {
			return err
		}
		if err := workflow.Register(w, flowDef(led, c.work)); err != nil {
			return err
		}
		if err := registerEntities(w, led); err != nil {
			return err
		}
	}
	// Start's ctx is the worker's lifetime (it stops when ctx ends): the
	// process's, not setup's per-try timeout.
	if err := setup(func(context.Context) error { return w.Start(ctx) }); err != nil {
		return err
	}
	var tr *trigger.Runner
	if c.trigger != "" {
		tr = trigger.New(w.Producer(), trigger.Config{ID: id, Logger: log})
		spec := faultTriggerSpec(c)
		if c.triggerSubject != "" {
			spec.Subjects = []string{c.triggerSubject}
		}
		if err := trigger.Bind(tr, trigger.Func(fn0), spec); err != nil {
			return err
		}
		if err := setup(func(context.Context) error { return tr.Start(ctx) }); err != nil {
			return err
		}
	}
	marker("READY worker %s", id)
	var tick <-chan time.Time
	if c.statsEvery > 0 {
		t := time.NewTicker(c.statsEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-usr1:
			stats()
			continue
		case <-tick:
			stats()
			continue
		case <-ctx.Done():
		}
		break
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if tr != nil {
		_ = tr.Stop(sctx)
	}
	return w.Stop(sctx)
}

func runScheduler(ctx context.Context, c config, js jetstream.JetStream, scfg streams.Config, log *slog.Logger, setup func(func(context.Context) error) error) error {
	var s *scheduler.Scheduler
	err := setup(func(ctx context.Context) error {
		var err error
		s, err = scheduler.New(ctx, js, scheduler.Config{
			Streams: scfg, Logger: log, ID: c.id, LeaseTTL: c.leaseTTL,
			RepairInterval: c.repairInterval, RepairGrace: c.repairGrace, Now: c.now(),
		})
		return err
	})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	marker("READY scheduler %s", c.id)
	leader := false
	marker("STANDBY %s", c.id)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return s.Stop(sctx)
		case <-t.C:
			if l := s.IsLeader(); l != leader {
				leader = l
				if l {
					marker("LEADER %s", c.id)
				} else {
					marker("STANDBY %s", c.id)
				}
			}
		}
	}
}

func runProducer(ctx context.Context, c config, js jetstream.JetStream, scfg streams.Config, fn jetflow.Function[Args], setup func(func(context.Context) error) error) error {
	var p *producer.Producer
	err := setup(func(ctx context.Context) error {
		var err error
		p, err = producer.New(ctx, js, producer.Config{Streams: scfg, Now: c.now()})
		return err
	})
	if err != nil {
		return err
	}
	marker("READY producer %s", c.id)
	start := time.Now().Add(c.after)
	for i := range c.count {
		at := start
		if c.count > 1 {
			at = start.Add(c.spread * time.Duration(i) / time.Duration(c.count-1))
		}
		rid := fmt.Sprintf("%s-%d", c.idPfx, i)
		// A producer retries until its call returns an id: ErrAlreadyExists
		// means an earlier try was written.
		err := setup(func(ctx context.Context) error {
			_, err := p.RunAt(ctx, at, fn.With(Args{N: i}), producer.WithID(rid))
			if errors.Is(err, producer.ErrAlreadyExists) {
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("schedule %s: %w", rid, err)
		}
		marker("ENQUEUED %s", rid)
	}
	marker("DONE")
	return nil
}

// loadClasses is the mix the load role cycles through: run i has class
// loadClasses[i%len]. Each class says the kind, the timing, whether the id
// is a key (producer.WithID) and what the handler does.
var loadClasses = []string{
	"now", "key", "after", "at", "kids", "fail1", "amo-now", "amo-key",
	"now", "after-key", "amo-after", "kids-after", "perm", "amo-kids", "now", "fail1-key",
	"amo-now", "after", "key", "amo-at",
}

// runLoad schedules -count runs of the load mix with -parallel goroutines,
// paced over -spread. With -retry a call that fails is made again until it
// returns an id (ErrAlreadyExists means an earlier try was written);
// without, each failed call is reported and its run not counted.
func runLoad(ctx context.Context, c config, js jetstream.JetStream, scfg streams.Config, log *slog.Logger, setup func(func(context.Context) error) error) error {
	var p *producer.Producer
	err := setup(func(ctx context.Context) error {
		var err error
		p, err = producer.New(ctx, js, producer.Config{Streams: scfg, Now: c.now(), Logger: log})
		return err
	})
	if err != nil {
		return err
	}
	retryFn, err := jetflow.NewFunction[Args](c.fnRetry)
	if err != nil {
		return err
	}
	amoFn, err := jetflow.NewFunction[Args](c.fnAMO, jetflow.WithKind(jetflow.AtMostOnce))
	if err != nil {
		return err
	}
	marker("READY load %s", c.id)
	start := time.Now()
	var next, accepted, failed atomic.Int64
	var wg sync.WaitGroup
	for range max(c.parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= c.count {
					return
				}
				if c.count > 1 && c.spread > 0 {
					at := start.Add(c.spread * time.Duration(i) / time.Duration(c.count))
					select {
					case <-time.After(time.Until(at)):
					case <-ctx.Done():
						return
					}
				}
				it := loadItem(c, i, retryFn, amoFn)
				if !enqueueItem(ctx, c, p, it, log, &accepted, &failed) {
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	marker("DONE %d %d", accepted.Load(), failed.Load())
	return nil
}

// closeLedger closes a ledger file; its lines were fsynced as written, so
// a failed close is only said.
func closeLedger(f *os.File) {
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close ledger:", err)
	}
}

// faultHandler is the worker's handler of the fault tests' functions: it
// notes each start and end in the ledger, then works as its args ask.
type faultHandler struct {
	c   config
	led *ledger
	log *slog.Logger
}

func (f *faultHandler) handle(ctx context.Context, j *worker.Job[Args]) error {
	f.note(f.led.note, j)
	defer f.note(f.led.ended, j)
	if !f.c.quiet {
		marker("STARTED %s %d", j.ID(), j.Attempt())
	}
	if err := f.wait(ctx, j); err != nil {
		return err
	}
	if err := enqueueChildren(ctx, j); err != nil {
		return err
	}
	return f.outcome(j)
}

// note writes a ledger line; a missing line would make the test's count
// wrong, so a failure ends the process.
func (f *faultHandler) note(write func(string, int) error, j *worker.Job[Args]) {
	if err := write(j.ID(), j.Attempt()); err != nil {
		f.log.Error("ledger", "error", err)
		os.Exit(3)
	}
}

// wait blocks as the flags ask: forever on attempt 1 (-block-first), until
// the release file exists, then the work's time.
func (f *faultHandler) wait(ctx context.Context, j *worker.Job[Args]) error {
	if f.c.blockFirst && j.Attempt() == 1 {
		select {} // until the test kills this process
	}
	if f.c.releaseFile != "" {
		if err := waitForFile(ctx, f.c.releaseFile); err != nil {
			return err
		}
	}
	if work := f.c.work + time.Duration(j.Args.WorkMs)*time.Millisecond; work > 0 {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(work):
		}
	}
	return nil
}

func waitForFile(ctx context.Context, path string) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// enqueueChildren schedules the children the args ask for.
func enqueueChildren(ctx context.Context, j *worker.Job[Args]) error {
	if j.Args.Children == 0 {
		return nil
	}
	child, err := jetflow.NewFunction[Args](j.Args.Child)
	if err != nil {
		return jetflow.Permanent(err)
	}
	for k := range j.Args.Children {
		if _, err := j.Enqueue(ctx, child.With(Args{N: k})); err != nil {
			return fmt.Errorf("schedule child %d: %w", k, err)
		}
	}
	return nil
}

// outcome fails the attempts the args ask to fail, or succeeds.
func (f *faultHandler) outcome(j *worker.Job[Args]) error {
	if j.Attempt() <= j.Args.Fail {
		return fmt.Errorf("fault: attempt %d fails", j.Attempt())
	}
	if j.Args.Perm {
		return jetflow.Permanent(errors.New("fault: permanent"))
	}
	if err := j.SetResult(Result{Worker: f.c.id, Attempt: j.Attempt()}); err != nil {
		return err
	}
	if !f.c.quiet {
		marker("SUCCESS %s %d", j.ID(), j.Attempt())
	}
	return nil
}

// faultTriggerSpec is the trigger of -trigger: messages with a Skip header
// are skipped, those with a Bad header are bad input.
func faultTriggerSpec(c config) trigger.Spec[Args] {
	return trigger.Spec[Args]{
		Name: c.trigger, Stream: c.triggerStream,
		Filter: func(m jetstream.Msg) bool { return m.Headers().Get("Skip") == "" },
		Map: func(m jetstream.Msg) (Args, error) {
			if m.Headers().Get("Bad") != "" {
				return Args{}, errors.New("bad order")
			}
			var a Args
			err := json.Unmarshal(m.Data(), &a)
			return a, err
		},
	}
}

// item is one run of the load: what to call, how, and when.
type item struct {
	i     int
	class string
	fn    jetflow.Function[Args]
	args  Args
	opts  []producer.Option
	due   time.Time // zero: now
}

// loadItem is the run of index i: its class (loadClasses, in turn) decides
// the function, the options, the children, the failures and the due time.
func loadItem(c config, i int, retryFn, amoFn jetflow.Function[Args]) item {
	class := loadClasses[i%len(loadClasses)]
	it := item{i: i, class: class, fn: retryFn, args: Args{N: i, WorkMs: c.workMs}}
	if strings.HasPrefix(class, "amo-") {
		it.fn = amoFn
	} else {
		it.opts = append(it.opts, producer.WithMaxAttempts(10))
	}
	if strings.Contains(class, "key") || strings.HasSuffix(class, "-at") || class == "at" {
		it.opts = append(it.opts, producer.WithID(fmt.Sprintf("%s-%d", c.idPfx, i)))
	}
	if strings.Contains(class, "kids") {
		it.args.Children, it.args.Child = 2, c.fnChild
		if class == "amo-kids" {
			it.args.Children = 1
		}
	}
	it.args.Perm = class == "perm"
	if strings.HasPrefix(class, "fail1") {
		it.args.Fail = 1
	}
	if strings.Contains(class, "after") || strings.HasSuffix(class, "at") {
		span := max(c.maxDelay-200*time.Millisecond, time.Millisecond)
		it.due = time.Now().Add(200*time.Millisecond + time.Duration(i*7919)%span)
	}
	return it
}

// enqueueItem schedules it, trying again (with -retry) until a call returns
// its id; ErrAlreadyExists after a failed try means an earlier try was
// stored. It reports false when ctx ended.
func enqueueItem(ctx context.Context, c config, p *producer.Producer, it item, log *slog.Logger, accepted, failed *atomic.Int64) bool {
	var lastErr error
	for try := 0; ; try++ {
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
		var id string
		var err error
		if !it.due.IsZero() && strings.Contains(it.class, "after") {
			id, err = p.RunAfter(cctx, time.Until(it.due), it.fn.With(it.args), it.opts...)
		} else {
			id, err = p.RunAt(cctx, it.due, it.fn.With(it.args), it.opts...)
		}
		cancel()
		exists := ""
		if errors.Is(err, producer.ErrAlreadyExists) && try > 0 {
			err = nil // an earlier try was written
			exists = " exists"
		}
		if err == nil {
			accepted.Add(1)
			marker("ENQUEUED %s %s%s", id, it.class, exists)
			if try > 0 {
				// For diagnosis: what the tries before answered.
				log.Info("enqueued after failed calls", "run_id", id, "class", it.class, "tries", try+1, "exists", exists != "", "last_error", lastErr)
			}
			return true
		}
		lastErr = err
		if ctx.Err() != nil {
			return false
		}
		if !c.retry {
			failed.Add(1)
			marker("FAILED %d %s %d %s", it.i, it.class, time.Since(t0).Milliseconds(), strings.ReplaceAll(err.Error(), "\n", " "))
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
}
