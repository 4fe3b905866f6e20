package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

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
	}, jetstream.PullMaxMessages(1000))
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
	}, jetstream.PullMaxMessages(1000))
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
