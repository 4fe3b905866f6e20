package kv_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go/jetstream"
)

// slowConsumer is a real consumer whose first empty no-wait fetches come
// back with nothing, as nats.go's do when the server sends no message for
// a second (a busy server): the messages stay pending.
type slowConsumer struct {
	jetstream.Consumer
	empty int // fetches still to come back empty
}

type emptyBatch struct{ ch chan jetstream.Msg }

func (b emptyBatch) Messages() <-chan jetstream.Msg { return b.ch }
func (b emptyBatch) Error() error                   { return nil }

func (c *slowConsumer) FetchNoWait(n int) (jetstream.MessageBatch, error) {
	if c.empty > 0 {
		c.empty--
		ch := make(chan jetstream.Msg)
		close(ch)
		return emptyBatch{ch}, nil
	}
	return c.Consumer.FetchNoWait(n)
}

// fetchSetup stores n messages and returns a fresh consumer of them (as
// the run index's readers make: headers only, no acks).
func fetchSetup(t *testing.T, n int) (*testserver.Env, jetstream.Stream, jetstream.Consumer) {
	t.Helper()
	ts := testserver.Start(t)
	ctx := context.Background()
	st, err := ts.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := ts.JS.Publish(ctx, fmt.Sprintf("f.%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, HeadersOnly: true, MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	return ts, st, c
}

// Empty fetches while messages are pending are made again: every message
// is handed, in order; a read that took the first empty fetch for the end
// would hand none.
func TestFetchPendingThroughEmptyFetches(t *testing.T) {
	t.Parallel()
	_, _, c := fetchSetup(t, 25)
	var seqs []uint64
	err := kv.FetchPending(context.Background(), &slowConsumer{Consumer: c, empty: 3}, 25, 10, func(m jetstream.Msg) (bool, error) {
		md, err := m.Metadata()
		if err != nil {
			return false, err
		}
		seqs = append(seqs, md.Sequence.Stream)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 25 || seqs[0] != 1 || seqs[24] != 25 {
		t.Fatalf("handed %v, want 1..25", seqs)
	}
}

// A consumer that never delivers what it has pending ends in
// ErrFetchStalled, not in a short read.
func TestFetchPendingStalled(t *testing.T) {
	t.Parallel()
	_, _, c := fetchSetup(t, 5)
	handed := 0
	err := kv.FetchPending(context.Background(), &slowConsumer{Consumer: c, empty: 1 << 30}, 5, 10, func(jetstream.Msg) (bool, error) {
		handed++
		return true, nil
	})
	if !errors.Is(err, kv.ErrFetchStalled) || handed != 0 {
		t.Fatalf("err %v after %d handed, want ErrFetchStalled after 0", err, handed)
	}
}

// Messages removed after the consumer counted them end the read with what
// there is, at once and without an error; each may stop it early too.
func TestFetchPendingRemovedAndStopped(t *testing.T) {
	t.Parallel()
	_, st, c := fetchSetup(t, 10)
	ctx := context.Background()
	for seq := uint64(6); seq <= 10; seq++ {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	handed := 0
	start := time.Now()
	if err := kv.FetchPending(ctx, c, 10, 3, func(jetstream.Msg) (bool, error) { handed++; return true, nil }); err != nil {
		t.Fatal(err)
	}
	if handed != 5 {
		t.Fatalf("handed %d, want the 5 left", handed)
	}
	t.Logf("read with 5 of 10 removed in %v", time.Since(start))

	_, _, c2 := fetchSetup(t, 10)
	handed = 0
	if err := kv.FetchPending(ctx, c2, 10, 4, func(jetstream.Msg) (bool, error) { handed++; return handed < 6, nil }); err != nil {
		t.Fatal(err)
	}
	if handed != 6 {
		t.Fatalf("handed %d after each said stop at the 6th", handed)
	}
}
