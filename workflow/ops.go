package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// ErrNotRestartable: Restart of a workflow that has not failed or been
// canceled.
var ErrNotRestartable = errors.New("workflow: only a failed or canceled workflow restarts")

// Restart starts a new execution of workflow id, which failed or was
// canceled, from its first step that did not succeed: the new workflow
// (id from WithID, or generated) has the same name and input, and its
// journal starts with every step that succeeded before that one, which
// return their results without running again (DBOS's fork, Temporal's
// reset). It returns the new id. Errors: jetflow.ErrNotFound,
// ErrNotRestartable, producer.ErrNotWorkflow (a run that is not a
// workflow; it matches ErrBadRecord too), ErrDefinitionInactive (nothing
// is written), producer.ErrAlreadyExists (the new id is taken, nothing
// written).
//
// The new workflow's record is the one commit point: it is created
// create-only and held (wfwire.ForkHolder, naming id), so of concurrent
// Restarts into one id exactly one wins and the others write nothing.
// The winner then copies the steps (each key create-only, the same
// copy whoever writes it) and releases the record (compare-and-swap),
// then publishes its first segment. A first segment that finds its record
// still held makes the copy and the release itself before it runs: a
// Restart that dies after its record leaves a workflow the scheduler's
// repair sweep starts (it publishes the first segment of a pending
// workflow whose message is missing), and that runs from the copied steps
// as if the Restart had finished; one that dies before its record leaves
// nothing. An error after the record comes with the new id, as Start's
// does: the workflow is restarted all the same. No grace period, renewal
// or janitor.
func Restart(ctx context.Context, p *producer.Producer, id string, opts ...StartOption) (string, error) {
	r, jr, snap, err := restartable(ctx, p, id)
	if err != nil {
		return "", err
	}
	input := r.Args
	if snap.cur.gen() > 1 {
		input = snap.cur.Input // the run ContinueAsNew started
	}
	return start(ctx, p, r.Name, input, append(opts, func(o *startOptions) {
		if o.id == "" {
			o.id = nuid.Next()
		}
		o.fork = &forkOf{src: id, jr: jr, snap: snap}
	})...)
}

// forkOf is what a Restart copies from: workflow src's journal, read
// (snap) when Restart checked it.
type forkOf struct {
	src  string
	jr   *journal
	snap *snapshot
}

// restartable reads workflow id's record and journal for Restart, and
// checks that it may restart: failed or canceled, a workflow, and its
// definition startable (before the record is written: a refused start
// writes nothing).
func restartable(ctx context.Context, p *producer.Producer, id string) (*jetflow.Run, *journal, *snapshot, error) {
	r, err := p.Get(ctx, id)
	if err != nil {
		return nil, nil, nil, err
	}
	if r.State != jetflow.Failed && r.State != jetflow.Canceled {
		return nil, nil, nil, fmt.Errorf("workflow %s is %s: %w", id, r.State, ErrNotRestartable)
	}
	jr, err := openJournal(ctx, p)
	if err != nil {
		return nil, nil, nil, err
	}
	snap, err := jr.load(ctx, id)
	if err != nil {
		return nil, nil, nil, err
	}
	if snap.cur == nil && len(snap.steps) == 0 && !wfwire.IsWorkflow(r) {
		return nil, nil, nil, fmt.Errorf("%w (%w): %s is not a workflow", producer.ErrNotWorkflow, ErrBadRecord, id)
	}
	if _, err := startable(ctx, p, r.Name); err != nil {
		return nil, nil, nil, err
	}
	return r, jr, snap, nil
}

// restartCut is the first step, in the order of the code, that did not
// succeed among steps ("" when all did): Restart copies the steps before it.
func restartCut(steps map[string]*Entry) string {
	cut := ""
	for step, e := range steps {
		if e.State != StepDone {
			if cut == "" || stepLess(step, cut) {
				cut = step
			}
		}
	}
	return cut
}

// copied reports whether Restart copies step, in state, to the new
// workflow's journal: it succeeded before cut ("" when every step did).
func copied(step string, state StepState, cut string) bool {
	if state != StepDone {
		return false
	}
	return cut == "" || stepLess(step, cut)
}

// forkCopy is what a Restart still writes into the new workflow's journal,
// which holds have (nil: nothing yet): the steps of src (the current run
// of the source) that succeeded before the first that did not, but for
// those written already (by another writer of the same copy: the Restart
// and the first segment may both make it). Each entry is a copy with no
// revision and no segment.
func forkCopy(src, have map[string]*Entry) []*Entry {
	cut := restartCut(src)
	var out []*Entry
	for step, e := range src {
		if _, ok := have[step]; ok || !copied(step, e.State, cut) {
			continue
		}
		c := *e
		c.Revision, c.Segment = 0, 0
		out = append(out, &c)
	}
	slices.SortFunc(out, func(a, b *Entry) int {
		if stepLess(a.Step, b.Step) {
			return -1
		}
		return 1
	})
	return out
}

// copyFork copies into workflow id's journal the steps of f's source that
// it does not hold yet (forkCopy), each create-only: an entry written
// meanwhile by another copier of the same fork stands (it is the same
// copy).
func copyFork(ctx context.Context, f *forkOf, id string) error {
	have, err := f.jr.load(ctx, id)
	if err != nil {
		return err
	}
	for _, e := range forkCopy(currentRun(f.snap), have.steps) {
		if _, err := f.jr.putEntry(ctx, id, e); err != nil {
			return err
		}
	}
	return nil
}

// releaseFork releases the record of workflow id, held by its Restart from
// src, once its journal copy is complete: compare-and-swap, the record
// read again after a conflict. released reports whether this call did (not
// when another copier did first, or the record ended: r then says how it
// is).
func releaseFork(ctx context.Context, p *producer.Producer, id, src string) (r *jetflow.Run, released bool, err error) {
	hold := wfwire.ForkHolder(src)
	r, err = engine.Of(p).Runs().Change(ctx, engine.Release, id, func(cur *jetflow.Run) *jetflow.Run {
		released = cur.HeldBy == hold
		if !released {
			return nil
		}
		return engine.ReleaseRun(cur)
	})
	if err != nil {
		return r, false, err
	}
	return r, released, nil
}

// forkHook is what Start.Fork runs for a Restart into workflow id: the
// copy, then the release. The first segment is published when this
// Restart released the record or found it ended (its segment purges the
// journal), not when a first segment did first (it runs).
func forkHook(p *producer.Producer, f *forkOf, id string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		if err := copyFork(ctx, f, id); err != nil {
			return false, err
		}
		_, released, err := releaseFork(ctx, p, id, f.src)
		if errors.Is(err, kv.ErrTerminal) {
			// Canceled meanwhile: its first segment schedules the purge
			// of what was copied, as for any workflow canceled before it
			// ran.
			return true, nil
		}
		return released, err
	}
}

// finishFork is a first segment's part of a Restart that has not released
// workflow record rec (held, ForkSource src): it makes the copy from src's
// journal, read now, and releases the record, then returns it. A source
// whose record is gone (expired, and its journal with it) cannot be
// copied: the workflow fails (a bad journal) rather than run its steps
// again.
func finishFork(ctx context.Context, p *producer.Producer, jr *journal, rec *jetflow.Run, src string) (*jetflow.Run, error) {
	if _, _, err := engine.Of(p).Store().Decide(ctx, src); errors.Is(err, jetflow.ErrNotFound) {
		return nil, badJournal(cursorKey(rec.ID), "restarted from %s, which is gone: its steps cannot be copied", src)
	} else if err != nil {
		return nil, err
	}
	snap, err := jr.load(ctx, src)
	if err != nil {
		return nil, err
	}
	if err := copyFork(ctx, &forkOf{src: src, jr: jr, snap: snap}, rec.ID); err != nil {
		return nil, err
	}
	r, _, err := releaseFork(ctx, p, rec.ID, src)
	return r, err
}

// delayWake stores a run of name's wake function with context wc, due at,
// under the id derived from key (a delayed entry without a record).
func delayWake(ctx context.Context, p *producer.Producer, name, key string, wc wakeContext, at time.Time) error {
	args, err := json.Marshal(jetflow.Completion{Context: mustJSON(wc)})
	if err != nil {
		return err
	}
	return engine.Of(p).DelayNew(ctx, &jetflow.Run{
		ID: jetflow.DerivedID(key), Name: WakeFunction(name), Kind: jetflow.Retryable, Args: args,
		State: jetflow.Pending, ScheduledTime: at, CreationTime: time.Now().UTC(),
	})
}

// schedulePurge schedules the removal of an ended workflow's journal for
// when its record expires (the retention period after it ended): a janitor
// (armJanitor) due then, which checks the record before it purges (the id
// may have been started again meanwhile). Scheduling it again writes the
// same entry.
func schedulePurge(ctx context.Context, p *producer.Producer, name string, r *jetflow.Run) error {
	at := r.CompletedTime.Add(engine.Of(p).Streams().Retention)
	if !at.After(time.Now()) {
		return janitor(ctx, p, name, r.ID) // its time has come
	}
	return armJanitor(ctx, p, name, r.ID, at)
}

// armJanitor stores a conditional purge of workflow id's journal for
// at (a delayed entry without a record, under an id of its own per due
// second): see wfwire.WakeContext.Janitor. A workflow arms it when it first
// parks: a Cancel while it waits ends it with no segment left to schedule
// the purge at its end.
func armJanitor(ctx context.Context, p *producer.Producer, name, id string, at time.Time) error {
	return delayWake(ctx, p, name, fmt.Sprintf("%s-janitor-%d", id, at.Unix()), wakeContext{WF: id, Purge: true, Janitor: true}, at)
}

// janitor runs a conditional purge of workflow id's journal: now if its
// record has expired, or ended a retention period ago; otherwise it arms
// itself again for when that may be.
func janitor(ctx context.Context, p *producer.Producer, name, id string) error {
	retention := engine.Of(p).Streams().Retention
	now := time.Now().UTC()
	r, _, err := engine.Of(p).Store().Decide(ctx, id)
	switch {
	case errors.Is(err, jetflow.ErrNotFound):
		return purge(ctx, p, id)
	case err != nil:
		return err
	case !r.State.Terminal():
		return armJanitor(ctx, p, name, id, now.Add(retention))
	case !r.CompletedTime.Add(retention).After(now):
		return purge(ctx, p, id)
	}
	return armJanitor(ctx, p, name, id, r.CompletedTime.Add(retention).Add(time.Second))
}

// purge removes everything the journal keeps of workflow id.
func purge(ctx context.Context, p *producer.Producer, id string) error {
	jr, err := openJournal(ctx, p)
	if err != nil {
		return err
	}
	st, err := jr.stream(ctx)
	if err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject(streams.KVSubject(jr.bucket, id+".>")))
}

// Watch pushes workflow id's status (record and steps) each time it
// changes: the current one first, then one per record or journal write.
// The channel is closed after a status whose record has ended, when ctx
// ends, or on error. The current status is read before Watch returns, so
// that a run that cannot be watched is an error, not a closed channel.
// Errors: jetflow.ErrInvalidRunID, jetflow.ErrNotFound, producer.ErrNotWorkflow
// (a run that is not a workflow), and Get's.
func Watch(ctx context.Context, p *producer.Producer, id string) (<-chan *Status, error) {
	if err := jetflow.ValidateRunID(id); err != nil {
		return nil, err
	}
	jr, err := openJournal(ctx, p)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	jw, err := jr.kv.Watch(ctx, id+".>", jetstream.UpdatesOnly())
	if err != nil {
		cancel()
		return nil, fmt.Errorf("workflow: watch %s: %w", id, err)
	}
	runs, err := p.Watch(ctx, id)
	if err != nil {
		_ = jw.Stop() // the error to return is err; the cancel ends the watch anyway
		cancel()
		return nil, err
	}
	// The current status, after both watches started (a write from now on
	// is seen): a plain run, an unknown id, is the caller's error.
	first, err := Get(ctx, p, id)
	if err != nil {
		_ = jw.Stop() // the error to return is err; the cancel ends the watch anyway
		cancel()
		return nil, err
	}
	out := make(chan *Status, 16)
	go func() {
		defer close(out)
		defer cancel()
		defer func() { _ = jw.Stop() }()
		push := func(st *Status) bool {
			select {
			case out <- st:
			case <-ctx.Done():
				return false
			}
			return !st.Run.State.Terminal()
		}
		send := func() bool {
			st, err := Get(ctx, p, id)
			if err != nil {
				return false
			}
			return push(st)
		}
		if !push(first) {
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-jw.Updates():
				if !ok {
					return
				}
			case _, ok := <-runs:
				if !ok {
					runs = nil
					// The record ended: one last status.
					send()
					return
				}
			}
			// Coalesce a burst of writes into one status.
			t := time.NewTimer(5 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			if !send() {
				return
			}
		}
	}()
	return out, nil
}
