package producer_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

type winArgs struct {
	I   int    `json:"i"`
	Pad string `json:"pad,omitempty"`
}

var winFn = jetflow.Define[winArgs]("win.work")

// queuedPerRun counts the messages waiting in the function stream per run
// id of winFn.
func queuedPerRun(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	scfg := streams.Config{}.WithDefaults()
	st, err := js.Stream(context.Background(), scfg.FunctionStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(scfg.FunctionFilter(winFn.Name())))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for subj, n := range info.State.Subjects {
		_, id, ok := scfg.ParseFunctionSubject(subj)
		if !ok {
			t.Fatalf("subject %q is not a run's", subj)
		}
		out[id] = n
	}
	return out
}

// Many goroutines enqueue at once, their first tries pipelined on one
// connection; some runs are too large for the function stream (its
// MaxMsgSize, below the server's max payload, so only the stream can
// refuse them). Each caller gets its own outcome: every small run is
// stored once and its Enqueue returned nil; every large one returned the
// stream's error and nothing of it is stored.
func TestConcurrentEnqueuesEachGetTheirOwnError(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	scfg := streams.Config{}.WithDefaults()
	st, err := ts.JS.Stream(ctx, scfg.FunctionStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgSize = 2048
	if _, err := ts.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	const n, every = 400, 10 // every 10th run is too large
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			a := winArgs{I: i}
			if i%every == 0 {
				a.Pad = strings.Repeat("x", 4096)
			}
			<-start
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			ids[i], errs[i] = p.Enqueue(cctx, winFn.With(a))
		})
	}
	close(start)
	wg.Wait()
	queued := queuedPerRun(t, ts.JS)
	good := 0
	for i := range n {
		if i%every == 0 {
			var api *jetstream.APIError
			if errs[i] == nil || !errors.As(errs[i], &api) || api.ErrorCode != jetstream.JSErrCodeStreamMessageExceedsMaximum {
				t.Errorf("run %d (too large): Enqueue = %q, %v; want the stream's size error", i, ids[i], errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("run %d: Enqueue: %v", i, errs[i])
			continue
		}
		good++
		if queued[ids[i]] != 1 {
			t.Errorf("run %d (%s): %d messages stored, want 1", i, ids[i], queued[ids[i]])
		}
	}
	if len(queued) != good || good != n-n/every {
		t.Fatalf("%d runs stored, %d Enqueues returned nil; want %d of each", len(queued), good, n-n/every)
	}
}

// The server restarts while many goroutines enqueue, their tries pipelined
// on one connection: every Enqueue that returned nil has its run stored,
// exactly once, and every call returns nil once the server is back (the
// calls ride the restart out within their ctx).
func TestEnqueueWindowRidesOutAServerRestart(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const g = 64
	var mu sync.Mutex
	var ids []string
	var failed []error
	var ok atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range g {
		wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				id, err := p.Enqueue(cctx, winFn.With(winArgs{I: i*1_000_000 + j}))
				cancel()
				mu.Lock()
				if err != nil {
					failed = append(failed, err)
				} else {
					ids = append(ids, id)
				}
				mu.Unlock()
				ok.Add(1)
			}
		})
	}
	testserver.Eventually(t, 20*time.Second, "enqueues before the restart", func() bool { return ok.Load() >= 500 })
	ts.Restart()
	after := ok.Load()
	testserver.Eventually(t, 30*time.Second, "enqueues after the restart", func() bool { return ok.Load() >= after+500 })
	close(stop)
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d Enqueues failed through a restart; first: %v", len(failed), failed[0])
	}
	queued := queuedPerRun(t, ts.JS)
	for _, id := range ids {
		if queued[id] != 1 {
			t.Errorf("run %s: Enqueue returned nil, %d messages stored; want 1", id, queued[id])
		}
	}
	if len(queued) != len(ids) {
		t.Fatalf("%d runs stored, %d Enqueues returned nil", len(queued), len(ids))
	}
}
