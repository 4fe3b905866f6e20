package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go/jetstream"
)

// Cancel cancels run id and, recursively, the runs it scheduled. A pending
// run never starts: its record becomes canceled, its delayed entry or queued
// message is removed, and workers are told. A running run has its context
// canceled with cause jetflow.ErrCanceled; whatever it returns afterwards is
// discarded. Canceling a run that has already ended changes nothing and
// returns nil (as in Convex); CancelRun says which of the two happened.
// Errors: jetflow.ErrNotFound, jetflow.ErrInvalidRunID, a permissions
// violation of the server (errors.Is nats.ErrPermissionViolation, at once),
// and, when the record was canceled but the waiting entry could not be
// removed (a user without purge rights), an error saying so: the run will
// not start all the same.
func (p *Producer) Cancel(ctx context.Context, id string) error {
	_, err := p.CancelRun(ctx, id)
	return err
}

// CancelResult is what CancelRun did.
type CancelResult struct {
	// Canceled is true when this call canceled the run, false when the run
	// had already ended (Run.State says how: success, failed, or canceled
	// earlier) and nothing changed.
	Canceled bool
	// Run is the run's record after the call.
	Run *jetflow.Run
}

// CancelRun is Cancel, and says whether it canceled the run or the run had
// already ended, as River's JobCancel returns the job: an ended run is not
// an error, and nothing is done to it or its runs.
func (p *Producer) CancelRun(ctx context.Context, id string) (CancelResult, error) {
	return p.cancel(ctx, id, 0)
}

func (p *Producer) cancel(ctx context.Context, id string, depth int) (CancelResult, error) {
	var r *jetflow.Run
	var prev jetflow.State
	err := natsperm.Do(ctx, p.nc, func(ctx context.Context) error {
		var err error
		r, prev, err = p.markCanceled(ctx, id)
		return err
	}, "$JS.", "$KV.")
	if errors.Is(err, kv.ErrTerminal) {
		return CancelResult{Run: r}, nil
	}
	if err != nil {
		return CancelResult{}, err
	}
	res := CancelResult{Canceled: true, Run: r}
	var errs []error
	if prev == jetflow.Pending {
		err := natsperm.Do(ctx, p.nc, func(ctx context.Context) error { return p.unschedule(ctx, r) }, "$JS.", "$KV.")
		if err != nil {
			errs = append(errs, fmt.Errorf("producer: run %s is canceled and will not start, but its waiting entry was not removed: %w", id, err))
		}
	}
	if err := p.d.Complete(ctx, r); err != nil {
		p.log.WarnContext(ctx, "on-complete of canceled run; repair sweep will", "run_id", id, "error", err)
	}
	if err := p.nc.Publish(p.cfg.CancelSubject(), []byte(id)); err != nil {
		return res, errors.Join(append(errs, fmt.Errorf("producer: cancel notice %s: %w", id, err))...)
	}
	if depth < 64 {
		for _, child := range r.Children {
			if _, err := p.cancel(ctx, child, depth+1); err != nil && !errors.Is(err, jetflow.ErrNotFound) {
				return res, errors.Join(append(errs, err)...)
			}
		}
	}
	return res, errors.Join(errs...)
}

// markCanceled writes run id's record as canceled and returns it with the
// state it had. A run published without a record that no worker has taken
// yet is recorded as canceled (create-only: a worker creating the record
// first wins the race, and the record is then canceled as any other).
// Errors: kv.ErrTerminal (with the record) when the run had ended.
func (p *Producer) markCanceled(ctx context.Context, id string) (*jetflow.Run, jetflow.State, error) {
	for range 64 {
		var prev jetflow.State
		r, err := p.runs.Change(ctx, engine.Cancel, id, func(r *jetflow.Run) *jetflow.Run {
			prev = r.State
			return engine.CancelRun(r, p.now())
		})
		if !errors.Is(err, jetflow.ErrNotFound) {
			return r, prev, err
		}
		q, ok, qerr := p.store.QueuedRun(ctx, id)
		if qerr != nil || !ok {
			// Taken meanwhile: its record is written before its message
			// goes, so the record is there now, unless there is no run.
			if _, _, gerr := p.store.Decide(ctx, id); gerr == nil {
				continue
			}
			if qerr != nil {
				return nil, "", qerr
			}
			return nil, "", err
		}
		q = engine.CancelRun(q, p.now())
		if _, cerr := p.runs.Write(ctx, engine.Cancel, engine.None, q, 0); cerr != nil {
			if errors.Is(cerr, kv.ErrExists) {
				continue
			}
			return nil, "", cerr
		}
		return q, jetflow.Pending, nil
	}
	return nil, "", fmt.Errorf("producer: cancel %s: the run kept changing", id)
}

// unschedule removes the delayed entry and the waiting message of a pending
// run just canceled. Without them the run would not start either (its
// record is canceled), but they would wait until their time.
func (p *Producer) unschedule(ctx context.Context, r *jetflow.Run) error {
	ok, rev, err := p.findDelayed(ctx, r)
	if err != nil {
		return err
	}
	if ok {
		if err := p.store.RemoveDelayed(ctx, kv.DelayedKey(r.ScheduledTime, r.ID), rev); err != nil {
			return err
		}
	}
	return p.store.Unqueue(ctx, r.Name, r.ID)
}

func (p *Producer) findDelayed(ctx context.Context, r *jetflow.Run) (bool, uint64, error) {
	rev, ok, err := p.store.FindDelayed(ctx, r.ScheduledTime, r.ID)
	return ok, rev, err
}

// Filter selects runs for List. Zero fields match everything.
type Filter struct {
	State    jetflow.State
	Function string
	// Limit is the page size. Default 100, at most 1000.
	Limit int
	// After is the cursor of the next (older) page: a page's Next. Before
	// is the cursor of the previous (newer) page: a page's Prev. Give at
	// most one. Cursors are opaque; a cursor of no page is
	// ErrBadCursor.
	After  string
	Before string
}

// Page is one page of List, newest first.
type Page struct {
	Runs []*jetflow.Run
	// Next is the cursor of the older page, "" on the last page; Prev the
	// cursor of the newer page, "" on the first.
	Next string
	Prev string
	// Indexed is true when the page was read from the run index (an
	// indexer runs in the scheduler), false when every record was read.
	Indexed bool
}

// ErrBadCursor: Filter.After or Before is not a cursor of a page of List.
var ErrBadCursor = runindex.ErrBadCursor

// List returns runs matching f, newest first (by their last write: a state
// change or a heartbeat), a page at a time; the runs waiting in the
// function stream without a record yet (a run due now, until a worker
// takes it) come first when f asks for pending runs or any state.
//
// With a scheduler running (its leader keeps the run index,
// docs/runindex.md), a page costs in proportion to the runs it shows and
// to the entries it skips (runs that left the state since), not to the
// runs kept: a page of the ten failed runs among millions reads about ten
// records. Without one, List reads the header of every record (cost
// proportional to the records kept) and says so in Page.Indexed.
// Errors: ErrBadCursor, an unknown state, and the server's.
func (p *Producer) List(ctx context.Context, f Filter) (Page, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.Limit > 1000 {
		f.Limit = 1000
	}
	if f.State != "" && !f.State.Valid() {
		return Page{}, fmt.Errorf("producer: unknown state %q", f.State)
	}
	if f.After != "" && f.Before != "" {
		return Page{}, fmt.Errorf("producer: After and Before: give one of the two: %w", ErrBadCursor)
	}
	q := runindex.Query{State: f.State, Function: f.Function, Limit: f.Limit, After: f.After, Before: f.Before}
	r := runindex.NewReader(p.store)
	pg, err := r.List(ctx, q)
	indexed := err == nil
	if errors.Is(err, runindex.ErrUnavailable) {
		p.log.DebugContext(ctx, "list: no run index; reading every record", "reason", err)
		pg, err = r.ListScan(ctx, q)
	}
	if err != nil {
		return Page{}, err
	}
	return Page{Runs: pg.Runs, Next: pg.Next, Prev: pg.Prev, Indexed: indexed}, nil
}

// Counts are the runs in each state (runindex.CountsResult): the numbers,
// where they come from ("index" or "scan") and when they were true.
type Counts = runindex.CountsResult

// Counts returns the runs of function fn (every function when "") in each
// state. With a scheduler running, they come from its run index's
// checkpoint (one read, plus the subjects of the runs waiting without a
// record), true at Counts.AsOf (a second or so ago), terminal runs counted
// since Counts.TerminalSince (docs/runindex.md); without one, every record
// is read (Source "scan").
func (p *Producer) Counts(ctx context.Context, fn string) (Counts, error) {
	r := runindex.NewReader(p.store)
	c, err := r.Counts(ctx, fn)
	if errors.Is(err, runindex.ErrUnavailable) {
		p.log.DebugContext(ctx, "counts: no run index; reading every record", "reason", err)
		return r.CountsScan(ctx, fn)
	}
	return c, err
}

// Watch pushes every change of run id as it happens: the current record
// first, then each new revision (state, attempts, progress). The channel is
// closed after a terminal state, when ctx ends, or on error. A run whose
// record is not written yet starts with its waiting message (pending), if
// any; otherwise the run is awaited.
func (p *Producer) Watch(ctx context.Context, id string) (<-chan *jetflow.Run, error) {
	if err := jetflow.ValidateRunID(id); err != nil {
		return nil, err
	}
	w, err := p.store.Runs().Watch(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("producer: watch %s: %w", id, err)
	}
	out := make(chan *jetflow.Run, 16)
	go func() {
		defer close(out)
		defer stopWatch(w)
		sent := false
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil && !sent {
					// No record yet: a run published without one is
					// pending in its message until a worker takes it.
					if q, ok, _ := p.store.QueuedRun(ctx, id); ok {
						sent = true
						select {
						case out <- q:
						case <-ctx.Done():
							return
						}
					}
					continue
				}
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				sent = true
				r, err := kv.Decode(e.Value(), e.Revision())
				if err != nil {
					return // an unreadable record (Wait says why)
				}
				select {
				case out <- r:
				case <-ctx.Done():
					return
				}
				if r.State.Terminal() {
					return
				}
			}
		}
	}()
	return out, nil
}

// Wait blocks until run id is terminal and returns its record. A run not
// written yet is awaited, as Watch does: for an id that no run has, Wait
// returns ctx's error when ctx ends, not jetflow.ErrNotFound (use Get to
// look first). As Get, the record holds the payloads themselves. Errors:
// jetflow.ErrInvalidRunID, jetflow.ErrBadRecord, jetflow.ErrPayloadMissing,
// ctx's.
func (p *Producer) Wait(ctx context.Context, id string) (*jetflow.Run, error) {
	ch, err := p.Watch(ctx, id)
	if err != nil {
		return nil, err
	}
	var last *jetflow.Run
	for r := range ch {
		last = r
	}
	if last != nil && last.State.Terminal() {
		return p.resolve(ctx, last)
	}
	if err := ctx.Err(); err != nil {
		return last, err
	}
	if _, err := p.store.Show(ctx, id); errors.Is(err, jetflow.ErrBadRecord) {
		return last, fmt.Errorf("producer: wait for %s: %w", id, err)
	}
	return last, fmt.Errorf("producer: watch of %s ended at %v", id, time.Now())
}

// stopWatch stops a record watch whose goroutine ends; its error leaves
// nothing to undo (the watch's consumer is ephemeral and goes with it).
func stopWatch(w interface{ Stop() error }) {
	if err := w.Stop(); err != nil {
		_ = err // nothing to undo: see above
	}
}
