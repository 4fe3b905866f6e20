package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options configure Run. Every zero field takes the default named.
type Options struct {
	// N is the number of runs (and raw messages) of the throughput figures
	// in SyncInterval mode. Default 100,000 (2,000 with Quick).
	N int
	// AlwaysN is N in SyncAlways mode, which is 10-30x slower. Default N/20,
	// at least 500 (or N when N is smaller).
	AlwaysN int
	// Modes are the durability modes measured, each on a fresh server.
	// Default SyncInterval and SyncAlways.
	Modes []embedded.Sync
	// LatenessRuns is the number of delayed runs of the lateness figure.
	// Default 5,000 (100 with Quick): with LatenessSpread, a steady 1,000
	// runs due per second.
	LatenessRuns int
	// AlwaysLatenessRuns is LatenessRuns in SyncAlways mode, where every
	// write waits for a disk flush. Default LatenessRuns/20, at least 100
	// (or LatenessRuns when it is smaller).
	AlwaysLatenessRuns int
	// LatenessSpread is how far apart the first and last delayed run are
	// due. Default 5 s (1 s with Quick).
	LatenessSpread time.Duration
	// ArgsSize is the size of each run's JSON arguments and of each raw
	// message, in bytes. Default 100.
	ArgsSize int
	// SyncEvery overrides the fsync interval of SyncInterval mode (default
	// the product's 10 ms). Tests under -race set 1 s: nats-server v2.15.2
	// races on a new file store's sync timer when the interval is very short.
	SyncEvery time.Duration
	// Dir holds the servers' data, one subdirectory per mode, removed
	// afterwards. Default a new temporary directory.
	Dir string
	// Quick shrinks the defaults for tests and smoke runs, and skips the
	// ClaimFirst comparison.
	Quick bool
	// SkipClaimFirst skips the second end-to-end figure, measured with
	// every run claimed before its handler starts (worker.Options.ClaimAfter
	// < 0).
	SkipClaimFirst bool
	// Timeout bounds each measured phase. Default 10 minutes.
	Timeout time.Duration
	// ManyFor is how long each side of the many-goroutines figure lasts
	// (Enqueue from ManyGoroutines goroutines, raw synchronous publishes
	// from as many before and after). Default 3 s (500 ms with Quick).
	ManyFor time.Duration
	// SkipProfile skips the profiled repeats of the e2e and
	// many-goroutines phases that print where the time goes.
	SkipProfile bool
}

func (o Options) withDefaults() Options {
	if o.N <= 0 {
		o.N = 100_000
		if o.Quick {
			o.N = 2_000
		}
	}
	if o.AlwaysN <= 0 {
		o.AlwaysN = max(o.N/20, min(o.N, 500))
	}
	if len(o.Modes) == 0 {
		o.Modes = []embedded.Sync{embedded.SyncInterval, embedded.SyncAlways}
	}
	if o.LatenessRuns <= 0 {
		o.LatenessRuns = 5_000
		if o.Quick {
			o.LatenessRuns = 100
		}
	}
	if o.AlwaysLatenessRuns <= 0 {
		o.AlwaysLatenessRuns = max(o.LatenessRuns/20, min(o.LatenessRuns, 100))
	}
	if o.LatenessSpread <= 0 {
		o.LatenessSpread = 5 * time.Second
		if o.Quick {
			o.LatenessSpread = time.Second
		}
	}
	if o.ArgsSize <= 0 {
		o.ArgsSize = 100
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.ManyFor <= 0 {
		o.ManyFor = 3 * time.Second
		if o.Quick {
			o.ManyFor = 500 * time.Millisecond
		}
	}
	return o
}

// ErrBench: a measured phase did not complete (lost messages, a failed run,
// a timeout). The error says which.
var ErrBench = errors.New("bench: phase failed")

// Result holds the figures of one mode.
type Result struct {
	Mode embedded.Sync
	N    int

	RawPublish        float64 // messages/s
	RawPublishConsume float64 // messages/s, N / (publish + consume time)

	EnqueueAsync float64 // runs/s through EnqueueAsync, pipelined
	EnqueueBatch float64 // runs/s through Batch(1000)
	EnqueueConc  float64 // runs/s through Enqueue from 64 goroutines
	// Many is Enqueue from ManyGoroutines goroutines beside raw
	// synchronous publishes from as many.
	Many     ManyResult
	EndToEnd float64 // runs/s, enqueue n then run n: first enqueue to last terminal record
	// EndToEndOverlap is EndToEnd with the worker running while the runs
	// are enqueued.
	EndToEndOverlap    float64
	EndToEndOverlapCPU time.Duration
	Cost               Cost // messages per run, measured in the e2e phase

	// CPU time of the whole process (server included) per message or run.
	RawPublishCPU, RawPublishConsumeCPU time.Duration
	EnqueueAsyncCPU                     time.Duration
	EnqueueBatchCPU, EnqueueConcCPU     time.Duration
	EndToEndCPU                         time.Duration

	// The same end to end with every run claimed before its handler
	// starts; zero when skipped.
	EndToEndClaimFirst    float64
	EndToEndClaimFirstCPU time.Duration
	CostClaimFirst        Cost

	// The same end to end with a scheduler leading meanwhile (its run
	// indexer following every record write), as in a deployment; zero
	// when skipped. SchedIndexed: from the first enqueue to the index
	// covering the last record.
	EndToEndSched    float64
	EndToEndSchedCPU time.Duration
	SchedIndexed     time.Duration

	// Floor is the CPU of a raw record write, measured in the same run:
	// with raw's CPU per message, the least a run can cost. Zero in
	// SyncAlways mode, where the disk is the limit.
	Floor Floor

	Lateness    Percentiles // jetflow: handler start - scheduled time
	Dispatch    Percentiles // jetflow: run's message published - scheduled time
	RawLatency  Percentiles // raw: consume time - publish time
	LatenessN   int
	LatenessBad int // lateness runs that did not succeed
}

// EnqueueRatio is the Batch enqueue rate over the raw publish rate.
func (r Result) EnqueueRatio() float64 { return ratio(r.EnqueueAsync, r.RawPublish) }

// EnqueueBatchRatio is Batch(1000) enqueue throughput over raw publish.
func (r Result) EnqueueBatchRatio() float64 { return ratio(r.EnqueueBatch, r.RawPublish) }

// EndToEndRatio is the headline: jetflow e2e over raw publish-then-consume.
func (r Result) EndToEndRatio() float64 { return ratio(r.EndToEnd, r.RawPublishConsume) }

// EndToEndCPURatio is raw CPU per message (publish+consume) over jetflow
// CPU per run: the e2e ratio the CPU would allow if the process had the
// machine to itself. It is steadier than the wall-clock ratio on a busy
// machine.
func (r Result) EndToEndCPURatio() float64 {
	return ratio(float64(r.RawPublishConsumeCPU), float64(r.EndToEndCPU))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Run measures every mode of o and prints each figure on its own line to
// out, then a final line starting with "SUMMARY".
func Run(ctx context.Context, o Options, out io.Writer) error {
	_, err := Measure(ctx, o, out)
	return err
}

// Measure is Run that also returns the figures, in mode order.
func Measure(ctx context.Context, o Options, out io.Writer) ([]Result, error) {
	o = o.withDefaults()
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "jetflow-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	gogc := os.Getenv("GOGC")
	if gogc == "" {
		gogc = "100 (default)"
	}
	every := cmp.Or(o.SyncEvery, time.Duration(syncEvery.Load()), embedded.DefaultSyncEvery)
	fmt.Fprintf(out, "jetflow bench: %s %s/%s, %d CPUs, GOGC=%s, nats-server %s, nats.go %s, file storage (interval mode: fsync every %s), server embedded in process\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), gogc, server.VERSION, nats.Version, every)
	fmt.Fprintf(out, "runs/messages: %d (interval), %d (always); args %d bytes; lateness runs %d (interval), %d (always) over %s\n",
		o.N, o.AlwaysN, o.ArgsSize, o.LatenessRuns, o.AlwaysLatenessRuns, o.LatenessSpread)
	var results []Result
	for _, mode := range o.Modes {
		n, late := o.N, o.LatenessRuns
		if mode == embedded.SyncAlways {
			n, late = o.AlwaysN, o.AlwaysLatenessRuns
		}
		mdir, err := os.MkdirTemp(dir, mode.String()+"-")
		if err != nil {
			return results, fmt.Errorf("bench: %w", err)
		}
		r, err := runMode(ctx, o, mode, n, late, mdir, out)
		os.RemoveAll(mdir)
		if err != nil {
			return results, fmt.Errorf("mode=%s: %w", mode, err)
		}
		results = append(results, r)
	}
	fmt.Fprintln(out, Summary(results))
	return results, nil
}

// Summary is the final line: every ratio and the lateness p99 of each mode.
func Summary(results []Result) string {
	parts := make([]string, 0, len(results))
	for _, r := range results {
		claimFirst := ""
		if r.EndToEndClaimFirst > 0 {
			claimFirst = fmt.Sprintf(" e2e-claimfirst %.2f", ratio(r.EndToEndClaimFirst, r.RawPublishConsume))
		}
		if r.EndToEndSched > 0 {
			claimFirst += fmt.Sprintf(" e2e-sched %.2f", ratio(r.EndToEndSched, r.RawPublishConsume))
		}
		floor := ""
		if r.Floor.Write > 0 {
			floor = fmt.Sprintf(" e2e-cpu-floor %.2f", r.Floor.Ceiling(r.RawPublishConsumeCPU, 1))
		}
		parts = append(parts, fmt.Sprintf("%s: enqueue %.2f enqueue-batch %.2f enqueue-many %.2f e2e %.2f e2e-cpu %.2f%s e2e-overlap %.2f%s lateness-p99 %s raw-latency-p99 %s",
			r.Mode, r.EnqueueRatio(), r.EnqueueBatchRatio(), r.Many.Ratio(), r.EndToEndRatio(), r.EndToEndCPURatio(), floor,
			ratio(r.EndToEndOverlap, r.RawPublishConsume), claimFirst, fmtDur(r.Lateness.P99), fmtDur(r.RawLatency.P99)))
	}
	return "SUMMARY " + strings.Join(parts, " | ")
}

// runMode measures one durability mode on a fresh server whose data is in
// dir: n runs (and raw messages) per throughput figure, lateRuns delayed
// runs for the lateness figure. It prints each figure as it goes, after
// the mode's tag, and returns them all (those measured so far on error).
func runMode(ctx context.Context, o Options, mode embedded.Sync, n, lateRuns int, dir string, out io.Writer) (Result, error) {
	res := Result{Mode: mode, N: n}
	// The server's warnings go to stderr: a phase that fails on the server
	// (a stream it could not create) shows the server's reason there.
	s, err := embedded.Start(embedded.Options{Dir: dir, Sync: mode, SyncEvery: cmp.Or(o.SyncEvery, time.Duration(syncEvery.Load())), Warnings: os.Stderr})
	if err != nil {
		return res, err
	}
	defer s.Stop()
	if err := keep(s.ClientURL()); err != nil {
		return res, err
	}
	m := &modeBench{ctx: ctx, o: o, mode: mode, n: n, lateRuns: lateRuns, url: s.ClientURL(), out: out,
		tag: fmt.Sprintf("mode=%-9s", mode.String()), res: &res}
	for _, phase := range []func() error{
		m.raw,
		m.enqueueAsync,
		m.enqueueBatch,
		m.enqueueConcurrent,
		m.enqueueMany,
		m.endToEnd,
		m.endToEndOverlapped,
		m.endToEndClaimFirst,
		m.endToEndWithScheduler,
		m.floor,
		m.profile,
		m.lateness,
	} {
		if err := phase(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// modeBench is what the phases of one mode share: the server, the sizes,
// where the lines go, and the figures, which each phase fills in.
type modeBench struct {
	ctx         context.Context
	o           Options
	mode        embedded.Sync
	n, lateRuns int
	url         string // the mode's server
	out         io.Writer
	tag         string // "mode=" and the mode, padded, before every line
	res         *Result
}

// line prints one figure, after the mode's tag.
func (m *modeBench) line(format string, a ...any) {
	fmt.Fprintf(m.out, m.tag+" "+format+"\n", a...)
}

// phase is the context of one measured phase, bounded by o.Timeout.
func (m *modeBench) phase() (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.ctx, m.o.Timeout)
}

// clean starts a phase on an empty server: the streams of the one before
// are deleted. Quick runs keep them (the server is thrown away after the
// mode anyway): deleting streams while the 10 ms sync timer of their store
// may fire trips a data race inside nats-server under -race.
func (m *modeBench) clean() error {
	if m.o.Quick {
		return nil
	}
	return dropStreams(m.url)
}

// during runs one measured phase f with its context bounded by o.Timeout;
// its failure is named by what.
func during[T any](m *modeBench, what string, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := m.phase()
	defer cancel()
	v, err := f(ctx)
	if err != nil {
		return v, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

// measure is during on an empty server: the streams of the phase before
// are deleted first (clean).
func measure[T any](m *modeBench, what string, f func(context.Context) (T, error)) (T, error) {
	if err := m.clean(); err != nil {
		var zero T
		return zero, err
	}
	return during(m, what, f)
}

// raw measures raw JetStream: publish N, then consume + ack N.
func (m *modeBench) raw() error {
	n, res := m.n, m.res
	raw, err := during(m, "raw publish+consume", func(ctx context.Context) (RawTimes, error) {
		return RawPublishConsume(ctx, m.url, n, m.o.ArgsSize)
	})
	if err != nil {
		return err
	}
	res.RawPublish = rate(n, raw.Publish)
	res.RawPublishConsume = rate(n, raw.Publish+raw.Consume)
	res.RawPublishCPU = per(raw.PublishCPU, n)
	res.RawPublishConsumeCPU = per(raw.PublishCPU+raw.ConsumeCPU, n)
	m.line("raw publish               %10s msgs/s   cpu %s/msg   (%d msgs of %d B, async, 4096 acks pending)",
		fmtRate(res.RawPublish), fmtDur(res.RawPublishCPU), n, m.o.ArgsSize)
	m.line("raw consume+ack           %10s msgs/s   cpu %s/msg", fmtRate(rate(n, raw.Consume)), fmtDur(per(raw.ConsumeCPU, n)))
	m.line("raw publish+consume       %10s msgs/s   cpu %s/msg   (N / (publish + consume time))",
		fmtRate(res.RawPublishConsume), fmtDur(res.RawPublishConsumeCPU))
	return nil
}

// enqueueAsync measures jetflow enqueue, EnqueueAsync pipelined, one
// caller.
func (m *modeBench) enqueueAsync() error {
	n, res := m.n, m.res
	d, err := measure(m, "enqueue async", func(ctx context.Context) (Timing, error) {
		return EnqueueAsync(ctx, m.url, "benchenqa", n, m.o.ArgsSize)
	})
	if err != nil {
		return err
	}
	res.EnqueueAsync, res.EnqueueAsyncCPU = rate(n, d.Wall), per(d.CPU, n)
	m.line("enqueue async (pipelined) %10s runs/s   raw publish %s/s   ratio %.2f   cpu %s/run (raw %s/msg)",
		fmtRate(res.EnqueueAsync), fmtRate(res.RawPublish), res.EnqueueRatio(), fmtDur(res.EnqueueAsyncCPU), fmtDur(res.RawPublishCPU))
	return nil
}

// enqueueBatch measures jetflow enqueue, Batch of 1000, one caller.
func (m *modeBench) enqueueBatch() error {
	n, res := m.n, m.res
	d, err := measure(m, "enqueue batch", func(ctx context.Context) (Timing, error) {
		return EnqueueBatch(ctx, m.url, "benchenq", n, m.o.ArgsSize)
	})
	if err != nil {
		return err
	}
	res.EnqueueBatch, res.EnqueueBatchCPU = rate(n, d.Wall), per(d.CPU, n)
	m.line("enqueue Batch(1000)       %10s runs/s   raw publish %s/s   ratio %.2f   cpu %s/run (raw %s/msg)",
		fmtRate(res.EnqueueBatch), fmtRate(res.RawPublish), res.EnqueueBatchRatio(), fmtDur(res.EnqueueBatchCPU), fmtDur(res.RawPublishCPU))
	return nil
}

// enqueueConcurrent measures jetflow enqueue, Enqueue from 64 goroutines.
func (m *modeBench) enqueueConcurrent() error {
	n, res := m.n, m.res
	d, err := measure(m, "enqueue concurrent", func(ctx context.Context) (Timing, error) {
		return EnqueueConcurrent(ctx, m.url, "benchenqc", n, m.o.ArgsSize, 64)
	})
	if err != nil {
		return err
	}
	res.EnqueueConc, res.EnqueueConcCPU = rate(n, d.Wall), per(d.CPU, n)
	m.line("enqueue x64 goroutines    %10s runs/s   raw publish %s/s   ratio %.2f   cpu %s/run (raw %s/msg)",
		fmtRate(res.EnqueueConc), fmtRate(res.RawPublish), ratio(res.EnqueueConc, res.RawPublish), fmtDur(res.EnqueueConcCPU), fmtDur(res.RawPublishCPU))
	return nil
}

// enqueueMany measures Enqueue from many goroutines, each calling again as
// soon as its call returns, beside raw synchronous publishes from as many.
func (m *modeBench) enqueueMany() error {
	if err := m.clean(); err != nil {
		return err
	}
	var err error
	m.res.Many, err = during(m, fmt.Sprintf("enqueue from %d goroutines", ManyGoroutines), func(ctx context.Context) (ManyResult, error) {
		return measureMany(ctx, m.url, ManyGoroutines, m.o.ManyFor, m.o.ArgsSize)
	})
	if err != nil {
		return err
	}
	manyLine(m.line, m.res.Many)
	return nil
}

// endToEnd measures jetflow end to end (enqueue n, then run n), then raw
// publish+consume again, right after: the end-to-end ratios are against
// the mean of the raw runs before and after, so that a machine that got
// busier or quieter between them does not tilt the headline.
func (m *modeBench) endToEnd() error {
	n, res := m.n, m.res
	e2e, err := measure(m, "end to end", func(ctx context.Context) (E2E, error) {
		return EndToEnd(ctx, m.url, "benche2e", n, m.o.ArgsSize)
	})
	if err != nil {
		return err
	}
	res.EndToEnd = rate(n, e2e.Elapsed)
	res.EndToEndCPU = per(e2e.CPU, n)
	res.Cost = e2e.Cost

	raw2, err := measure(m, "raw publish+consume, again", func(ctx context.Context) (RawTimes, error) {
		return RawPublishConsume(ctx, m.url, n, m.o.ArgsSize)
	})
	if err != nil {
		return err
	}
	first := res.RawPublishConsume
	res.RawPublishConsume = (first + rate(n, raw2.Publish+raw2.Consume)) / 2
	res.RawPublishConsumeCPU = (res.RawPublishConsumeCPU + per(raw2.PublishCPU+raw2.ConsumeCPU, n)) / 2
	m.line("raw publish+consume again %10s msgs/s   (after the e2e phase; the ratios below are against the mean of both raw runs, %s/s)",
		fmtRate(rate(n, raw2.Publish+raw2.Consume)), fmtRate(res.RawPublishConsume))
	m.line("e2e no-op runs/s          %10s          raw publish+consume %s/s   ratio %.2f",
		fmtRate(res.EndToEnd), fmtRate(res.RawPublishConsume), res.EndToEndRatio())
	m.line("e2e cpu                   %10s/run      raw publish+consume %s/msg   cpu ratio %.2f (the ratio if CPU were the only limit)",
		fmtDur(res.EndToEndCPU), fmtDur(res.RawPublishConsumeCPU), res.EndToEndCPURatio())
	m.line("e2e handler done          %10s runs/s   (first enqueue to last handler return; enqueueing took %s of it)", fmtRate(rate(n, e2e.Handled)), fmtDur(e2e.Enqueued))
	m.line("cost: %s", res.Cost)
	return nil
}

// endToEndOverlapped measures end to end with the worker running while
// the runs are enqueued.
func (m *modeBench) endToEndOverlapped() error {
	n, res := m.n, m.res
	ov, err := measure(m, "end to end, overlapped", func(ctx context.Context) (E2E, error) {
		return EndToEndOverlapped(ctx, m.url, "benchoverlap", n, m.o.ArgsSize)
	})
	if err != nil {
		return err
	}
	res.EndToEndOverlap, res.EndToEndOverlapCPU = rate(n, ov.Elapsed), per(ov.CPU, n)
	m.line("e2e overlapped runs/s     %10s          raw publish+consume %s/s   ratio %.2f   cpu %s/run, handlers done %s runs/s (worker running while enqueueing)",
		fmtRate(res.EndToEndOverlap), fmtRate(res.RawPublishConsume), ratio(res.EndToEndOverlap, res.RawPublishConsume), fmtDur(res.EndToEndOverlapCPU),
		fmtRate(rate(n, ov.Handled)))
	return nil
}

// endToEndClaimFirst measures end to end with every run claimed before
// its handler starts; skipped when quick or told to.
func (m *modeBench) endToEndClaimFirst() error {
	if m.o.Quick || m.o.SkipClaimFirst {
		return nil
	}
	n, res := m.n, m.res
	cf, err := measure(m, "end to end, ClaimFirst", func(ctx context.Context) (E2E, error) {
		return EndToEndClaimFirst(ctx, m.url, "benchclaimfirst", n, m.o.ArgsSize)
	})
	if err != nil {
		return err
	}
	res.EndToEndClaimFirst, res.EndToEndClaimFirstCPU, res.CostClaimFirst = rate(n, cf.Elapsed), per(cf.CPU, n), cf.Cost
	m.line("e2e ClaimFirst runs/s     %10s          raw publish+consume %s/s   ratio %.2f   cpu %s/run, cpu ratio %.2f",
		fmtRate(res.EndToEndClaimFirst), fmtRate(res.RawPublishConsume), ratio(res.EndToEndClaimFirst, res.RawPublishConsume),
		fmtDur(res.EndToEndClaimFirstCPU), ratio(float64(res.RawPublishConsumeCPU), float64(res.EndToEndClaimFirstCPU)))
	m.line("cost ClaimFirst: %s", res.CostClaimFirst)
	if t := cf.claimText(); t != "" {
		m.line("ClaimFirst %s", t)
	}
	return nil
}

// endToEndWithScheduler measures end to end with a scheduler leading, as
// a deployment runs one: its run indexer follows the runs bucket and
// stores an entry per write. Skipped when quick.
func (m *modeBench) endToEndWithScheduler() error {
	if m.o.Quick {
		return nil
	}
	n, res := m.n, m.res
	sc, err := measure(m, "end to end, with a scheduler", func(ctx context.Context) (E2E, error) {
		return EndToEndWithScheduler(ctx, m.url, "benchsched", n, m.o.ArgsSize)
	})
	if err != nil {
		return err
	}
	res.EndToEndSched, res.EndToEndSchedCPU, res.SchedIndexed = rate(n, sc.Elapsed), per(sc.CPU, n), sc.Indexed
	m.line("e2e with a scheduler      %10s runs/s   raw publish+consume %s/s   ratio %.2f   cpu %s/run, the scheduler's included (its run indexer follows every record write, %.2f index messages stored a run: entries of consecutive writes batched; the index caught up %s after the first enqueue, the runs were done at %s)",
		fmtRate(res.EndToEndSched), fmtRate(res.RawPublishConsume), ratio(res.EndToEndSched, res.RawPublishConsume),
		fmtDur(res.EndToEndSchedCPU), sc.IndexEntries, fmtDur(sc.Indexed), fmtDur(sc.Elapsed))
	return nil
}

// floor measures what a run's record writes cost before any jetflow code.
// Not with an fsync per write (SyncAlways): the disk, not the CPU, is the
// limit there.
func (m *modeBench) floor() error {
	if m.mode == embedded.SyncAlways {
		return nil
	}
	res := m.res
	var err error
	res.Floor, err = measure(m, "floor", func(ctx context.Context) (Floor, error) {
		return measureFloor(ctx, m.url, m.n, m.o.ArgsSize)
	})
	if err != nil {
		return err
	}
	claimFirstCPU := ""
	if res.EndToEndClaimFirstCPU > 0 {
		claimFirstCPU = fmt.Sprintf(", ClaimFirst (2 writes) %.2f (measured %.2f)", res.Floor.Ceiling(res.RawPublishConsumeCPU, 2),
			ratio(float64(res.RawPublishConsumeCPU), float64(res.EndToEndClaimFirstCPU)))
	}
	m.line("floor: raw record write    %s/write   (%d B records, async, a subject each, expected sequence 0); cpu ratio if a run cost raw's message + its record writes and nothing more: e2e (1 write) %.2f (measured %.2f)%s",
		fmtDur(res.Floor.Write), res.Floor.RecordSize, res.Floor.Ceiling(res.RawPublishConsumeCPU, 1), res.EndToEndCPURatio(), claimFirstCPU)
	return nil
}

// profile prints where the time goes (whereTimeGoes), in the first mode
// only, unless told to skip it.
func (m *modeBench) profile() error {
	if m.o.SkipProfile || m.mode != m.o.Modes[0] {
		return nil
	}
	return whereTimeGoes(m.ctx, m.o, m.url, m.n, m.clean, m.line)
}

// lateness measures the lateness of delayed runs, beside raw
// publish->consume latency, each after a settle.
func (m *modeBench) lateness() error {
	res, lateRuns := m.res, m.lateRuns
	// Enqueueing must finish before the first run is due: allow twice the
	// time the Batch figure says it takes, and at least 1 s.
	lead := time.Duration(2*float64(lateRuns)/max(res.EnqueueBatch, 1)*float64(time.Second)) + time.Second
	if err := m.clean(); err != nil {
		return err
	}
	settle()
	late, err := during(m, "lateness", func(ctx context.Context) (LateResult, error) {
		return Lateness(ctx, m.url, "benchlate", lateRuns, m.o.ArgsSize, lead, m.o.LatenessSpread)
	})
	if err != nil {
		return err
	}
	res.Lateness, res.Dispatch, res.LatenessN, res.LatenessBad = late.Lateness, late.Dispatch, late.N, late.NotSuccess
	if err := m.clean(); err != nil {
		return err
	}
	settle()
	res.RawLatency, err = during(m, "raw latency", func(ctx context.Context) (Percentiles, error) {
		return RawLatency(ctx, m.url, lateRuns, m.o.ArgsSize, m.o.LatenessSpread)
	})
	if err != nil {
		return err
	}
	m.line("lateness (RunAt, %d runs due over %s, %s/s) p50 %s p99 %s max %s   raw publish->consume latency p50 %s p99 %s max %s",
		late.N, m.o.LatenessSpread, fmtRate(float64(late.N)/m.o.LatenessSpread.Seconds()), fmtDur(res.Lateness.P50), fmtDur(res.Lateness.P99), fmtDur(res.Lateness.Max),
		fmtDur(res.RawLatency.P50), fmtDur(res.RawLatency.P99), fmtDur(res.RawLatency.Max))
	m.line("%s", splitLine(res.Dispatch))
	if late.NotSuccess > 0 {
		m.line("lateness: %d of %d runs not recorded success", late.NotSuccess, late.N)
	}
	return nil
}

// whereTimeGoes repeats the e2e phase (a quarter of n runs) and the
// many-goroutines phase under the CPU profiler and prints each one's CPU
// samples by component: the notes that say where the next gain is.
func whereTimeGoes(ctx context.Context, o Options, url string, n int, clean func() error, line func(string, ...any)) error {
	note := func(what string, sh []Share, err error) error {
		if err != nil {
			if errors.Is(err, ErrBench) {
				return err
			}
			line("where the time goes (%s): no profile: %v", what, err)
			return nil
		}
		line("where the time goes (%s, CPU samples by the component that asked for them): %s", what, fmtShares(sh))
		return nil
	}
	if err := clean(); err != nil {
		return err
	}
	pn := max(n/4, min(n, 1000))
	pctx, cancel := context.WithTimeout(ctx, o.Timeout)
	sh, err := profiled(func() error { _, err := EndToEnd(pctx, url, "benchprofile", pn, o.ArgsSize); return err })
	cancel()
	if err := note(fmt.Sprintf("e2e, %d runs", pn), sh, err); err != nil {
		return err
	}
	if err := clean(); err != nil {
		return err
	}
	pctx, cancel = context.WithTimeout(ctx, o.Timeout)
	sh, err = profiled(func() error {
		_, err := EnqueueMany(pctx, url, "benchprofilemany", ManyGoroutines, o.ManyFor, o.ArgsSize)
		return err
	})
	cancel()
	return note(fmt.Sprintf("Enqueue x%d goroutines", ManyGoroutines), sh, err)
}

// connect opens a connection (one per role, as separate processes would).
func connect(url, name string, opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, fmt.Errorf("bench: connect: %w", err)
	}
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	return nc, js, nil
}

// dropStreams deletes every stream of the server, so that one phase's data
// does not weigh on the next.
// keepStream is a stream each mode's server keeps while the phases delete
// theirs. nats-server v2.15.2 removes an account's streams directory in a
// goroutine once its last stream is deleted (stream.go, "no op if not
// empty"), which races with the next phase creating its first stream: the
// create failed with "could not create storage directory ... no such file
// or directory" (10049) in 2 of 3 runs of the SyncAlways phases.
const keepStream = "BENCH_KEEP"

// keep creates keepStream.
func keep(url string) error {
	nc, js, err := connect(url, "bench-keep")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: keepStream, Subjects: []string{"bench.keep"}, Storage: jetstream.FileStorage}); err != nil {
		return fmt.Errorf("bench: stream %s: %w", keepStream, err)
	}
	return nil
}

func dropStreams(url string) error {
	return dropWhere(url, func(name string) bool { return name != keepStream })
}

// dropWhere deletes the streams of the server whose names drop says.
func dropWhere(url string, drop func(name string) bool) error {
	nc, js, err := connect(url, "bench-cleanup")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := js.StreamNames(ctx)
	var all []string
	for n := range names.Name() {
		if drop(n) {
			all = append(all, n)
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("bench: list streams: %w", err)
	}
	for _, n := range all {
		if err := js.DeleteStream(ctx, n); err != nil {
			return fmt.Errorf("bench: delete stream %s: %w", n, err)
		}
	}
	return nil
}

// per is d divided over n operations.
func per(d time.Duration, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return d / time.Duration(n)
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// splitLine is the lateness split's line: the scheduler's share of it.
func splitLine(dispatch Percentiles) string {
	return fmt.Sprintf("lateness split: scheduler publish p50 %s p99 %s (message seen on the function subject minus scheduled time); the rest is delivery to the handler",
		fmtDur(dispatch.P50), fmtDur(dispatch.P99))
}

// settle collects the heap the phases before left and waits a second for
// the server's background work on the streams they deleted, so that a
// latency phase measures a deployment at a steady 1,000 runs a second, not
// the bench's own leftovers (raw publish-to-consume p99 was 26-300 ms in
// 6 of 7 runs right after the throughput phases, 1.7-20.8 ms in 3 runs
// after a settle).
func settle() {
	runtime.GC()
	debug.FreeOSMemory()
	time.Sleep(time.Second)
}
