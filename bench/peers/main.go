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
	"slices"
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
	rounds     int
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
	flag.IntVar(&o.rounds, "rounds", 1, "rounds of every row, in turn; the table gives each row's median")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound of each measurement")
	flag.StringVar(&o.dir, "dir", "", "directory of the embedded nats-server's data (default a new temporary directory, removed afterwards)")
	flag.Parse()
	if o.n <= 0 || o.argsSize < 8 || o.rounds < 1 {
		fmt.Fprintln(os.Stderr, "peers: -n and -rounds must be positive and -args at least 8")
		os.Exit(2)
	}
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// row is one line of the table: the rates of every round, or why there
// are none.
type row struct {
	name  string
	rates []float64 // runs/s, one a round
	note  string    // what the figure is (the last round's)
	skip  string    // not measured: why
	err   error     // measured but failed
}

func (r *row) ok() bool { return len(r.rates) > 0 && r.err == nil && r.skip == "" }

// rate is the median of the rounds' rates.
func (r *row) rate() float64 {
	if len(r.rates) == 0 {
		return 0
	}
	s := slices.Clone(r.rates)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread is the rounds' range, or empty with one round.
func (r *row) spread() string {
	if len(r.rates) < 2 {
		return ""
	}
	return fmt.Sprintf("median of %d rounds, %s-%s", len(r.rates), fmtRate(slices.Min(r.rates)), fmtRate(slices.Max(r.rates)))
}

// measurer measures one row once: a rate and a note.
type measurer func(ctx context.Context) (float64, string, error)

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
	fmt.Fprintf(out, "peers: %s %s/%s, %d CPUs, N=%d, args %d bytes, %d round(s), load average at start %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), o.n, o.argsSize, o.rounds, load0)
	fmt.Fprintf(out, "versions: %s\n", depVersions())

	srv, err := startNATS(dir)
	if err != nil {
		return err
	}
	defer srv.Stop()
	url := srv.ClientURL()

	raw := &row{name: "raw JetStream publish + consume"}
	nosched := &row{name: "jetflow end to end, no scheduler"}
	jf := &row{name: "jetflow end to end with a scheduler"}
	rv := &row{name: fmt.Sprintf("River on PostgreSQL, %s workers", fmtRate(float64(o.riverMax)))}
	aq := &row{name: fmt.Sprintf("Asynq on Redis, %d workers", o.asynqConc)}
	measure := func(r *row, round int, f measurer) {
		if r.skip != "" || r.err != nil {
			return
		}
		fmt.Fprintf(os.Stderr, "peers: round %d: %s...\n", round, r.name)
		pctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		rate, note, err := f(pctx)
		var sk skipError
		switch {
		case errors.As(err, &sk):
			r.skip = sk.why
		case err != nil:
			r.err = err
		default:
			r.rates, r.note = append(r.rates, rate), note
		}
	}
	// The NATS phases start on an empty server: the streams of the one
	// before are deleted first.
	onNATS := func(f measurer) measurer {
		return func(ctx context.Context) (float64, string, error) {
			if err := dropStreams(ctx, url); err != nil {
				return 0, "", err
			}
			return f(ctx)
		}
	}
	rawOnce := onNATS(func(ctx context.Context) (float64, string, error) {
		return rawPublishConsume(ctx, url, o.n, o.argsSize)
	})
	for round := 1; round <= o.rounds; round++ {
		// Raw before and after the rest of each round; the ratios are
		// against the median of all, so that a machine that got busier or
		// quieter meanwhile tilts nothing.
		measure(raw, round, rawOnce)
		if !o.noSchedRow {
			measure(nosched, round, onNATS(func(ctx context.Context) (float64, string, error) {
				return jetflowE2E(ctx, url, "peersnosched", o.n, o.argsSize, false)
			}))
		}
		measure(jf, round, onNATS(func(ctx context.Context) (float64, string, error) {
			return jetflowE2E(ctx, url, "peerssched", o.n, o.argsSize, true)
		}))
		measure(rv, round, func(ctx context.Context) (float64, string, error) {
			return riverE2E(ctx, o.pg, o.n, o.argsSize, o.riverMax)
		})
		measure(aq, round, func(ctx context.Context) (float64, string, error) {
			return asynqE2E(ctx, o.redis, o.n, o.argsSize, o.asynqConc, o.asynqEnq)
		})
		measure(raw, round, rawOnce)
	}
	load1 := loadavg()
	if raw.ok() {
		raw.note = "each round before and after the rest: " + strings.Join(fmtRates(raw.rates), ", ")
	}

	fmt.Fprintln(out)
	fmt.Fprintf(out, "| in one run, N=%d, %d CPUs, load average %s at start, %s at end | runs/s | of raw | |\n", o.n, runtime.NumCPU(), load0, load1)
	fmt.Fprintln(out, "|---|---|---|---|")
	rows := []*row{raw, nosched, jf, rv, aq}
	if o.noSchedRow {
		rows = []*row{raw, jf, rv, aq}
	}
	for _, r := range rows {
		switch {
		case r.skip != "":
			fmt.Fprintf(out, "| %s | not measured | | %s |\n", r.name, cell(r.skip))
		case r.err != nil:
			fmt.Fprintf(out, "| %s | failed | | %s |\n", r.name, cell(r.err.Error()))
		default:
			of := "-"
			if raw.ok() {
				of = fmt.Sprintf("%.2f", r.rate()/raw.rate())
			}
			note := r.note
			if sp := r.spread(); sp != "" && r != raw {
				note = sp + "; " + note
			}
			fmt.Fprintf(out, "| %s | %s | %s | %s |\n", r.name, fmtRate(r.rate()), of, cell(note))
		}
	}
	fmt.Fprintln(out)
	for _, p := range []*row{rv, aq} {
		peer := strings.SplitN(p.name, " ", 2)[0]
		switch {
		case !jf.ok():
			fmt.Fprintf(out, "jetflow (with a scheduler) / %s: no jetflow figure\n", peer)
		case !p.ok():
			fmt.Fprintf(out, "jetflow (with a scheduler) / %s: %s not measured\n", peer, peer)
		default:
			fmt.Fprintf(out, "jetflow (with a scheduler) / %s: %.2f\n", peer, jf.rate()/p.rate())
		}
	}
	for _, r := range rows {
		if r.err != nil {
			return errors.New("a measurement failed (see the table)")
		}
	}
	return nil
}

func fmtRates(rs []float64) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmtRate(r)
	}
	return out
}

// skipError: a peer not measured (no address, or its server unreachable).
type skipError struct{ why string }

func (e skipError) Error() string { return e.why }

func skipf(format string, a ...any) error { return skipError{why: fmt.Sprintf(format, a...)} }

// cell is s on one line, fit for a table cell.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", "/")
}

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
