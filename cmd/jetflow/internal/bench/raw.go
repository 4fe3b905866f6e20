package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// RawTimes are the durations of the raw JetStream phases.
type RawTimes struct {
	// Publish is the time to async-publish N messages and receive every ack.
	Publish time.Duration
	// Consume is the time to consume and ack the N messages afterwards.
	Consume time.Duration
	// PublishCPU and ConsumeCPU are the process's CPU time in each phase.
	PublishCPU, ConsumeCPU time.Duration
}

// rawPull are the pull options of raw consumers: the worker's expiry and
// heartbeats (worker.pullHeartbeat), so that a pull nats.go miscounts
// stalls raw as briefly as it stalls jetflow.
var rawPull = []jetstream.PullConsumeOpt{
	jetstream.PullMaxMessages(1000), jetstream.PullExpiry(2 * time.Second), jetstream.PullHeartbeat(500 * time.Millisecond),
}

// maxPending is the async publish window of raw publishing.
const maxPending = 4096

// rawStream creates a fresh file-storage work-queue stream and returns it
// with its subject.
func rawStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, string, error) {
	id := nuid.Next()
	subj := "benchraw." + id
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      "BENCHRAW_" + id,
		Subjects:  []string{subj},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
		Replicas:  max(int(replicas.Load()), 1),
	})
	if err != nil {
		return nil, "", fmt.Errorf("bench: raw stream: %w", err)
	}
	return st, subj, nil
}

// RawPublishConsume async-publishes n messages of size bytes to a new
// work-queue stream (at most 4096 acks pending), waits for every ack, then
// consumes and acks all n with a pull consumer. The stream is deleted
// afterwards.
func RawPublishConsume(ctx context.Context, url string, n, size int) (RawTimes, error) {
	var t RawTimes
	var pubErrs atomic.Int64
	nc, js, err := connect(url, "bench-raw",
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { pubErrs.Add(1) }))
	if err != nil {
		return t, err
	}
	defer nc.Close()
	st, subj, err := rawStream(ctx, js)
	if err != nil {
		return t, err
	}

	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'x'
	}
	stall := []jetstream.PublishOpt{jetstream.WithStallWait(time.Minute)}
	start, cpu := time.Now(), cpuTime()
	for range n {
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: payload}, stall...); err != nil {
			return t, fmt.Errorf("bench: raw publish: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return t, fmt.Errorf("%w: raw publish: %w", ErrBench, ctx.Err())
	}
	t.Publish, t.PublishCPU = time.Since(start), cpuTime()-cpu
	if e := pubErrs.Load(); e > 0 {
		return t, fmt.Errorf("%w: raw publish: %d of %d not acknowledged", ErrBench, e, n)
	}

	cnc, cjs, err := connect(url, "bench-raw-consumer")
	if err != nil {
		return t, err
	}
	defer cnc.Close()
	cst, err := cjs.Stream(ctx, st.CachedInfo().Config.Name)
	if err != nil {
		return t, fmt.Errorf("bench: %w", err)
	}
	cons, err := cst.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10_000,
	})
	if err != nil {
		return t, fmt.Errorf("bench: raw consumer: %w", err)
	}
	var got atomic.Int64
	done := make(chan struct{})
	var doneCPU time.Duration
	start, cpu = time.Now(), cpuTime()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		if got.Add(1) == int64(n) {
			doneCPU = cpuTime()
			close(done)
		}
	}, rawPull...)
	if err != nil {
		return t, fmt.Errorf("bench: raw consume: %w", err)
	}
	defer cc.Stop()
	select {
	case <-done:
	case <-ctx.Done():
		return t, fmt.Errorf("%w: raw consume: %d of %d: %w", ErrBench, got.Load(), n, ctx.Err())
	}
	t.Consume, t.ConsumeCPU = time.Since(start), doneCPU-cpu
	return t, nil
}

// hdrSent carries the publish time (unix ns) of a raw latency message.
const hdrSent = "Bench-Sent"

// RawLatency publishes n messages paced evenly over spread to a work-queue
// stream with a consumer already running, and returns the distribution of
// consume time minus publish time (carried in a header).
func RawLatency(ctx context.Context, url string, n, size int, spread time.Duration) (Percentiles, error) {
	nc, js, err := connect(url, "bench-raw-latency", jetstream.WithPublishAsyncMaxPending(maxPending))
	if err != nil {
		return Percentiles{}, err
	}
	defer nc.Close()
	st, subj, err := rawStream(ctx, js)
	if err != nil {
		return Percentiles{}, err
	}
	defer func() { _ = js.DeleteStream(context.Background(), st.CachedInfo().Config.Name) }()
	cnc, cjs, err := connect(url, "bench-raw-latency-consumer")
	if err != nil {
		return Percentiles{}, err
	}
	defer cnc.Close()
	cst, err := cjs.Stream(ctx, st.CachedInfo().Config.Name)
	if err != nil {
		return Percentiles{}, fmt.Errorf("bench: %w", err)
	}
	cons, err := cst.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10_000,
	})
	if err != nil {
		return Percentiles{}, fmt.Errorf("bench: raw consumer: %w", err)
	}
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	done := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now()
		_ = m.Ack()
		sent, _ := strconv.ParseInt(m.Headers().Get(hdrSent), 10, 64)
		mu.Lock()
		lat = append(lat, now.Sub(time.Unix(0, sent)))
		if len(lat) == n {
			close(done)
		}
		mu.Unlock()
	}, rawPull...)
	if err != nil {
		return Percentiles{}, fmt.Errorf("bench: raw consume: %w", err)
	}
	defer cc.Stop()

	payload := make([]byte, size)
	stall := []jetstream.PublishOpt{jetstream.WithStallWait(time.Minute)}
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(float64(spread) * float64(i) / float64(max(n-1, 1))))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		m := &nats.Msg{Subject: subj, Data: payload, Header: nats.Header{}}
		m.Header.Set(hdrSent, strconv.FormatInt(time.Now().UnixNano(), 10))
		if _, err := js.PublishMsgAsync(m, stall...); err != nil {
			return Percentiles{}, fmt.Errorf("bench: raw publish: %w", err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		got := len(lat)
		mu.Unlock()
		return Percentiles{}, fmt.Errorf("%w: raw latency: %d of %d consumed: %w", ErrBench, got, n, ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	return percentiles(lat), nil
}

// RawRecordWrites measures what a run's record write costs at the least:
// n messages of size bytes (a run record's size), each on a subject of its
// own with Nats-Expected-Last-Subject-Sequence: 0 (a create, as a run's
// first record write is), async-published with 4096 acks pending to a
// fresh stream that keeps one message per subject, as a KV bucket does.
// Its CPU per write, added to raw's CPU per message, is the floor of a
// run's cost: what the design's writes take before any jetflow code runs.
func RawRecordWrites(ctx context.Context, url string, n, size int) (Timing, error) {
	var pubErrs atomic.Int64
	nc, js, err := connect(url, "bench-raw-records",
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { pubErrs.Add(1) }))
	if err != nil {
		return Timing{}, err
	}
	defer nc.Close()
	id := nuid.Next()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:              "BENCHREC_" + id,
		Subjects:          []string{"benchrec." + id + ".>"},
		MaxMsgsPerSubject: 1,
		Storage:           jetstream.FileStorage,
		Replicas:          max(int(replicas.Load()), 1),
	})
	if err != nil {
		return Timing{}, fmt.Errorf("bench: raw record stream: %w", err)
	}
	defer func() { _ = js.DeleteStream(context.Background(), st.CachedInfo().Config.Name) }()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'x'
	}
	prefix := "benchrec." + id + "."
	stall := []jetstream.PublishOpt{jetstream.WithStallWait(time.Minute)}
	start, cpu := time.Now(), cpuTime()
	for i := range n {
		m := &nats.Msg{Subject: prefix + strconv.Itoa(i), Data: payload,
			Header: nats.Header{"Nats-Expected-Last-Subject-Sequence": []string{"0"}}}
		if _, err := js.PublishMsgAsync(m, stall...); err != nil {
			return Timing{}, fmt.Errorf("bench: raw record write: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return Timing{}, fmt.Errorf("%w: raw record writes: %w", ErrBench, ctx.Err())
	}
	t := Timing{Wall: time.Since(start), CPU: cpuTime() - cpu}
	if e := pubErrs.Load(); e > 0 {
		return t, fmt.Errorf("%w: raw record writes: %d of %d not acknowledged", ErrBench, e, n)
	}
	return t, nil
}

// Floor is what a run costs at the least, from RawRecordWrites: raw's
// message plus the run's record writes, and the CPU ratios that allows.
type Floor struct {
	// Write is the CPU of one raw record write.
	Write time.Duration
	// RecordSize is the size of the records written (a success record).
	RecordSize int
}

// Ceiling is the CPU ratio a run of writes record writes would reach if
// jetflow and its client code cost nothing beyond them: raw per message
// over raw per message plus the writes.
func (f Floor) Ceiling(raw time.Duration, writes int) float64 {
	return ratio(float64(raw), float64(raw+time.Duration(writes)*f.Write))
}

// successRecordSize is the encoded size of a no-op run's success record
// with args of about size bytes: what RawRecordWrites writes.
func successRecordSize(size int) int {
	now := time.Now().UTC()
	c := call(size)
	args, err := json.Marshal(c.Args)
	if err != nil {
		return size + 300
	}
	r := &jetflow.Run{
		ID: nuid.Next(), Name: c.Name, Kind: c.Kind, Args: args, State: jetflow.Success,
		ScheduledTime: now, CreationTime: now, StartedTime: now, CompletedTime: now, Attempts: 1,
	}
	b, err := kv.EncodeRun(r)
	if err != nil {
		return size + 300
	}
	return len(b)
}

// measureFloor is RawRecordWrites of n success-sized records, as a Floor.
func measureFloor(ctx context.Context, url string, n, argsSize int) (Floor, error) {
	f := Floor{RecordSize: successRecordSize(argsSize)}
	t, err := RawRecordWrites(ctx, url, n, f.RecordSize)
	if err != nil {
		return f, err
	}
	f.Write = per(t.CPU, n)
	return f, nil
}
