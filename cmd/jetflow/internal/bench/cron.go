package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

type cronArgs struct {
	I int `json:"i"`
}

var cronBenchFn = jetflow.Define[cronArgs]("bench.cron")

// RunCron measures the cron evaluator on a fresh embedded server (default
// durability) and prints one line per figure:
//
//   - registration rate of N crons (RegisterBatch, pipelined);
//   - the time of a tick with 10 crons due, with no other cron registered
//     and with N others registered (due at other times): the ratio says
//     whether the crons registered slow a tick down (1.0: not at all);
//   - the first tick of a new deployment, which reads the whole index once;
//   - fire lateness (run created minus scheduled time) of 10 crons due
//     every second, evaluated every second on the wall clock with the N
//     crons registered.
//
// N is 100,000 (10,000 when quick).
func RunCron(ctx context.Context, out io.Writer, quick bool) error {
	n, ticks, window := 100_000, 30, 10*time.Second
	if quick {
		n, ticks, window = 10_000, 10, 3*time.Second
	}
	s, stop, err := freshServer("cron")
	if err != nil {
		return err
	}
	defer stop()
	line := func(format string, a ...any) { fmt.Fprintf(out, "cron "+format+"\n", a...) }

	// A fake clock at 12:00:00 UTC of a day whose date the background crons avoid.
	start := time.Date(2030, 6, 15, 12, 0, 0, 0, time.UTC)

	base, err := cronSetup(ctx, s.ClientURL(), "cronbase", start, 0)
	if err != nil {
		return fmt.Errorf("cron baseline: %w", err)
	}
	defer base.close()
	loaded, err := cronSetup(ctx, s.ClientURL(), "cronload", start, n)
	if err != nil {
		return fmt.Errorf("cron loaded: %w", err)
	}
	defer loaded.close()
	// Alternate the two, so that drift of a shared machine weighs on both.
	var bd, ld []time.Duration
	for i := 0; i < ticks; i++ {
		for _, x := range []struct {
			e *cronEnv
			d *[]time.Duration
		}{{base, &bd}, {loaded, &ld}} {
			d, err := x.e.tick(ctx)
			if err != nil {
				return err
			}
			*x.d = append(*x.d, d)
		}
	}
	bt, lt := percentiles(bd), percentiles(ld)
	line("register %d crons                   %10s crons/s (RegisterBatch, pipelined)", n, fmtRate(rate(n, loaded.register)))
	line("tick, 10 due, 0 others                    p50 %s p99 %s (%d ticks)", fmtDur(bt.P50), fmtDur(bt.P99), bt.N)
	line("tick, 10 due, %d others               p50 %s p99 %s (%d ticks, alternating with the above)   ratio to 0 others p50 %.2f p99 %.2f",
		n, fmtDur(lt.P50), fmtDur(lt.P99), lt.N,
		float64(lt.P50)/float64(max(bt.P50, 1)), float64(lt.P99)/float64(max(bt.P99, 1)))
	line("first tick of a new deployment with %d crons                %s (reads the index from the first registration on)", n, fmtDur(loaded.first))
	rtt, err := kvRoundTrip(ctx, s.ClientURL())
	if err != nil {
		return fmt.Errorf("cron raw: %w", err)
	}
	line("raw KV put round trip                     p50 %s p99 %s (a fire costs about 7 round trips: read cron, read last run, create run record, publish, file next, update cron, remove entry; crons of a page fire 16 at a time)",
		fmtDur(rtt.P50), fmtDur(rtt.P99))

	late, err := cronLateness(ctx, s.ClientURL(), "cronload", window)
	if err != nil {
		return fmt.Errorf("cron lateness: %w", err)
	}
	line("lateness, 10 crons every 1 s, %d registered, %s: p50 %s p99 %s max %s (%d fires; run created minus scheduled time)",
		n, window, fmtDur(late.P50), fmtDur(late.P99), fmtDur(late.Max), late.N)
	return nil
}

type cronEnv struct {
	nc       interface{ Close() }
	c        *scheduler.Crons
	clk      *fakeClock
	register time.Duration
	first    time.Duration
}

func (e *cronEnv) close() { e.nc.Close() }

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// cronSetup registers others crons due on other days and 10 crons every
// second on a fake clock, and runs the first tick (10 fire).
func cronSetup(ctx context.Context, url, prefix string, start time.Time, others int) (*cronEnv, error) {
	nc, js, err := connect(url, "bench-cron")
	if err != nil {
		return nil, err
	}
	e := &cronEnv{nc: nc, clk: &fakeClock{t: start}}
	e.c, err = scheduler.NewCrons(ctx, js, scheduler.CronConfig{Streams: streams.Config{Prefix: prefix}, Now: e.clk.now})
	if err != nil {
		nc.Close()
		return nil, err
	}
	if others > 0 {
		defs := make([]scheduler.CronDef, others)
		for i := range defs {
			// Monthly on days 1-14 at every hour and minute: never due on the 15th.
			defs[i] = scheduler.CronDef{
				Name:     fmt.Sprintf("other-%06d", i),
				Schedule: scheduler.Monthly(1+i%14, (i/14)%24, (i/(14*24))%60),
				Call:     cronBenchFn.With(cronArgs{I: i}),
			}
		}
		t0 := time.Now()
		if err := e.c.RegisterBatch(ctx, defs); err != nil {
			nc.Close()
			return nil, err
		}
		e.register = time.Since(t0)
	}
	for i := 0; i < 10; i++ {
		_, err := e.c.Register(ctx, scheduler.CronDef{
			Name: fmt.Sprintf("every-second-%d", i), Schedule: scheduler.Interval(time.Second),
			Call: cronBenchFn.With(cronArgs{I: i}), Overlap: true,
		})
		if err != nil {
			nc.Close()
			return nil, err
		}
	}
	t0 := time.Now()
	st, err := e.c.Tick(ctx)
	if err == nil && st.Fired != 10 {
		err = fmt.Errorf("first tick fired %d, want 10 (%+v)", st.Fired, st)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	e.first = time.Since(t0)
	return e, nil
}

// tick moves the clock one second and times a tick (10 due).
func (e *cronEnv) tick(ctx context.Context) (time.Duration, error) {
	e.clk.add(time.Second)
	t0 := time.Now()
	st, err := e.c.Tick(ctx)
	d := time.Since(t0)
	if err == nil && (st.Fired != 10 || st.Due != 10) {
		err = fmt.Errorf("tick: %+v, want 10 due and fired", st)
	}
	return d, err
}

// cronLateness runs the evaluator on the wall clock for window, as the
// scheduler's leader does (a tick just after each second), with 10 crons
// due every second, and returns how late their runs were created.
func cronLateness(ctx context.Context, url, prefix string, window time.Duration) (Percentiles, error) {
	nc, js, err := connect(url, "bench-cron-late")
	if err != nil {
		return Percentiles{}, err
	}
	defer nc.Close()
	scfg := streams.Config{Prefix: prefix}
	c, err := scheduler.NewCrons(ctx, js, scheduler.CronConfig{Streams: scfg})
	if err != nil {
		return Percentiles{}, err
	}
	p, err := producer.New(ctx, js, producer.Config{Streams: scfg})
	if err != nil {
		return Percentiles{}, err
	}
	for i := 0; i < 10; i++ {
		_, err := c.Register(ctx, scheduler.CronDef{
			Name: fmt.Sprintf("late-%d", i), Schedule: scheduler.Interval(time.Second),
			Call: cronBenchFn.With(cronArgs{I: i}), Overlap: true,
		})
		if err != nil {
			return Percentiles{}, err
		}
	}
	end := time.Now().Add(window)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return Percentiles{}, ctx.Err()
		case <-timer.C:
		}
		if _, err := c.Tick(ctx); err != nil {
			return Percentiles{}, err
		}
		now := time.Now()
		timer.Reset(now.Truncate(time.Second).Add(time.Second + time.Millisecond).Sub(now))
	}
	var lat []time.Duration
	for i := 0; i < 10; i++ {
		ci, err := c.Get(ctx, fmt.Sprintf("late-%d", i))
		if err != nil {
			return Percentiles{}, err
		}
		if ci.Last == nil {
			continue
		}
		// Every fire after the first (an interval first fires when it is
		// registered, at the start of that second) up to the last.
		for at := ci.Last.Time; at.After(ci.Created.Truncate(time.Second)); at = at.Add(-time.Second) {
			r, err := p.Get(ctx, scheduler.CronRunID(ci.Name, at))
			if err != nil {
				return Percentiles{}, fmt.Errorf("fire %s of %s: %w", at.Format(time.TimeOnly), ci.Name, err)
			}
			lat = append(lat, r.CreationTime.Sub(at))
		}
	}
	return percentiles(lat), nil
}

// kvRoundTrip times sequential puts to a scratch bucket: the raw JetStream
// figure a tick is judged by.
func kvRoundTrip(ctx context.Context, url string) (Percentiles, error) {
	nc, js, err := connect(url, "bench-cron-raw")
	if err != nil {
		return Percentiles{}, err
	}
	defer nc.Close()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_cron_raw"})
	if err != nil {
		return Percentiles{}, err
	}
	defer func() { _ = js.DeleteKeyValue(ctx, "bench_cron_raw") }()
	d := make([]time.Duration, 0, 300)
	for i := 0; i < 300; i++ {
		t0 := time.Now()
		if _, err := kv.Put(ctx, fmt.Sprintf("k%d", i%50), []byte("x")); err != nil {
			return Percentiles{}, err
		}
		d = append(d, time.Since(t0))
	}
	return percentiles(d), nil
}
