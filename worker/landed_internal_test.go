package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
)

// landUnseen writes the claim of j's attempt as its late claim does, without
// telling j: a claim (an 8 MB one, say) whose reply came after its write
// had timed out, as seen on a loaded machine.
func landUnseen(ctx context.Context, j *jobCore) error {
	j.mu.Lock()
	r := *j.rec
	from, rev := j.rec.State, j.rev
	j.mu.Unlock()
	r.State = jetflow.InProgress
	r.Attempts = j.env.Attempt
	if r.StartedTime.IsZero() {
		r.StartedTime = j.started
	}
	r.Owner = j.w.cfg.ID
	r.Heartbeat = time.Now().UTC()
	_, err := j.w.writeRecord(ctx, engine.Claim, from, &r, rev)
	return err
}

// provisionedWorker is a worker of cfg, not started, on a server with
// jetflow's streams provisioned.
func provisionedWorker(t *testing.T, cfg Config) (*testserver.Env, *Worker) {
	t.Helper()
	env := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := streams.Provision(ctx, env.JS, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	w, err := New(ctx, env.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return env, w
}

// startWorker starts w (stopped when the test ends) and returns a producer
// on env.
func startWorker(t *testing.T, env *testserver.Env, w *Worker) *producer.Producer {
	t.Helper()
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = w.Stop(sctx)
	})
	p, err := producer.New(context.Background(), env.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// An attempt whose claim landed unseen still stores its outcome: the
// outcome's write conflicts with the claim, which is this attempt's own, and
// is written over it. Before, the outcome was discarded as "run changed
// meanwhile" and the run stayed in progress, its message acknowledged, with
// a live owner: only a repair sweep would have run it again.
func TestOutcomeOverOwnClaimLandedUnseen(t *testing.T) {
	env, w := provisionedWorker(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fn := jetflow.Define[string]("outcome.unseen")
	Handle(w, fn, func(ctx context.Context, j *Job[string]) error {
		if err := landUnseen(ctx, j.jobCore); err != nil {
			return jetflow.Permanent(fmt.Errorf("the test's claim: %w", err))
		}
		if j.Args == "fail" && j.Attempt() == 1 {
			return errors.New("fails its first attempt")
		}
		return nil
	}, Options{Backoff: jetflow.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	p := startWorker(t, env, w)
	for _, args := range []string{"succeed", "fail"} {
		id, err := p.Enqueue(ctx, fn.With(args))
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := p.Wait(wctx, id)
		wcancel()
		if err != nil {
			cur, gerr := p.Get(ctx, id)
			t.Fatalf("%s: run %s did not end: %v; its record %+v, %v", args, id, err, cur, gerr)
		}
		want := 1
		if args == "fail" {
			want = 2 // a retry after the first attempt's failure, written over its claim
		}
		if r.State != jetflow.Success || r.Attempts != want {
			t.Fatalf("%s: %s after %d attempts (%s), want success after %d", args, r.State, r.Attempts, r.Error, want)
		}
	}
}

// An outcome whose write conflicts while the record cannot be read (the
// runs bucket electing a leader, say) is no conflict when the worker gives
// up (stopping, or after its deadline): the record may be this attempt's own
// claim, landed unseen. Reported as a conflict, outcomeLost would
// acknowledge the message and discard the outcome, leaving the run in
// progress with its message gone; as a failed write the message is handed
// back, and its redelivery finds the record as it is.
func TestOutcomeConflictWithRecordUnreadIsNoConflict(t *testing.T) {
	env, w := provisionedWorker(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now().UTC()
	r := &jetflow.Run{ID: "unread-1", Name: "outcome.unread", Kind: jetflow.Retryable, Args: []byte(`"x"`),
		State: jetflow.Pending, ScheduledTime: now, CreationTime: now}
	rev, err := w.runs.Write(ctx, engine.Schedule, engine.None, r, 0)
	if err != nil {
		t.Fatal(err)
	}
	// This attempt's claim, landed unseen: the outcome's write from rev
	// conflicts with it.
	claim := *r
	claim.State, claim.Attempts, claim.StartedTime, claim.Owner, claim.Heartbeat = jetflow.InProgress, 1, now, w.cfg.ID, now
	if _, err := w.runs.Write(ctx, engine.Claim, jetflow.Pending, &claim, rev); err != nil {
		t.Fatal(err)
	}
	// Reads fail from here on: the worker's reads go through a connection
	// that is closed.
	nc2, js2 := env.Connect()
	st, err := kv.Open(ctx, js2, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	nc2.Close()
	w.store = st
	w.readConfirmed = st.Decide
	w.mu.Lock()
	w.stopping = true // one try, then the worker gives up
	w.mu.Unlock()
	out := claim
	out.State, out.CompletedTime = jetflow.Success, now
	_, err = w.writeOutcome(ctx, engine.Succeed, jetflow.Pending, &out, rev, now)
	if err == nil {
		t.Fatal("outcome written without its record read")
	}
	if errors.Is(err, kv.ErrConflict) {
		t.Fatalf("an unread record reported as a conflict (the outcome would be discarded, its message acknowledged): %v", err)
	}
}

// After a refused outcome write, a read answered by a replica behind (the
// connection may not ask the leader, and a direct get stood in for it) is
// no answer: a record not past the refused revision, or missing after a
// refused create, counts as unread, so the outcome is not discarded as a
// conflict. Before, the outcome of a run whose own heartbeat had landed
// unseen was dropped on such a read and its message acknowledged: the run
// stayed in progress until a repair sweep ran it again (its handler twice).
func TestOutcomeConflictReadByAReplicaBehindIsNoConflict(t *testing.T) {
	for _, create := range []bool{false, true} {
		t.Run(fmt.Sprintf("create=%v", create), func(t *testing.T) {
			env, w := provisionedWorker(t, Config{})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			behind := behindStore(t, env)
			var err error
			now := time.Now().UTC()
			r := &jetflow.Run{ID: "behind-1", Name: "outcome.behind", Kind: jetflow.Retryable, Args: []byte(`"x"`),
				State: jetflow.Pending, ScheduledTime: now, CreationTime: now}
			claim := *r
			claim.State, claim.Attempts, claim.StartedTime, claim.Owner, claim.Heartbeat = jetflow.InProgress, 1, now, w.cfg.ID, now
			var rev uint64 // what the worker knows of the record
			if create {
				// A run published without a record: its claim landed
				// unseen; the replica behind has no record yet.
				if _, err := w.runs.Write(ctx, engine.Claim, engine.None, &claim, 0); err != nil {
					t.Fatal(err)
				}
			} else {
				// The replica behind has the pending record; the worker
				// knows its claim; its next heartbeat landed unseen.
				if _, err := behind.Write(ctx, r, 0, engine.None); err != nil {
					t.Fatal(err)
				}
				if _, err := w.runs.Write(ctx, engine.Schedule, engine.None, r, 0); err != nil {
					t.Fatal(err)
				}
				if rev, err = w.runs.Write(ctx, engine.Claim, jetflow.Pending, &claim, 1); err != nil {
					t.Fatal(err)
				}
				beat := claim
				beat.Heartbeat = now.Add(time.Second)
				if _, err := w.runs.Write(ctx, engine.Beat, jetflow.InProgress, &beat, rev); err != nil {
					t.Fatal(err)
				}
			}
			readsBehind(w, behind)
			w.mu.Lock()
			w.stopping = true // one try, then the worker gives up
			w.mu.Unlock()
			out := claim
			out.State, out.CompletedTime = jetflow.Success, now
			from := jetflow.InProgress
			if create {
				from = engine.None
			}
			_, err = w.writeOutcome(ctx, engine.Succeed, from, &out, rev, now)
			if err == nil {
				t.Fatal("outcome written from a stale revision")
			}
			if errors.Is(err, kv.ErrConflict) || !strings.Contains(err.Error(), "a replica behind") {
				t.Fatalf("a replica behind's read not taken as unread (a conflict would discard the outcome and acknowledge its message): %v", err)
			}
		})
	}
}

// behindStore is a store for a replica behind: buckets of their own
// (prefix "behind"), for the test to write an older state in.
func behindStore(t *testing.T, env *testserver.Env) *kv.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := streams.Config{Prefix: "behind"}
	if err := streams.Provision(ctx, env.JS, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Open(ctx, env.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// readsBehind makes w's reads after a refused write answered by behind, by
// a direct get, as when the leader cannot answer.
func readsBehind(w *Worker, behind *kv.Store) {
	w.readConfirmed = func(ctx context.Context, id string) (*jetflow.Run, bool, error) {
		r, err := behind.Show(ctx, id)
		return r, false, err
	}
}

// A claim refused because it had landed, whose first read-back is answered
// "missing" by a leader that was just cut off (it answers from its own
// store, which never had the record): the missing record is no answer
// (kv.Gone is read again, as Unread is), and the claim is found landed
// once the leader answers. Before, the claim was reported as a conflict:
// its handler never ran, and its record showed it owned by this worker
// until another took it over as lost (the partition scenario's lost
// takeovers); an at-most-once run failed with ErrWorkerLost unrun.
func TestClaimReadBackMissingOnADeposedLeaderIsReadAgain(t *testing.T) {
	_, w, _ := claimEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	claim := claimOf(w, "deposed-1")
	r := claim
	r.State, r.Attempts, r.StartedTime, r.Owner, r.Heartbeat = jetflow.Pending, 0, time.Time{}, "", time.Time{}
	rev, err := w.runs.Write(ctx, engine.Schedule, engine.None, &r, 0)
	if err != nil {
		t.Fatal(err)
	}
	landed := claim
	// The claim landed with its reply lost.
	stored, err := w.runs.Write(ctx, engine.Claim, jetflow.Pending, &landed, rev)
	if err != nil {
		t.Fatal(err)
	}
	reads := 0
	w.readConfirmed = func(ctx context.Context, id string) (*jetflow.Run, bool, error) {
		reads++
		if reads == 1 {
			return nil, true, fmt.Errorf("run %s: %w", id, kv.ErrNotFound) // the deposed leader's answer
		}
		return w.store.Decide(ctx, id)
	}
	got, err := w.claim(ctx, jetflow.Pending, &claim, rev)
	if err != nil {
		t.Fatalf("claim: %v (after %d reads): a record read as missing once is taken for a conflict", err, reads)
	}
	if got != stored {
		t.Fatalf("claim settled at revision %d, want the landed claim's %d", got, stored)
	}
}
