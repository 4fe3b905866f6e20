package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// ManyGoroutines is the number of goroutines of the many-callers figure: a
// web service that enqueues one run per request, with this many requests
// in flight.
const ManyGoroutines = 1000

// Many is the outcome of one many-callers phase: how many calls returned
// nil in the phase's duration, and the CPU they cost.
type Many struct {
	Calls int
	Timing
}

// Rate is calls per second.
func (m Many) Rate() float64 { return rate(m.Calls, m.Wall) }

// manyCalls runs call from g goroutines, each calling it again as soon as
// it returns, until d has passed; it returns how many calls returned nil.
// The first error stops every goroutine and is returned.
func manyCalls(ctx context.Context, g int, d time.Duration, call func(ctx context.Context) error) (Many, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start, cpu := time.Now(), cpuTime()
	end := start.Add(d)
	for range g {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := call(ctx); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	m := Many{Calls: int(n.Load()), Timing: Timing{Wall: time.Since(start), CPU: cpuTime() - cpu}}
	return m, first
}

// RawSyncMany publishes from g goroutines for d, each with synchronous
// js.Publish (one message, wait for its ack, again), to a fresh work-queue
// stream, and checks that every acknowledged message is stored.
func RawSyncMany(ctx context.Context, url string, g int, d time.Duration, size int) (Many, error) {
	nc, js, err := connect(url, "bench-raw-many")
	if err != nil {
		return Many{}, err
	}
	defer nc.Close()
	st, subj, err := rawStream(ctx, js)
	if err != nil {
		return Many{}, err
	}
	defer func() { _ = js.DeleteStream(context.Background(), st.CachedInfo().Config.Name) }()
	payload := make([]byte, size)
	m, err := manyCalls(ctx, g, d, func(ctx context.Context) error {
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: payload})
		return err
	})
	if err != nil {
		return m, fmt.Errorf("bench: raw sync publish: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return m, fmt.Errorf("bench: %w", err)
	}
	if info.State.Msgs != uint64(m.Calls) {
		return m, fmt.Errorf("%w: raw: %d publishes acknowledged, %d messages stored", ErrBench, m.Calls, info.State.Msgs)
	}
	return m, nil
}

// EnqueueMany calls producer.Enqueue from g goroutines for d (each calls
// again as soon as its call returns), no worker running, and checks that
// every run whose Enqueue returned nil waits in the function stream.
func EnqueueMany(ctx context.Context, url, prefix string, g int, d time.Duration, size int) (Many, error) {
	r, err := newRole(ctx, url, "bench-producer-many", prefix)
	if err != nil {
		return Many{}, err
	}
	defer r.close()
	c := call(size)
	m, err := manyCalls(ctx, g, d, func(ctx context.Context) error {
		_, err := r.p.Enqueue(ctx, c)
		return err
	})
	if err != nil {
		return m, fmt.Errorf("bench: enqueue: %w", err)
	}
	return m, checkQueued(ctx, r.js, prefix, m.Calls)
}

// ManyResult is the many-callers comparison of one run.
type ManyResult struct {
	G            int
	Raw, Jetflow Many
}

// Ratio is jetflow's Enqueue rate over raw synchronous publishes from as
// many goroutines.
func (m ManyResult) Ratio() float64 { return ratio(m.Jetflow.Rate(), m.Raw.Rate()) }

// measureMany measures raw, jetflow, raw again (the raw figure is the mean
// of both, so a machine getting busier or quieter does not tilt the
// ratio), each for d from g goroutines.
func measureMany(ctx context.Context, url string, g int, d time.Duration, size int) (ManyResult, error) {
	res := ManyResult{G: g}
	raw1, err := RawSyncMany(ctx, url, g, d, size)
	if err != nil {
		return res, err
	}
	// A prefix of its own: a benchmark measures again on the same server.
	jf, err := EnqueueMany(ctx, url, fmt.Sprintf("benchmany%d", manyPrefixes.Add(1)), g, d, size)
	if err != nil {
		return res, err
	}
	raw2, err := RawSyncMany(ctx, url, g, d, size)
	if err != nil {
		return res, err
	}
	res.Jetflow = jf
	res.Raw = Many{Calls: raw1.Calls + raw2.Calls, Timing: Timing{Wall: raw1.Wall + raw2.Wall, CPU: raw1.CPU + raw2.CPU}}
	return res, nil
}

// manyLine prints the comparison.
func manyLine(line func(string, ...any), m ManyResult) {
	line("enqueue x%d goroutines  %10s runs/s   raw sync publish x%d %s msgs/s   ratio %.2f   cpu %s/run (raw %s/msg)",
		m.G, fmtRate(m.Jetflow.Rate()), m.G, fmtRate(m.Raw.Rate()), m.Ratio(),
		fmtDur(per(m.Jetflow.CPU, m.Jetflow.Calls)), fmtDur(per(m.Raw.CPU, m.Raw.Calls)))
}

// RunEnqueueMany measures Enqueue called once per goroutine, again and
// again, from 10, 100 and 1000 goroutines, each beside raw synchronous
// js.Publish from as many goroutines in the same run, on a fresh embedded
// server (default durability). Each figure lasts 5 s (1 s when quick).
func RunEnqueueMany(ctx context.Context, w io.Writer, quick bool) error {
	d := 5 * time.Second
	if quick {
		d = time.Second
	}
	s, stop, err := freshServer("many")
	if err != nil {
		return err
	}
	defer stop()
	line := func(format string, a ...any) { fmt.Fprintf(w, "many "+format+"\n", a...) }
	for _, g := range []int{10, 100, ManyGoroutines} {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		m, err := measureMany(pctx, s.ClientURL(), g, d, 100)
		cancel()
		if err != nil {
			return fmt.Errorf("enqueue x%d: %w", g, err)
		}
		manyLine(line, m)
		if err := dropStreams(s.ClientURL()); err != nil {
			return err
		}
	}
	return nil
}

// manyPrefixes numbers the prefixes of measureMany's jetflow phases.
var manyPrefixes atomic.Int64
