package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// staleReplicas makes about half of the direct gets of the runs and
// journal buckets answer from a stream that is behind: a mirror of each
// that holds one key only and answers the bucket's direct gets
// (MirrorDirect). That is what a replica does on a cluster, a moment
// behind its leader, or up to 10% behind after a restart.
func staleReplicas(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	e.StaleRuns(t)
	jb := streams.Config{}.WithDefaults().JournalBucket()
	if _, err := e.JS.Publish(ctx, streams.KVSubject(jb, "decoy-1.wf"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	e.StaleMirror(t, streams.KVStream(jb), "STALE_"+jb, jetstream.StreamSource{FilterSubject: streams.KVSubject(jb, "decoy-1.wf")}, 1)
}

// Workflows that sleep run to their end, each step once, while replicas
// that are behind answer half of the reads: a segment that finds no
// workflow record, or a wake-up that finds no waiting cursor, asks the
// leader before it gives up.
func TestWorkflowsFinishWhenReplicasAreBehind(t *testing.T) {
	t.Parallel()
	e := setup(t)
	staleReplicas(t, e)
	e.startScheduler(t)
	def := workflow.Define("test.stale", func(wf *workflow.Context, in int) (int, error) {
		a, err := workflow.Step(wf, "a", func(ctx context.Context) (int, error) {
			e.inc(fmt.Sprintf("a-%d", in))
			return in, nil
		})
		if err != nil {
			return 0, err
		}
		wf.Sleep(100 * time.Millisecond)
		return workflow.Step(wf, "b", func(ctx context.Context) (int, error) {
			e.inc(fmt.Sprintf("b-%d", in))
			return a + 1, nil
		})
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	const n = 20
	ids := make([]string, n)
	for i := range n {
		id, err := workflow.Start(ctx, e.P, def, i)
		must(t, err)
		ids[i] = id
	}
	for i, id := range ids {
		out, err := workflow.Result(ctx, e.P, def, id)
		if err != nil {
			st, serr := workflow.Get(context.Background(), e.P, id)
			if serr == nil {
				t.Logf("record %+v", st.Run)
				for _, s := range st.Steps {
					t.Logf("step %+v", s)
				}
			}
			for k := 1; k <= 3; k++ {
				r, err := e.P.Get(context.Background(), workflow.SegmentID(id, k))
				t.Logf("segment %d: %+v %v", k, r, err)
			}
			t.Fatalf("workflow %d: %v", i, err)
		}
		if out != i+1 {
			t.Fatalf("workflow %d: result %d, want %d", i, out, i+1)
		}
	}
	for i := range n {
		if a, b := e.n(fmt.Sprintf("a-%d", i)), e.n(fmt.Sprintf("b-%d", i)); a != 1 || b != 1 {
			t.Errorf("workflow %d: step a ran %d times, b %d, want once each", i, a, b)
		}
	}
}

type callArgs struct {
	N int `json:"n"`
}

var staleCalled = jetflow.Define[callArgs]("test.stale.called")

// A workflow waiting for a function call resumes when the call ends, while
// a replica that is behind still shows the call in progress to half of the
// direct gets: the segment that replays it, finding it "in progress", parks
// again, and its check after parking asks the leader (the call's wake-up
// has come already; nothing else would resume it). The replica is a mirror
// that moves an in-progress copy of each call's record onto the call's key.
func TestWorkflowResumesWhenAReplicaShowsItsCallRunning(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startScheduler(t)
	release := make(chan struct{})
	def := workflow.Define("test.stale.call", func(wf *workflow.Context, in int) (int, error) {
		return workflow.Call[int](wf, staleCalled.With(callArgs{N: in}))
	})
	e.startWorker(t, func(w *worker.Worker) {
		must(t, workflow.Register(w, def))
		worker.Handle(w, staleCalled, func(ctx context.Context, j *worker.Job[callArgs]) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			return j.SetResult(j.Args.N + 1)
		}, worker.Options{Concurrency: 20})
	})
	ctx := testCtx(t)
	const n = 6
	ids := make([]string, n)
	calls := make([]string, n)
	for i := range n {
		id, err := workflow.Start(ctx, e.P, def, i)
		must(t, err)
		ids[i] = id
		testserver.Eventually(t, 20*time.Second, "the call started", func() bool {
			st, err := workflow.Get(ctx, e.P, id)
			if err != nil || len(st.Steps) == 0 || st.Steps[0].Waits == nil || st.Steps[0].Waits.Run == "" {
				return false
			}
			calls[i] = st.Steps[0].Waits.Run
			r, err := e.P.Get(ctx, calls[i])
			return err == nil && r.State == jetflow.InProgress
		})
	}
	cfg := streams.Config{}.WithDefaults()
	st := engine.Of(e.P).Store()
	var moves []jetstream.SubjectTransformConfig
	for i, call := range calls {
		r, _, err := st.Decide(ctx, call)
		must(t, err)
		r.ID = fmt.Sprintf("stale-%d", i)
		_, err = st.Create(ctx, r)
		must(t, err)
		moves = append(moves, jetstream.SubjectTransformConfig{
			Source: streams.KVSubject(cfg.RunsBucket(), r.ID), Destination: streams.KVSubject(cfg.RunsBucket(), call)})
	}
	e.StaleMirror(t, streams.KVStream(cfg.RunsBucket()), "STALE_CALLS", jetstream.StreamSource{SubjectTransforms: moves}, n)
	close(release)
	for i, id := range ids {
		out, err := workflow.Result(ctx, e.P, def, id)
		if err != nil {
			t.Fatalf("workflow %d: %v", i, err)
		}
		if out != i+1 {
			t.Fatalf("workflow %d: %d, want %d", i, out, i+1)
		}
	}
}
