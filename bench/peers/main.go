// Command peers measures jetflow beside raw JetStream, River on PostgreSQL
// and Asynq on Redis in one run, with the same no-op jobs and the same N,
// and prints one table: runs/s, the ratio to raw, and jetflow's ratio over
// each peer. A peer is measured only when its server is reachable (-pg,
// -redis); otherwise its row says why it was not.
//
// It is a module of its own, so that River, pgx and Asynq never enter
// jetflow's go.mod. See README.md for how to start the servers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// opts are the flags.
type opts struct {
	n          int
	argsSize   int
	pg         string
	redis      string
	riverMax   int
	asynqConc  int
	asynqEnq   int
	noSchedRow bool
	timeout    time.Duration
	dir        string
}

func main() {
	var o opts
	flag.IntVar(&o.n, "n", 20_000, "runs (jobs, messages) of every measurement")
	flag.IntVar(&o.argsSize, "args", 100, "size in bytes of each job's JSON arguments (and of each raw message)")
	flag.StringVar(&o.pg, "pg", "", "PostgreSQL DSN for River (e.g. postgres://bench:bench@127.0.0.1:5432/peers); empty: River is not measured")
	flag.StringVar(&o.redis, "redis", "", "Redis address for Asynq (e.g. 127.0.0.1:6379); empty: Asynq is not measured")
	flag.IntVar(&o.riverMax, "river-workers", 2_000, "River's MaxWorkers of the queue")
	flag.IntVar(&o.asynqConc, "asynq-concurrency", 50, "Asynq server's Concurrency")
	flag.IntVar(&o.asynqEnq, "asynq-enqueuers", 64, "goroutines enqueueing Asynq tasks (Asynq has no batch insert)")
	flag.BoolVar(&o.noSchedRow, "skip-no-scheduler", false, "skip jetflow end to end without a scheduler")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound of each measurement")
	flag.StringVar(&o.dir, "dir", "", "directory of the embedded nats-server's data (default a new temporary directory, removed afterwards)")
	flag.Parse()
	if o.n <= 0 || o.argsSize < 8 {
		fmt.Fprintln(os.Stderr, "peers: -n must be positive and -args at least 8")
		os.Exit(2)
	}
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// row is one line of the table: a rate, or why there is none.
type row struct {
	name string
	rate float64 // runs/s; 0 when err or skip is set
	note string  // what the figure is
	skip string  // not measured: why
	err  error   // measured but failed
}

func (r row) ok() bool { return r.rate > 0 && r.err == nil && r.skip == "" }

func run(ctx context.Context, o opts, out io.Writer) error {
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "jetflow-peers-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	load0 := loadavg()
	fmt.Fprintf(out, "peers: %s %s/%s, %d CPUs, N=%d, args %d bytes, load average at start %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), o.n, o.argsSize, load0)
	fmt.Fprintf(out, "versions: %s\n", depVersions())

	srv, err := startNATS(dir)
	if err != nil {
		return err
	}
	defer srv.Stop()
	url := srv.ClientURL()
	phase := func(name string, f func(ctx context.Context) (float64, string, error)) row {
		fmt.Fprintf(os.Stderr, "peers: measuring %s...\n", name)
		pctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		rate, note, err := f(pctx)
		var sk skipError
		if errors.As(err, &sk) {
			return row{name: name, skip: sk.why}
		}
		return row{name: name, rate: rate, note: note, err: err}
	}

	// Raw before and after the rest; the ratios are against the mean, so
	// that a machine that got busier or quieter meanwhile tilts nothing.
	raw1 := phase("raw JetStream publish + consume", func(ctx context.Context) (float64, string, error) {
		return rawPublishConsume(ctx, url, o.n, o.argsSize)
	})
	var rows []row
	if !o.noSchedRow {
		rows = append(rows, phase("jetflow end to end, no scheduler", func(ctx context.Context) (float64, string, error) {
			return jetflowE2E(ctx, url, "peersnosched", o.n, o.argsSize, false)
		}))
	}
	jf := phase("jetflow end to end with a scheduler", func(ctx context.Context) (float64, string, error) {
		return jetflowE2E(ctx, url, "peerssched", o.n, o.argsSize, true)
	})
	rows = append(rows, jf)
	rv := phase(fmt.Sprintf("River on PostgreSQL, %d workers", o.riverMax), func(ctx context.Context) (float64, string, error) {
		return riverE2E(ctx, o.pg, o.n, o.argsSize, o.riverMax)
	})
	aq := phase(fmt.Sprintf("Asynq on Redis, %d workers", o.asynqConc), func(ctx context.Context) (float64, string, error) {
		return asynqE2E(ctx, o.redis, o.n, o.argsSize, o.asynqConc, o.asynqEnq)
	})
	rows = append(rows, rv, aq)
	raw2 := phase("raw JetStream publish + consume, again", func(ctx context.Context) (float64, string, error) {
		return rawPublishConsume(ctx, url, o.n, o.argsSize)
	})
	load1 := loadavg()

	raw := row{name: "raw JetStream publish + consume", err: raw1.err}
	switch {
	case raw1.ok() && raw2.ok():
		raw.rate = (raw1.rate + raw2.rate) / 2
		raw.note = fmt.Sprintf("mean of %s before and %s after the rest", fmtRate(raw1.rate), fmtRate(raw2.rate))
	case raw1.ok():
		raw.rate, raw.note = raw1.rate, fmt.Sprintf("before the rest only; again: %v", raw2.err)
	}

	fmt.Fprintln(out)
	fmt.Fprintf(out, "| in one run, N=%d, %d CPUs, load average %s at start, %s at end | runs/s | of raw | |\n", o.n, runtime.NumCPU(), load0, load1)
	fmt.Fprintln(out, "|---|---|---|---|")
	for _, r := range append([]row{raw}, rows...) {
		switch {
		case r.skip != "":
			fmt.Fprintf(out, "| %s | not measured | | %s |\n", r.name, r.skip)
		case r.err != nil:
			fmt.Fprintf(out, "| %s | failed | | %v |\n", r.name, r.err)
		default:
			of := "-"
			if raw.rate > 0 {
				of = fmt.Sprintf("%.2f", r.rate/raw.rate)
			}
			fmt.Fprintf(out, "| %s | %s | %s | %s |\n", r.name, fmtRate(r.rate), of, r.note)
		}
	}
	fmt.Fprintln(out)
	for _, p := range []row{rv, aq} {
		peer := strings.SplitN(p.name, " ", 2)[0]
		switch {
		case !jf.ok():
			fmt.Fprintf(out, "jetflow (with a scheduler) / %s: no jetflow figure\n", peer)
		case !p.ok():
			fmt.Fprintf(out, "jetflow (with a scheduler) / %s: %s not measured\n", peer, peer)
		default:
			fmt.Fprintf(out, "jetflow (with a scheduler) / %s: %.2f\n", peer, jf.rate/p.rate)
		}
	}
	if raw.err != nil || jf.err != nil || rv.err != nil || aq.err != nil {
		return errors.New("a measurement failed (see the table)")
	}
	return nil
}

// skipError: a peer not measured (no address, or its server unreachable).
type skipError struct{ why string }

func (e skipError) Error() string { return e.why }

func skipf(format string, a ...any) error { return skipError{why: fmt.Sprintf(format, a...)} }

// loadavg is the 1, 5 and 15 minute load averages, or "?".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// depVersions names the versions of the measured libraries.
func depVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	want := []string{"github.com/nats-io/nats-server/v2", "github.com/nats-io/nats.go", "github.com/riverqueue/river",
		"github.com/jackc/pgx/v5", "github.com/hibiken/asynq", "github.com/redis/go-redis/v9"}
	var parts []string
	for _, w := range want {
		for _, d := range bi.Deps {
			if d.Path == w {
				parts = append(parts, strings.TrimPrefix(w, "github.com/")+" "+d.Version)
			}
		}
	}
	return strings.Join(parts, ", ")
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func fmtRate(r float64) string {
	s := fmt.Sprintf("%.0f", r)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// payload is a JSON object of size bytes: {"p":"xxx..."}, the arguments of
// every job.
type noopArgs struct {
	P string `json:"p"`
}

func args(size int) noopArgs { return noopArgs{P: strings.Repeat("x", max(size-8, 0))} }
