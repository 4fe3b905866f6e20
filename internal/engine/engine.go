// Package engine owns a run's state machine: every transition of its
// record, every record write and every run id derived from another. The
// roles (producer, worker, scheduler) and the packages built on them
// (retrier, pool) ask it; none writes a record itself.
//
// The states are jetflow's: pending, inProgress, success, failed, canceled
// (and "none" before a record exists: a run whose message is its pending
// record, or one not scheduled yet). A step names why a record changes, and
// each step allows some states before and one state after:
//
//	step        from                          to
//	schedule    none                          pending
//	open        none                          inProgress   (a record created running: the retrier's)
//	claim       none, pending, inProgress     inProgress   (inProgress: taking over from a lost worker)
//	beat        inProgress                    inProgress   (heartbeat, progress, children)
//	succeed     none, pending, inProgress     success
//	retry       none, pending, inProgress     pending      (the next attempt, due later)
//	fail        none, pending, inProgress     failed
//	lost        inProgress                    failed       (an at-most-once run's worker is gone, or no attempts left)
//	cancel      none, pending, inProgress     canceled
//	release     pending                       pending      (a held child committed by its parent)
//	orphan      pending                       canceled     (a held child whose parent's attempt did not succeed)
//	deadLetter  none                          failed       (a message that cannot be a run)
//
// The record each step writes is built by a named transition
// (transitions.go: ClaimRun, SucceedRun, ...), pure, so that every writer
// of a step writes the same record; a write whose reply is lost is settled
// by ReadBack (kv.Settle's rule).
//
// A terminal record never changes: no step leaves success, failed or
// canceled. Every write is a compare-and-swap on the revision the writer
// read (or create-only from none), so a writer that lost a race gets
// kv.ErrConflict (kv.ErrExists from none) and the newer state stands.
package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
)

// Step names a transition of a run's record.
type Step uint8

const (
	Schedule Step = iota + 1
	Open
	Claim
	Beat
	Succeed
	Retry
	Fail
	Lost
	Cancel
	Release
	Orphan
	DeadLetter
)

var stepNames = [...]string{
	Schedule: "schedule", Open: "open", Claim: "claim", Beat: "beat", Succeed: "succeed", Retry: "retry",
	Fail: "fail", Lost: "lost", Cancel: "cancel", Release: "release", Orphan: "orphan", DeadLetter: "deadLetter",
}

func (s Step) String() string {
	if int(s) < len(stepNames) && stepNames[s] != "" {
		return stepNames[s]
	}
	return fmt.Sprintf("step(%d)", s)
}

// None is the state of a run with no record yet.
const None jetflow.State = ""

type rule struct {
	from []jetflow.State
	to   jetflow.State
}

var (
	fresh   = []jetflow.State{None}
	open    = []jetflow.State{None, jetflow.Pending, jetflow.InProgress}
	running = []jetflow.State{jetflow.InProgress}
	waiting = []jetflow.State{jetflow.Pending}
)

var rules = map[Step]rule{
	Schedule:   {fresh, jetflow.Pending},
	Open:       {fresh, jetflow.InProgress},
	Claim:      {open, jetflow.InProgress},
	Beat:       {running, jetflow.InProgress},
	Succeed:    {open, jetflow.Success},
	Retry:      {open, jetflow.Pending},
	Fail:       {open, jetflow.Failed},
	Lost:       {running, jetflow.Failed},
	Cancel:     {open, jetflow.Canceled},
	Release:    {waiting, jetflow.Pending},
	Orphan:     {waiting, jetflow.Canceled},
	DeadLetter: {fresh, jetflow.Failed},
}

// Steps lists every step, for tests and docs.
func Steps() []Step {
	out := make([]Step, 0, len(rules))
	for s := range rules {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// ErrTransition: a step that the state machine does not allow from the
// record's state, or to the state asked. It is a bug in the caller, never
// a race (races end in kv.ErrConflict).
var ErrTransition = errors.New("engine: transition not allowed")

// Check reports whether step may take a record from state from to state to.
func Check(step Step, from, to jetflow.State) error {
	r, ok := rules[step]
	if !ok {
		return fmt.Errorf("%w: unknown step %s", ErrTransition, step)
	}
	if to != r.to || !slices.Contains(r.from, from) {
		name := func(s jetflow.State) string {
			if s == None {
				return "none"
			}
			return string(s)
		}
		return fmt.Errorf("%w: %s from %s to %s", ErrTransition, step, name(from), name(to))
	}
	return nil
}

// Runs writes run records: the one place that does.
type Runs struct{ store *kv.Store }

// New returns the engine over the runs store s.
func New(s *kv.Store) *Runs { return &Runs{store: s} }

// Store is the store the engine writes (for reads).
func (e *Runs) Store() *kv.Store { return e.store }

// Write stores r, whose stored state is from at revision rev (None and 0:
// no record yet, created create-only), after step. r.State is the state
// after. It returns the new revision; kv.ErrConflict when the record
// changed since rev, kv.ErrExists when from is None and a record exists,
// ErrTransition for a step the state machine refuses.
func (e *Runs) Write(ctx context.Context, step Step, from jetflow.State, r *jetflow.Run, rev uint64) (uint64, error) {
	if err := Check(step, from, r.State); err != nil {
		return 0, fmt.Errorf("run %s: %w", r.ID, err)
	}
	if from == None {
		return e.store.Create(ctx, r)
	}
	return e.store.Write(ctx, r, rev, from)
}

// WriteMsg is Write as a message to publish (with a reply subject of the
// caller's): the worker's asynchronous success write. from None is a
// create-only write.
func (e *Runs) WriteMsg(step Step, from jetflow.State, r *jetflow.Run, rev uint64) (*nats.Msg, error) {
	if err := Check(step, from, r.State); err != nil {
		return nil, fmt.Errorf("run %s: %w", r.ID, err)
	}
	return e.store.RecordMsg(r, rev, from)
}

// Change reads run id's record and, if next builds step's transition of
// it (next returns nil to leave it as it is: build it with one of the named
// transitions), writes it by compare-and-swap, reading again after a
// conflict. The change is checked against the state machine. Errors as
// kv.Store.Transition (kv.ErrTerminal with the record when the run had
// ended), and ErrTransition.
func (e *Runs) Change(ctx context.Context, step Step, id string, next func(cur *jetflow.Run) *jetflow.Run) (*jetflow.Run, error) {
	var bad error
	r, err := e.store.Transition(ctx, id, func(r *jetflow.Run) bool {
		bad = nil // of an earlier call, on a record read again
		n := next(r)
		if n == nil {
			return false
		}
		if bad = Check(step, r.State, n.State); bad != nil {
			return false
		}
		rev := r.Revision
		*r = *n
		r.Revision = rev
		return true
	})
	if bad != nil {
		return r, fmt.Errorf("run %s: %w", id, bad)
	}
	return r, err
}
