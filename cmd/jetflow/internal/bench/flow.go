package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// noopArgs are the arguments of the benchmark function; P pads the JSON
// encoding to the requested size.
type noopArgs struct {
	P string `json:"p"`
}

// noop is the function every phase runs.
var noop = jetflow.Define[noopArgs]("bench.noop")

// call returns a call of noop whose JSON args are size bytes ({"p":"..."}
// is 8 bytes plus the padding).
func call(size int) jetflow.Call {
	return noop.With(noopArgs{P: strings.Repeat("x", max(size-8, 0))})
}

// handlerOptions are the worker options of every phase: enough concurrency
// that the worker is never the bottleneck of a no-op, and runs pulled 1000
// ahead, as raw's consumers pull (rawPull).
var handlerOptions = worker.Options{Concurrency: 256, Prefetch: 1000, MaxParallel: 10_000}

// batchSize is the number of runs per Batch call (producer.MaxBatch).
const batchSize = producer.MaxBatch

// role is one connection with a producer on it.
type role struct {
	nc *nats.Conn
	js jetstream.JetStream
	p  *producer.Producer
}

func newRole(ctx context.Context, url, name, prefix string) (*role, error) {
	nc, js, err := connect(url, name)
	if err != nil {
		return nil, err
	}
	p, err := producer.New(ctx, js, producer.Config{Streams: benchStreams(prefix)})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: producer: %w", err)
	}
	return &role{nc: nc, js: js, p: p}, nil
}

func (r *role) close() { r.nc.Close() }

// enqueueBatches schedules n runs through Batch, batchSize at a time, each
// due at at(i) (nil: now).
func enqueueBatches(ctx context.Context, p *producer.Producer, n int, c jetflow.Call, at func(i int) time.Time) error {
	items := make([]producer.Item, batchSize)
	for i := range items {
		items[i].Call = c
	}
	for done := 0; done < n; {
		k := min(batchSize, n-done)
		if at != nil {
			for i := range k {
				items[i].At = at(done + i)
			}
		}
		if _, err := p.Batch(ctx, items[:k]); err != nil {
			return fmt.Errorf("bench: batch at run %d: %w", done, err)
		}
		done += k
	}
	return nil
}

// enqueueAsync schedules n runs due now through EnqueueAsync, pipelined,
// and waits until every one is durable. Like a producer that checks each
// run, it waits for the oldest once maxPending are unconfirmed (the raw
// figure's window) rather than holding all n.
func enqueueAsync(ctx context.Context, p *producer.Producer, n int, c jetflow.Call) error {
	ring := make([]*producer.Pending, maxPending) // run i waits in slot i % maxPending
	for i := range n {
		f, err := p.EnqueueAsync(ctx, c)
		if err != nil {
			return fmt.Errorf("bench: enqueue async at run %d: %w", i, err)
		}
		slot := i % maxPending
		if old := ring[slot]; old != nil {
			if err := old.Wait(ctx); err != nil {
				return fmt.Errorf("bench: enqueue async: %w", err)
			}
		}
		ring[slot] = f
	}
	for _, f := range ring {
		if f == nil {
			continue
		}
		if err := f.Wait(ctx); err != nil {
			return fmt.Errorf("bench: enqueue async: %w", err)
		}
	}
	return nil
}

// streamInfo returns the state of a stream.
func streamInfo(ctx context.Context, js jetstream.JetStream, name string) (jetstream.StreamState, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return jetstream.StreamState{}, fmt.Errorf("bench: stream %s: %w", name, err)
	}
	return st.CachedInfo().State, nil
}

// checkQueued verifies that n runs wait in the function stream of prefix.
func checkQueued(ctx context.Context, js jetstream.JetStream, prefix string, n int) error {
	s, err := streamInfo(ctx, js, benchStreams(prefix).FunctionStream())
	if err != nil {
		return err
	}
	if s.Msgs != uint64(n) {
		return fmt.Errorf("%w: %d runs enqueued, %d messages in the function stream", ErrBench, n, s.Msgs)
	}
	return nil
}

// Timing is the wall-clock time and the process's CPU time of a phase.
type Timing struct {
	Wall, CPU time.Duration
}

// EnqueueBatch provisions prefix's streams, then times n runs scheduled
// through producer.Batch, 1000 per call, from one goroutine, with no worker
// running. It checks that all n were queued and deletes the streams.
func EnqueueBatch(ctx context.Context, url, prefix string, n, size int) (Timing, error) {
	return timeEnqueue(ctx, url, prefix, n, size, func(p *producer.Producer, c jetflow.Call) error {
		return enqueueBatches(ctx, p, n, c, nil)
	})
}

// EnqueueAsync is EnqueueBatch with producer.EnqueueAsync, one goroutine,
// publishes pipelined.
func EnqueueAsync(ctx context.Context, url, prefix string, n, size int) (Timing, error) {
	return timeEnqueue(ctx, url, prefix, n, size, func(p *producer.Producer, c jetflow.Call) error {
		return enqueueAsync(ctx, p, n, c)
	})
}

// timeEnqueue times enqueue (n runs of call(size)) on a new producer and
// checks that all n were queued.
func timeEnqueue(ctx context.Context, url, prefix string, n, size int, enqueue func(*producer.Producer, jetflow.Call) error) (Timing, error) {
	r, err := newRole(ctx, url, "bench-producer", prefix)
	if err != nil {
		return Timing{}, err
	}
	defer r.close()
	c := call(size)
	start, cpu := time.Now(), cpuTime()
	if err := enqueue(r.p, c); err != nil {
		return Timing{}, err
	}
	t := Timing{Wall: time.Since(start), CPU: cpuTime() - cpu}
	return t, checkQueued(ctx, r.js, prefix, n)
}

// EnqueueConcurrent is EnqueueBatch with one Enqueue per run from g
// goroutines.
func EnqueueConcurrent(ctx context.Context, url, prefix string, n, size, g int) (Timing, error) {
	r, err := newRole(ctx, url, "bench-producer", prefix)
	if err != nil {
		return Timing{}, err
	}
	defer r.close()
	c := call(size)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, g)
	start, cpu := time.Now(), cpuTime()
	for range g {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := r.p.Enqueue(ctx, c); err != nil {
					errs <- fmt.Errorf("bench: enqueue: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	t := Timing{Wall: time.Since(start), CPU: cpuTime() - cpu}
	close(errs)
	if err := <-errs; err != nil {
		return Timing{}, err
	}
	return t, checkQueued(ctx, r.js, prefix, n)
}

// E2E is the outcome of an end-to-end phase.
type E2E struct {
	// Elapsed is from the first enqueue to the last terminal record stored.
	Elapsed time.Duration
	// Handled is from the first enqueue to the last handler return.
	Handled time.Duration
	// Enqueued is from the first enqueue to the last one acknowledged.
	Enqueued time.Duration
	// CPU is the process's CPU time from the first enqueue to the last
	// handler return.
	CPU time.Duration
	// Cost is what a run put on the wire.
	Cost Cost
	// Indexed is from the first enqueue to the run indexer's checkpoint
	// covering the last record write (EndToEndWithScheduler only).
	Indexed time.Duration
	// IndexEntries is the index messages stored per run (with a
	// scheduler): one per record write at most, fewer where the entries of
	// consecutive writes are batched.
	IndexEntries float64
	// Claims is how long runs claimed before their handler started waited
	// for their claim to be stored (none when runs are claimed late).
	Claims Percentiles
}

// claimText says how long claims waited and what that wait allows runners
// (Concurrency of them, each waiting its claim) at most: empty without
// claims.
func (r E2E) claimText() string {
	if r.Claims.N == 0 || r.Claims.P50 <= 0 {
		return ""
	}
	return fmt.Sprintf("claims waited p50 %s p99 %s: %d runners waiting one each allow at most %s runs/s",
		fmtDur(r.Claims.P50), fmtDur(r.Claims.P99), handlerOptions.Concurrency,
		fmtRate(float64(handlerOptions.Concurrency)/r.Claims.P50.Seconds()))
}

// startLeader starts a scheduler on a connection of its own and waits
// until it leads (and so runs the run indexer); stop stops it.
func startLeader(ctx context.Context, url, prefix string) (stop func(), err error) {
	snc, sjs, err := connect(url, "bench-scheduler")
	if err != nil {
		return nil, err
	}
	s, err := scheduler.New(ctx, sjs, scheduler.Config{Streams: benchStreams(prefix)})
	if err == nil {
		err = s.Start(ctx)
	}
	if err != nil {
		snc.Close()
		return nil, fmt.Errorf("bench: scheduler: %w", err)
	}
	stop = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.Stop(sctx)
		cancel()
		snc.Close()
	}
	if err := poolBenchWait(ctx, time.Minute, s.IsLeader); err != nil {
		stop()
		return nil, fmt.Errorf("%w: scheduler never became leader: %w", ErrBench, err)
	}
	return stop, nil
}

// flow is a producer and a worker on their own connections, and an observer
// (status scans, stream info) on a third, so that the producer's and the
// worker's connections count only their own messages.
type flow struct {
	prod, work, obs *role
	w               *worker.Worker
	prefix          string
}

// startFlow connects the roles and registers h on a worker, started now
// when start is true (otherwise by the caller).
func startFlow(ctx context.Context, url, prefix string, opts worker.Options, start bool, h func(ctx context.Context, j *worker.Job[noopArgs]) error) (*flow, error) {
	prod, err := newRole(ctx, url, "bench-producer", prefix)
	if err != nil {
		return nil, err
	}
	wnc, wjs, err := connect(url, "bench-worker")
	if err != nil {
		prod.close()
		return nil, err
	}
	work := &role{nc: wnc, js: wjs}
	obs, err := newRole(ctx, url, "bench-observer", prefix)
	if err != nil {
		prod.close()
		work.close()
		return nil, err
	}
	f := &flow{prod: prod, work: work, obs: obs, prefix: prefix}
	w, err := worker.New(ctx, wjs, worker.Config{Streams: benchStreams(prefix)})
	if err != nil {
		f.close()
		return nil, fmt.Errorf("bench: worker: %w", err)
	}
	if err := worker.Register(w, noop, h, opts); err != nil {
		f.close()
		return nil, fmt.Errorf("bench: worker: %w", err)
	}
	f.w = w
	if !start {
		return f, nil
	}
	if err := w.Start(ctx); err != nil {
		f.close()
		return nil, fmt.Errorf("bench: worker: %w", err)
	}
	return f, nil
}

// wire is the number of messages the producer and worker connections have
// sent and received so far.
func (f *flow) wire() uint64 {
	var t uint64
	for _, nc := range []*nats.Conn{f.prod.nc, f.work.nc} {
		s := nc.Stats()
		t += s.InMsgs + s.OutMsgs
	}
	return t
}

func (f *flow) close() {
	if f.w != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = f.w.Stop(ctx)
		cancel()
	}
	f.obs.close()
	f.work.close()
	f.prod.close()
}

// countStates counts the latest records of prefix's runs bucket by state,
// reading headers only through one ordered consumer. (kv.Store.Scan pages
// with FetchNoWait, which recreates its ordered consumer per page; on a large
// bucket that costs the server far more than the scan itself, and the
// benchmark must not weigh on what it measures.)
func countStates(ctx context.Context, js jetstream.JetStream, prefix string) (map[jetflow.State]int, error) {
	bucket := benchStreams(prefix).WithDefaults().RunsBucket()
	st, err := js.Stream(ctx, streams.KVStream(bucket))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	n := map[jetflow.State]int{}
	if st.CachedInfo().State.Msgs == 0 {
		return n, nil
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{streams.KVSubject(bucket, ">")},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly:    true,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	it, err := c.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			return n, fmt.Errorf("bench: scan runs: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			return n, fmt.Errorf("bench: scan runs: %w", err)
		}
		if m.Headers().Get("KV-Operation") == "" && m.Headers().Get("Nats-Marker-Reason") == "" {
			n[jetflow.State(m.Headers().Get(kv.HeaderState))]++
		}
		if md.NumPending == 0 {
			return n, nil
		}
	}
}

// waitSuccess waits until n records of prefix's runs bucket are success. It
// polls the cheap stream info until the bucket has been quiet for 50 ms and
// only then scans the records, so that waiting costs the measured system
// next to nothing. It returns how many records are not success when ctx
// ends.
func waitSuccess(ctx context.Context, o *role, prefix string, n int) (int, error) {
	name := streams.KVStream(benchStreams(prefix).WithDefaults().RunsBucket())
	var last uint64
	changed := time.Now()
	c := map[jetflow.State]int{}
	for {
		st, err := streamInfo(ctx, o.js, name)
		if err == nil && st.LastSeq != last {
			last, changed = st.LastSeq, time.Now()
		}
		if time.Since(changed) >= 50*time.Millisecond {
			if c, err = countStates(ctx, o.js, prefix); err == nil && c[jetflow.Success] == n {
				return 0, nil
			}
			changed = time.Now()
		}
		select {
		case <-ctx.Done():
			return n - c[jetflow.Success], fmt.Errorf("%w: %d of %d runs recorded success (%v): %w", ErrBench, c[jetflow.Success], n, c, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// EndToEnd measures no-op runs the way the raw figure measures messages,
// publish then consume: it enqueues n runs through EnqueueAsync (pipelined,
// as raw publishes), then starts a worker running a no-op handler
// (concurrency 256, 10,000 in flight) and waits until all n records are
// success. The figure is from the first enqueue to the last record written
// (the runs stream's last message time); the streams tell how many messages
// a run cost.
func EndToEnd(ctx context.Context, url, prefix string, n, size int) (E2E, error) {
	return endToEnd(ctx, url, prefix, n, size, handlerOptions, false, false)
}

// EndToEndOverlapped is EndToEnd with the worker running while the runs
// are enqueued: producer and worker compete for the same two cores.
func EndToEndOverlapped(ctx context.Context, url, prefix string, n, size int) (E2E, error) {
	return endToEnd(ctx, url, prefix, n, size, handlerOptions, true, false)
}

// EndToEndClaimFirst is EndToEnd with every run claimed before its handler
// starts (worker.Options.ClaimAfter < 0): one record write more per run.
func EndToEndClaimFirst(ctx context.Context, url, prefix string, n, size int) (E2E, error) {
	o := handlerOptions
	o.ClaimAfter = -1
	return endToEnd(ctx, url, prefix, n, size, o, false, false)
}

// EndToEndLateClaims is EndToEnd with runs claimed late (ClaimAfter 100
// ms, set): the default on a single server, an opt-in on a cluster.
func EndToEndLateClaims(ctx context.Context, url, prefix string, n, size int) (E2E, error) {
	o := handlerOptions
	o.ClaimAfter = worker.DefaultClaimAfter
	return endToEnd(ctx, url, prefix, n, size, o, false, false)
}

// EndToEndWithScheduler is EndToEnd with a scheduler leading meanwhile, as
// in a deployment: its run indexer follows every record write and stores
// an index entry for each (docs/runindex.md). E2E.Indexed says when the
// indexer's checkpoint covered the last record.
func EndToEndWithScheduler(ctx context.Context, url, prefix string, n, size int) (E2E, error) {
	return endToEnd(ctx, url, prefix, n, size, handlerOptions, false, true)
}

// EndToEndClaimFirstWithScheduler is EndToEndClaimFirst with a scheduler
// leading meanwhile: two record writes a run for the indexer to follow.
func EndToEndClaimFirstWithScheduler(ctx context.Context, url, prefix string, n, size int) (E2E, error) {
	o := handlerOptions
	o.ClaimAfter = -1
	return endToEnd(ctx, url, prefix, n, size, o, false, true)
}

func endToEnd(ctx context.Context, url, prefix string, n, size int, opts worker.Options, overlap, sched bool) (E2E, error) {
	var res E2E
	var handled atomic.Int64
	var handledAt atomic.Int64
	var cpuAt time.Duration
	done := make(chan struct{})
	f, err := startFlow(ctx, url, prefix, opts, overlap, func(context.Context, *worker.Job[noopArgs]) error {
		if handled.Add(1) == int64(n) {
			handledAt.Store(time.Now().UnixNano())
			cpuAt = cpuTime()
			close(done)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	defer f.close()
	if sched {
		stop, err := startLeader(ctx, url, prefix)
		if err != nil {
			return res, err
		}
		defer stop()
	}
	var (
		claimsMu sync.Mutex
		claims   = make([]time.Duration, 0, n)
	)
	stopClaims := telemetry.ObserveClaims(func(d time.Duration) {
		claimsMu.Lock()
		claims = append(claims, d)
		claimsMu.Unlock()
	})
	defer stopClaims()
	c := call(size)
	before := f.wire()
	start, cpu := time.Now(), cpuTime()
	if err := enqueueAsync(ctx, f.prod.p, n, c); err != nil {
		return res, err
	}
	res.Enqueued = time.Since(start)
	if !overlap {
		if err := f.w.Start(ctx); err != nil {
			return res, fmt.Errorf("bench: worker: %w", err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		return res, fmt.Errorf("%w: %d of %d runs handled: %w", ErrBench, handled.Load(), n, ctx.Err())
	}
	res.Handled = time.Unix(0, handledAt.Load()).Sub(start)
	res.CPU = cpuAt - cpu
	stopClaims()
	claimsMu.Lock()
	res.Claims = percentiles(claims)
	claimsMu.Unlock()
	if _, err := waitSuccess(ctx, f.obs, prefix, n); err != nil {
		return res, err
	}
	wire := f.wire() - before
	scfg := benchStreams(prefix).WithDefaults()
	runs, err := streamInfo(ctx, f.obs.js, streams.KVStream(scfg.RunsBucket()))
	if err != nil {
		return res, err
	}
	fn, err := streamInfo(ctx, f.obs.js, scfg.FunctionStream())
	if err != nil {
		return res, err
	}
	res.Elapsed = runs.LastTime.Sub(start)
	if res.Elapsed < res.Handled {
		res.Elapsed = res.Handled
	}
	if sched {
		rd := runindex.NewReader(engine.Of(f.obs.p).Store())
		err := poolBenchWait(ctx, 5*time.Minute, func() bool {
			cp, err := rd.Checkpoint(ctx)
			return err == nil && !cp.Rebuilding && cp.Seq >= runs.LastSeq
		})
		if err != nil {
			return res, fmt.Errorf("bench: the indexer did not catch up: %w", err)
		}
		res.Indexed = time.Since(start)
		idx, err := f.obs.js.Stream(ctx, scfg.IndexStream())
		if err != nil {
			return res, err
		}
		info, err := idx.Info(ctx, jetstream.WithSubjectFilter(scfg.IndexFilter("", "")))
		if err != nil {
			return res, err
		}
		var entries uint64
		for _, c := range info.State.Subjects {
			entries += c
		}
		res.IndexEntries = float64(entries) / float64(n)
	}
	res.Cost = Cost{
		RecordWrites: float64(runs.LastSeq) / float64(n),
		JobPublishes: float64(fn.LastSeq) / float64(n),
		Acks:         float64(handled.Load()) / float64(n),
		Wire:         float64(wire) / float64(n),
	}
	return res, nil
}

// LateResult is the outcome of a lateness phase.
type LateResult struct {
	N        int
	Lateness Percentiles
	// Dispatch is the part of the lateness before the run's message is
	// published (the scheduler's), seen by a plain subscriber on the
	// function subjects: publish seen minus scheduled time.
	Dispatch   Percentiles
	NotSuccess int
}

// Lateness starts a scheduler (waiting until it leads) and a worker, then
// schedules n runs with Batch, due evenly from lead to lead+spread from
// now, and returns the distribution of handler start minus scheduled time.
func Lateness(ctx context.Context, url, prefix string, n, size int, lead, spread time.Duration) (LateResult, error) {
	res := LateResult{N: n}
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	done := make(chan struct{})
	f, err := startFlow(ctx, url, prefix, handlerOptions, true, func(_ context.Context, j *worker.Job[noopArgs]) error {
		d := time.Since(j.ScheduledTime())
		mu.Lock()
		lat = append(lat, d)
		if len(lat) == n {
			close(done)
		}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return res, err
	}
	defer f.close()
	snc, sjs, err := connect(url, "bench-scheduler")
	if err != nil {
		return res, err
	}
	defer snc.Close()
	s, err := scheduler.New(ctx, sjs, scheduler.Config{Streams: benchStreams(prefix)})
	if err != nil {
		return res, fmt.Errorf("bench: scheduler: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		return res, fmt.Errorf("bench: scheduler: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.Stop(ctx)
		cancel()
	}()
	var dmu sync.Mutex
	disp := make([]time.Duration, 0, n)
	sub, err := f.obs.nc.Subscribe(benchStreams(prefix).FunctionSubject(noop.Name(), "*"), func(m *nats.Msg) {
		now := time.Now()
		e, err := benchStreams(prefix).ParseMessage(m.Subject, m.Header, m.Data)
		if err != nil || e.Scheduled.IsZero() {
			return
		}
		dmu.Lock()
		disp = append(disp, now.Sub(e.Scheduled))
		dmu.Unlock()
	})
	if err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	for !s.IsLeader() {
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("%w: scheduler never became leader: %w", ErrBench, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	base := time.Now().Add(lead)
	at := func(i int) time.Time {
		return base.Add(time.Duration(float64(spread) * float64(i) / float64(max(n-1, 1))))
	}
	if err := enqueueBatches(ctx, f.prod.p, n, call(size), at); err != nil {
		return res, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		got := len(lat)
		mu.Unlock()
		return res, fmt.Errorf("%w: %d of %d delayed runs started: %w", ErrBench, got, n, ctx.Err())
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	res.NotSuccess, err = waitSuccess(wctx, f.obs, prefix, n)
	cancel()
	if err != nil {
		return res, err
	}
	mu.Lock()
	defer mu.Unlock()
	res.Lateness = percentiles(lat)
	dmu.Lock()
	defer dmu.Unlock()
	res.Dispatch = percentiles(disp)
	return res, nil
}
