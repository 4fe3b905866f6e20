package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
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
// is written), producer.ErrAlreadyExists (the new id is taken).
//
// The new id's journal is claimed before anything is copied (its cursor,
// created create-only): of concurrent Restarts into one id exactly one
// wins, and the others return producer.ErrAlreadyExists having written
// nothing, so the new workflow's journal is exactly the winner's copy. The
// winner writes its claim again (compare-and-swap) after the copy, just
// before the new record: a Restart whose claim was taken over meanwhile
// removes what it wrote and returns producer.ErrAlreadyExists. A Restart
// that fails after its claim removes what it wrote. One that dies between
// its claim and the new record leaves a claim without a record: a later
// Restart into that id takes it over once it is a minute old (by the
// server's clock, from the claim's last write), purging
// what the dead one wrote; until then it gets producer.ErrAlreadyExists.
// Before its claim, a Restart arms a janitor (a delayed run, two minutes
// later) that removes such a dead claim and what came with it when no
// Restart into the id does, as with a generated id (forkJanitor). A
// Restart stalled for longer than a minute between two of its requests
// may lose its claim that way.
func Restart(ctx context.Context, p *producer.Producer, id string, opts ...StartOption) (string, error) {
	r, jr, snap, err := restartable(ctx, p, id)
	if err != nil {
		return "", err
	}
	var o startOptions
	for _, f := range opts {
		f(&o)
	}
	if o.id == "" {
		o.id = nuid.Next()
		opts = append(opts, WithID(o.id))
	}
	// The new id must be fresh: its journal is written before it starts.
	if err := unused(ctx, p, o.id); err != nil {
		return "", err
	}
	// Before the claim: if this process dies before the new record, the
	// janitor removes what it wrote (nobody restarts into a generated id).
	if err := armForkJanitor(ctx, p, r.Name, o.id); err != nil {
		return "", err
	}
	f, err := claimFork(ctx, p, jr, o.id)
	if err != nil {
		return "", err
	}
	if err := f.copySteps(ctx, currentRun(snap)); err != nil {
		return "", f.abandon(ctx, err)
	}
	// The claim again, just before the record: a claim taken over while
	// this Restart was stalled is not written over, and a later Restart
	// sees a fresh claim until the record is there.
	if err := f.renew(ctx); err != nil {
		return "", f.abandon(ctx, err)
	}
	input := r.Args
	if snap.cur.gen() > 1 {
		input = snap.cur.Input // the run ContinueAsNew started
	}
	nid, err := start(ctx, p, r.Name, input, append(opts, func(o *startOptions) { o.forked = true })...)
	if err != nil && (nid == "" || errors.Is(err, producer.ErrAlreadyExists)) {
		// Refused before its record was written (the definition's state
		// changed meanwhile, say), or the id started meanwhile by a
		// Start: the copied journal is not the workflow's.
		err = f.abandon(ctx, err)
	}
	return nid, err
}

// restartable reads workflow id's record and journal for Restart, and
// checks that it may restart: failed or canceled, a workflow, and its
// definition startable (before the journal is copied: a refused start
// would leave it behind).
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

// unused returns nil when no run has id, producer.ErrAlreadyExists when
// one has.
func unused(ctx context.Context, p *producer.Producer, id string) error {
	_, err := engine.Of(p).Get(ctx, id)
	switch {
	case errors.Is(err, jetflow.ErrNotFound):
		return nil
	case err == nil:
		return fmt.Errorf("workflow %s: %w", id, producer.ErrAlreadyExists)
	}
	return err
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

// copySteps writes into the fork the steps that succeeded before the first
// that did not.
func (f *fork) copySteps(ctx context.Context, steps map[string]*Entry) error {
	cut := restartCut(steps)
	for step, e := range steps {
		if !copied(step, e.State, cut) {
			continue
		}
		c := *e
		c.Revision, c.Segment = 0, 0
		got, err := f.jr.putEntry(ctx, f.id, &c)
		if err == nil && got != &c {
			// Another writer's entry under the claimed id: a Start of
			// that id, racing this Restart.
			err = fmt.Errorf("workflow %s: step %s written meanwhile: %w", f.id, step, producer.ErrAlreadyExists)
		}
		if err != nil {
			return err
		}
		f.wrote(stepKey(f.id, step), c.Revision)
	}
	return nil
}

// fork is the journal a Restart writes under the new id: its claim (the
// new workflow's cursor) and the copied steps, each key with the revision
// it wrote.
type fork struct {
	jr     *journal
	id     string
	writes map[string]uint64
}

// claimGrace is how long a claim of a new id's journal (claimFork) holds
// without the new workflow's record: an older one was left by a Restart
// that died, and a later Restart takes it over. Tests shorten it.
var claimGrace = time.Minute

// claimFork claims workflow id's journal for a Restart: it creates id's
// cursor (segment 1, not waiting), create-only. Of concurrent Restarts
// into one id, exactly one creates it; the others get
// producer.ErrAlreadyExists having written nothing (the copy of the winner
// is never mixed with theirs nor purged by them), unless the cursor is an
// abandoned claim (takeOver). Then it removes what an earlier workflow of
// the same id left (its record expired before its journal's purge ran),
// below the claim's revision only.
func claimFork(ctx context.Context, p *producer.Producer, jr *journal, id string) (*fork, error) {
	claim := &cursor{Seg: 1}
	ok, err := jr.putCursor(ctx, id, claim)
	if err != nil {
		return nil, err
	}
	if !ok {
		return takeOver(ctx, p, jr, id)
	}
	f := &fork{jr: jr, id: id, writes: map[string]uint64{cursorKey(id): claim.rev}}
	if err := purgeLeftoversBefore(ctx, p, id, claim.rev); err != nil {
		return nil, f.abandon(ctx, err)
	}
	return f, nil
}

// errClaimRecent: a claim that takeOver refuses because it was written
// less than claimGrace ago (or meanwhile): a Restart may still hold it.
var errClaimRecent = errors.New("the claim was written less than a grace period ago")

// takeOver claims workflow id's journal whose cursor exists: only if that
// cursor is a claim (segment 1, neither waiting nor done) last written
// claimGrace ago or more by the server's clock, and id has no record, read
// from the leader before and after the claim is written over. That is a
// claim of a Restart that died before the new record: it writes the claim
// over by compare-and-swap (of concurrent takers exactly one wins) and
// purges everything under id below its own revision. Anything else is
// producer.ErrAlreadyExists, having purged nothing: a fresh claim (a
// Restart under way; the error wraps errClaimRecent too), a cursor moved
// on, a record (a workflow that runs; if it shows only after the claim is
// written over, that write leaves the cursor as it was but for its
// revision, which its segments read again).
func takeOver(ctx context.Context, p *producer.Producer, jr *journal, id string) (*fork, error) {
	taken := fmt.Errorf("workflow %s: its journal is claimed by another Restart (or left by an earlier workflow of that id): %w",
		id, producer.ErrAlreadyExists)
	e, err := jr.kv.Get(ctx, cursorKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, taken // removed meanwhile: by the Restart that holds it, unwinding
	}
	if err != nil {
		return nil, fmt.Errorf("workflow %s: cursor: %w", id, err)
	}
	c, err := decodeCursor(e.Key(), e.Value())
	if err != nil || !c.isClaim() {
		return nil, taken
	}
	st, err := jr.stream(ctx)
	if err != nil {
		return nil, err
	}
	// The server's clock, as the entry's time: no skew with this host's.
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("workflow: journal stream: %w", err)
	}
	now := info.TimeStamp
	if now.IsZero() {
		now = time.Now()
	}
	if now.Sub(e.Created()) < claimGrace {
		return nil, fmt.Errorf("%w: %w", taken, errClaimRecent)
	}
	recorded := func() error {
		_, _, err := engine.Of(p).Store().Decide(ctx, id)
		switch {
		case err == nil:
			return taken
		case errors.Is(err, jetflow.ErrNotFound):
			return nil
		}
		return err
	}
	if err := recorded(); err != nil {
		return nil, err
	}
	claim := &cursor{Seg: 1, rev: e.Revision()}
	ok, err := jr.putCursor(ctx, id, claim)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %w", taken, errClaimRecent) // written meanwhile
	}
	if err := recorded(); err != nil {
		return nil, err // a record came meanwhile: its journal stays
	}
	f := &fork{jr: jr, id: id, writes: map[string]uint64{cursorKey(id): claim.rev}}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(streams.KVSubject(jr.bucket, id+".>")), jetstream.WithPurgeSequence(claim.rev)); err != nil {
		return nil, f.abandon(ctx, fmt.Errorf("workflow %s: purge an abandoned claim: %w", id, err))
	}
	return f, nil
}

func (f *fork) wrote(key string, rev uint64) { f.writes[key] = rev }

// abandon unwinds the fork of a Restart that failed with err, and returns
// err, joined with the unwind's error when that failed too (what is left
// is a dead claim, which the Restart's janitor removes).
func (f *fork) abandon(ctx context.Context, err error) error {
	if uerr := f.unwind(ctx); uerr != nil {
		return errors.Join(err, fmt.Errorf("workflow %s: left for the janitor: %w", f.id, uerr))
	}
	return err
}

// renew writes the fork's claim again over the revision it wrote:
// producer.ErrAlreadyExists when another Restart took it over meanwhile.
func (f *fork) renew(ctx context.Context) error {
	c := &cursor{Seg: 1, rev: f.writes[cursorKey(f.id)]}
	ok, err := f.jr.putCursor(ctx, f.id, c)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("workflow %s: its claim was taken over by another Restart: %w", f.id, producer.ErrAlreadyExists)
	}
	f.wrote(cursorKey(f.id), c.rev)
	return nil
}

// unwind removes what the fork wrote, each key up to the revision it
// wrote: a later write of another (a Start of the same id) stays. A
// Restart that fails returns its error beside its own (a claim left
// behind is a dead claim, which its janitor removes); the janitor returns
// it.
func (f *fork) unwind(ctx context.Context) error {
	st, err := f.jr.stream(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for key, rev := range f.writes {
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(streams.KVSubject(f.jr.bucket, key)), jetstream.WithPurgeSequence(rev+1)); err != nil {
			errs = append(errs, fmt.Errorf("workflow %s: purge %s: %w", f.id, key, err))
		}
	}
	return errors.Join(errs...)
}

// forkJanitorAfter is how long after a Restart its janitor runs: past the
// grace of its claim, with as much again for the copy and the clocks'
// skew (a claim still fresh then brings the janitor back later).
func forkJanitorAfter() time.Duration { return 2 * claimGrace }

// armForkJanitor stores a run of forkJanitor for workflow id, due
// forkJanitorAfter from now (a delayed entry without a record, under an
// id of its own per due millisecond, like armJanitor's).
func armForkJanitor(ctx context.Context, p *producer.Producer, name, id string) error {
	at := time.Now().Add(forkJanitorAfter())
	return delayWake(ctx, p, name, fmt.Sprintf("%s-fork-janitor-%d", id, at.UnixMilli()), wakeContext{WF: id, Fork: true}, at)
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

// forkJanitor removes the journal a Restart into workflow id left when it
// died between its claim and the new record: only if id has no record
// (read from the leader) and its cursor is still a bare claim (segment 1,
// neither waiting nor done) last written claimGrace ago or more. It takes
// that claim over as a Restart would (takeOver: compare-and-swap, the
// record read again after it, everything under id below its revision
// purged), then purges the claim it wrote. A live Restart keeps its
// claim: it renews it before its record, and a renewal after the
// janitor's write fails (that Restart removes what it wrote and returns
// producer.ErrAlreadyExists). A workflow that has a record is left alone:
// its own purge applies. A claim written less than claimGrace ago (the
// Restart was slow, or another took the id over) brings the janitor back
// forkJanitorAfter later; anything else ends it.
func forkJanitor(ctx context.Context, p *producer.Producer, name, id string) error {
	// The common case, one read: the Restart wrote its record.
	_, _, err := engine.Of(p).Store().Decide(ctx, id)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, jetflow.ErrNotFound):
		return err
	}
	jr, err := openJournal(ctx, p)
	if err != nil {
		return err
	}
	f, err := takeOver(ctx, p, jr, id)
	switch {
	case errors.Is(err, errClaimRecent):
		return armForkJanitor(ctx, p, name, id)
	case errors.Is(err, producer.ErrAlreadyExists):
		return nil // no cursor, one moved on, or a record
	case err != nil:
		return err
	}
	return f.unwind(ctx)
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

// purgeLeftoversBefore is purgeLeftovers for a Restart that claimed id's
// journal at revision claim: only what was written before the claim goes.
func purgeLeftoversBefore(ctx context.Context, p *producer.Producer, id string, claim uint64) error {
	jr, err := openJournal(ctx, p)
	if err != nil {
		return err
	}
	e, err := jr.kv.Get(ctx, stepKey(id, "1"))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("workflow %s: journal: %w", id, err)
	}
	if e.Revision() > claim {
		return fmt.Errorf("workflow %s: step 1 written after the claim: %w", id, producer.ErrAlreadyExists)
	}
	st, err := jr.stream(ctx)
	if err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject(streams.KVSubject(jr.bucket, id+".>")), jetstream.WithPurgeSequence(claim))
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
