package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// maxPending is the async publish window of raw publishing and of
// jetflow's EnqueueAsync (the window of jetflow bench's raw figure).
const maxPending = 4096

// rawPull are the pull options of the raw consumer, as jetflow bench's raw
// figure pulls: 1000 ahead, the worker's expiry and heartbeat.
var rawPull = []jetstream.PullConsumeOpt{
	jetstream.PullMaxMessages(1000), jetstream.PullExpiry(2 * time.Second), jetstream.PullHeartbeat(500 * time.Millisecond),
}

// startNATS starts an embedded nats-server with JetStream on file storage
// in dir, syncing every 10 ms (jetflow's default durability).
func startNATS(dir string) (*embedded.Server, error) {
	s, err := embedded.Start(embedded.Options{Dir: dir, Sync: embedded.SyncInterval, Warnings: os.Stderr})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	nc, js, err := connect(s.ClientURL(), "peers-keep")
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: keepStream, Subjects: []string{"peers.keep"}, Storage: jetstream.FileStorage})
		cancel()
		nc.Close()
	}
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("stream %s: %w", keepStream, err)
	}
	return s, nil
}

// keepStream is a stream the server keeps while dropStreams deletes the
// others: nats-server v2.15.2 removes an account's streams directory in a
// goroutine once its last stream is deleted, which races with the next
// phase creating its first stream (jetflow bench does the same).
const keepStream = "PEERS_KEEP"

// dropStreams deletes every stream of the server but keepStream, so that
// one phase's data does not weigh on the next.
func dropStreams(ctx context.Context, url string) error {
	nc, js, err := connect(url, "peers-cleanup")
	if err != nil {
		return err
	}
	defer nc.Close()
	names := js.StreamNames(ctx)
	var all []string
	for n := range names.Name() {
		if n != keepStream {
			all = append(all, n)
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("list streams: %w", err)
	}
	for _, n := range all {
		if err := js.DeleteStream(ctx, n); err != nil {
			return fmt.Errorf("delete stream %s: %w", n, err)
		}
	}
	return nil
}

// connect opens a connection (one per role, as separate processes would).
func connect(url, name string, opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// rawPublishConsume async-publishes n messages of size bytes to a new
// file-storage work-queue stream (at most maxPending unacknowledged), waits
// for every ack, then consumes and acks all n with a pull consumer on
// another connection. The rate is n over both phases' time.
func rawPublishConsume(ctx context.Context, url string, n, size int) (float64, string, error) {
	var pubErrs atomic.Int64
	nc, js, err := connect(url, "peers-raw",
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { pubErrs.Add(1) }))
	if err != nil {
		return 0, "", err
	}
	defer nc.Close()
	id := nuid.Next()
	subj := "peersraw." + id
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "PEERSRAW_" + id, Subjects: []string{subj},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return 0, "", fmt.Errorf("raw stream: %w", err)
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'x'
	}
	stall := jetstream.WithStallWait(time.Minute)
	start := time.Now()
	for range n {
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: payload}, stall); err != nil {
			return 0, "", fmt.Errorf("raw publish: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, "", fmt.Errorf("raw publish: %w", ctx.Err())
	}
	published := time.Since(start)
	if e := pubErrs.Load(); e > 0 {
		return 0, "", fmt.Errorf("raw publish: %d of %d not acknowledged", e, n)
	}

	cnc, cjs, err := connect(url, "peers-raw-consumer")
	if err != nil {
		return 0, "", err
	}
	defer cnc.Close()
	cst, err := cjs.Stream(ctx, st.CachedInfo().Config.Name)
	if err != nil {
		return 0, "", err
	}
	cons, err := cst.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10_000,
	})
	if err != nil {
		return 0, "", fmt.Errorf("raw consumer: %w", err)
	}
	var got atomic.Int64
	done := make(chan struct{})
	cstart := time.Now()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		if got.Add(1) == int64(n) {
			close(done)
		}
	}, rawPull...)
	if err != nil {
		return 0, "", fmt.Errorf("raw consume: %w", err)
	}
	defer cc.Stop()
	select {
	case <-done:
	case <-ctx.Done():
		return 0, "", fmt.Errorf("raw consume: %d of %d: %w", got.Load(), n, ctx.Err())
	}
	consumed := time.Since(cstart)
	return rate(n, published+consumed), "", nil
}
