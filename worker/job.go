package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/payload"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
)

// Job is one attempt of a run, as a handler sees it.
type Job[A any] struct {
	// Args are the decoded arguments.
	Args A
	*jobCore
}

// jobCore is the untyped part of a Job.
type jobCore struct {
	w    *Worker
	fn   *fnEntry
	env  streams.Envelope
	rec  *jetflow.Run // current record (nil until the worker knows it)
	mu   sync.Mutex
	rev  uint64
	kids []string
	nkid int

	progress     *jetflow.Progress
	progressDirt bool
	lastFlush    time.Time
	result       json.RawMessage
	started      time.Time
	closed       bool // the outcome is being written: no more record writes
	fresh        bool // Fresh's
}

// ID is the run id.
func (j *jobCore) ID() string { return j.env.ID }

// Name is the function name.
func (j *jobCore) Name() string { return j.env.Function }

// Attempt is this attempt's number, from 1.
func (j *jobCore) Attempt() int { return j.env.Attempt }

// Fresh reports whether, as far as the worker can tell, no handler ran this
// run before: a first delivery of its first attempt, not possibly replayed
// by a restarted server (see Config.ReplayGrace), started without reading
// its record. A handler may then skip looking for what an earlier try left
// behind (workflows skip reading their journal). False says nothing: the
// run may or may not have run before.
func (j *jobCore) Fresh() bool { return j.fresh }

// MaxAttempts is the number of attempts this run may have.
func (j *jobCore) MaxAttempts() int { return j.maxAttempts() }

// ScheduledTime is when the run was due.
func (j *jobCore) ScheduledTime() time.Time { return j.env.Scheduled }

// CreationTime is when the run was scheduled.
func (j *jobCore) CreationTime() time.Time { return j.env.Created }

// Parent is the id of the run that scheduled this one, or "".
func (j *jobCore) Parent() string { return j.env.Parent }

func (j *jobCore) maxAttempts() int {
	if j.fn.kind == jetflow.AtMostOnce {
		return 1
	}
	if j.env.MaxAttempts > 0 {
		return j.env.MaxAttempts
	}
	return j.fn.opts.MaxAttempts
}

// resultRoom is what SetResult leaves of the max payload for a record's
// fields beside its args and result.
const resultRoom = 2048

// SetResult stores v (JSON-encoded) on the run record when the run succeeds.
// A result above a quarter of the server's max payload goes to the
// payloads bucket when the handler returns, the record keeping a reference
// (docs/wire-format.md, "Large payloads"); one above 32 MiB is
// ErrResultTooLarge.
func (j *jobCore) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: result: %v", jetflow.ErrBadArgs, err)
	}
	// Args and result within the server's max payload less resultRoom for
	// the record's other fields: args at the producer's limit (max payload
	// less 4096) still leave room for a result of up to 2 KB.
	// A result above payload.Threshold goes to the payloads bucket when
	// the handler returns (offloadResult): the record holds its reference.
	max := j.w.nc.MaxPayload()
	switch {
	case len(b) > payload.MaxSize:
		return fmt.Errorf("%w: result of %d bytes, more than jetflow offloads (%d)", ErrResultTooLarge, len(b), payload.MaxSize)
	case payload.Above(b, max):
	case max > 0 && int64(len(b)+len(j.env.Args)+resultRoom) > max:
		return fmt.Errorf("%w: result of %d bytes does not fit the server's max payload %d with the args", ErrResultTooLarge, len(b), max)
	}
	j.mu.Lock()
	j.result = b
	j.mu.Unlock()
	return nil
}

// Progress reports progress. Writes are coalesced: at most one record write
// per Config.ProgressInterval, and the last value is always written before
// the run ends. The first report moves the record to inProgress.
func (j *jobCore) Progress(ctx context.Context, p jetflow.Progress) error {
	j.mu.Lock()
	p.Updated = j.w.now().UTC()
	j.progress = &p
	j.progressDirt = true
	due := j.w.now().Sub(j.lastFlush) >= j.w.cfg.ProgressInterval
	j.mu.Unlock()
	if !due {
		return nil
	}
	return j.flushProgress(ctx)
}

func (j *jobCore) flushProgress(ctx context.Context) error { return j.write(ctx, writeProgress) }

// beat writes the claim's heartbeat (and any pending progress).
func (j *jobCore) beat(ctx context.Context) error { return j.write(ctx, writeBeat) }

// claim writes the claim of a run not claimed yet.
func (j *jobCore) claim(ctx context.Context) error { return j.write(ctx, writeClaim) }

// What a record write of a running run is for.
const (
	writeProgress = iota // pending progress only
	writeBeat            // the heartbeat of a claimed run (and progress)
	writeClaim           // the claim of an unclaimed run
)

// work is what j's attempt writes with its record (j.mu held, or the
// handler not started).
func (j *jobCore) work() engine.Work {
	return engine.Work{Owner: j.w.cfg.ID, Attempt: j.env.Attempt, Started: j.started, Progress: j.progress, Children: j.kids}
}

func (j *jobCore) write(ctx context.Context, mode int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed || j.rec == nil {
		return nil
	}
	claimed := j.rec.State == jetflow.InProgress
	switch {
	case mode == writeProgress && !j.progressDirt,
		mode == writeBeat && !claimed && !j.progressDirt,
		mode == writeClaim && claimed:
		return nil
	}
	r := engine.BeatRun(j.rec, j.work(), j.w.now())
	step := engine.Beat
	if !claimed {
		step = engine.Claim
	}
	rev, err := j.w.writeRecord(ctx, step, j.rec.State, r, j.rev)
	if errors.Is(err, kv.ErrConflict) {
		// A write of ours may have landed with its reply lost: the record
		// is then this very claim, and we go on from its revision.
		v, cur, gerr := engine.ReadBack(ctx, j.w.readConfirmed, r.ID, j.rev, engine.ClaimOf(r))
		switch {
		case v == kv.Landed:
			j.rec, j.rev = cur, cur.Revision // what it lacks is written next time
			return nil
		case v == kv.Superseded && cur != nil && cur.State == jetflow.Canceled:
			// Canceled: the handler is told so, even when this write
			// finds it before the cancel notice does.
			return fmt.Errorf("%w: %w", jetflow.ErrCanceled, err)
		case v == kv.Superseded:
			return engine.Superseded(err)
		}
		// Not landed, or unread: the run may still be ours. Not a
		// conflict, so that the caller tries again instead of giving the
		// run up.
		return fmt.Errorf("worker: write of run %s refused (%v), read back %v (%v): %w", r.ID, err, v, gerr, kv.ErrUnconfirmed)
	}
	if err != nil {
		return err
	}
	r.Revision = rev
	j.rec, j.rev = r, rev
	j.progressDirt = false
	j.lastFlush = j.w.now()
	return nil
}

// Enqueue schedules a child run to start now. For a retryable function the
// child is committed only if this attempt succeeds (and a retry does not
// create it twice); for an at-most-once function it is published at once.
func (j *jobCore) Enqueue(ctx context.Context, c jetflow.Call, opts ...producer.Option) (string, error) {
	return j.RunAt(ctx, time.Time{}, c, opts...)
}

// RunAfter schedules a child run to start after d.
func (j *jobCore) RunAfter(ctx context.Context, d time.Duration, c jetflow.Call, opts ...producer.Option) (string, error) {
	return j.RunAt(ctx, j.w.now().Add(d), c, opts...)
}

// RunAt schedules a child run to start at t.
func (j *jobCore) RunAt(ctx context.Context, t time.Time, c jetflow.Call, opts ...producer.Option) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	opts = append(opts, producer.WithParent(j.env.ID))
	if j.fn.kind == jetflow.AtMostOnce {
		id, err := j.w.p.RunAt(ctx, t, c, opts...)
		if err != nil {
			return id, err
		}
		j.mu.Lock()
		j.kids = append(j.kids, id)
		j.mu.Unlock()
		j.mu.Lock()
		j.progressDirt = true
		j.mu.Unlock()
		// Record the child on the parent so Cancel can reach it.
		if err := j.flushProgress(ctx); err != nil {
			j.w.log.Debug("record child on parent", "run_id", j.env.ID, "error", err)
		}
		return id, nil
	}
	j.mu.Lock()
	j.nkid++
	n := j.nkid
	j.mu.Unlock()
	id := engine.ChildID(j.env.ID, j.env.Attempt, n)
	opts = append(opts, engine.HoldOption().(producer.Option), producer.WithID(id))
	_, err := j.w.p.RunAt(ctx, t, c, opts...)
	if err != nil && !errors.Is(err, producer.ErrAlreadyExists) {
		return "", err
	}
	j.mu.Lock()
	j.kids = append(j.kids, id)
	j.mu.Unlock()
	return id, nil
}
