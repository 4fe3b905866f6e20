package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/payload"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
)

// Context is a workflow's view of its execution: the workflow function and
// each branch started with Go get one. Steps take it as their first
// argument. It is not safe for concurrent use: each branch has its own.
type Context struct {
	seg  *segment // the segment running it: a resumed execution's moves on
	b    *branch  // the branch it is the Context of
	path string   // "" for the workflow function, the branch's step id otherwise
	n    int      // steps taken in this branch
}

// ID is the workflow's id.
func (wf *Context) ID() string { return wf.seg.wf }

// Name is the workflow's name.
func (wf *Context) Name() string { return wf.seg.def.Name() }

// Segment is the number of the segment running this replay (from 1): it
// grows each time the workflow resumes after a wait.
func (wf *Context) Segment() int { return wf.seg.n }

// Context is the context of the segment running the code: it ends with
// cause jetflow.ErrCanceled when the workflow is canceled. Inline steps
// receive it. It follows the code from segment to segment: code that
// waited and was resumed in a later segment (sticky execution) gets that
// segment's context through it; only a channel taken from its Done
// belongs to the segment it was taken in.
func (wf *Context) Context() context.Context { return followCtx{wf.seg.x} }

// peek is the id of the next step of this branch.
func (wf *Context) peek() string {
	if wf.path == "" {
		return strconv.Itoa(wf.n + 1)
	}
	return wf.path + "." + strconv.Itoa(wf.n+1)
}

// begin takes the next step id, after checking that the workflow may go on.
func (wf *Context) begin() string {
	id := wf.peek()
	wf.n++
	if ctx := wf.seg.ctx; ctx.Err() != nil {
		wf.seg.abort(context.Cause(ctx))
	}
	return id
}

// entry returns the journal entry of step id, or nil, after checking that
// it is the step the code asks for.
func (wf *Context) entry(id, name string, kind StepKind) *Entry {
	wf.seg.visit(id)
	e := wf.seg.entryAt(id)
	if e == nil || !e.ended() {
		wf.seg.stopReadOnly()
	}
	if e == nil && (len(name) > MaxStepName || !utf8.ValidString(name)) {
		wf.seg.failWorkflow(jetflow.Permanent(fmt.Errorf("%w: step %s (%s): %d bytes, valid UTF-8 %t (at most %d bytes of valid UTF-8)",
			ErrInvalidStepName, id, kind, len(name), utf8.ValidString(name), MaxStepName)))
	}
	if e != nil && (e.Name != name || e.Kind != kind) {
		wf.seg.failWorkflow(fmt.Errorf("%w: step %s is %s %q in the journal, the code now asks for %s %q",
			ErrNondeterministic, id, e.Kind, e.Name, kind, name))
	}
	return e
}

// driver serves one workflow definition's internal functions on a worker.
type driver struct {
	p   *producer.Producer
	def definition

	mu sync.Mutex
	// sticky keeps the journal of workflows that parked here, keyed by
	// workflow id: the next segment, if it runs here and the cursor is
	// still at the revision this one wrote (no other segment ran
	// between), replays without reading the journal again.
	sticky map[string]*stickyJournal
	// execs keeps the executions of workflows that parked here (sticky
	// execution, sticky.go).
	execs *execCache
}

// stickyJournal is a journal as a segment left it when it parked.
type stickyJournal struct {
	rev    uint64 // the cursor's revision the segment wrote
	steps  map[string]*Entry
	claims map[uint64]string
}

// maxSticky bounds the journals a driver keeps.
const maxSticky = 1024

func (d *driver) keep(wf string, j *stickyJournal) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sticky == nil {
		d.sticky = map[string]*stickyJournal{}
	}
	if len(d.sticky) >= maxSticky {
		for k := range d.sticky { // evict one at random
			delete(d.sticky, k)
			break
		}
	}
	d.sticky[wf] = j
}

// take returns and forgets the journal kept for wf at cursor revision rev.
func (d *driver) take(wf string, rev uint64) *stickyJournal {
	d.mu.Lock()
	defer d.mu.Unlock()
	j := d.sticky[wf]
	delete(d.sticky, wf)
	if j == nil || j.rev != rev {
		return nil
	}
	return j
}

func (d *driver) journal(ctx context.Context) (*journal, error) { return openJournal(ctx, d.p) }

// internalOptions: the internal functions are short and retried quickly
// and for long, so that a NATS hiccup never strands a workflow (a segment
// that finds its predecessor still running retries too). The delay between
// tries is capped at the worker's default ReplayGrace: a segment or a wake
// that failed many times across server crashes (each crash a few failures)
// runs again within seconds of the server's return, as a run held back as
// a possible replay does, not up to 30 s later (the cap before).
var internalOptions = worker.Options{
	MaxAttempts: internalAttempts,
	Backoff:     jetflow.Backoff{Initial: 50 * time.Millisecond, Base: 2, Max: worker.DefaultReplayGrace},
}

// wakeOptions: a wake only schedules the segment its workflow waits for,
// once (resume: the segment's id is derived from the journal), so two
// copies running at once do no harm. It is never claimed: a wake stored
// before a worker's reconnect (due while the server was down) runs at once
// instead of waiting ReplayGrace for a claim elsewhere, as a run that may
// be running unclaimed in another worker must.
var wakeOptions = func() worker.Options {
	o := internalOptions
	o.NoClaim = true
	return o
}()

// internalAttempts: about 8 hours of retries at the 5 s cap (4 on average,
// with the backoff's jitter), as 1,000 at a 30 s cap gave before.
const internalAttempts = 6000

// Register registers workflow def on worker w: its segment, wake and
// start functions (SegmentFunction, WakeFunction, StartFunction), and
// answers its queries (Query) until w stops. Call it before w.Start, on
// every worker that runs the workflow. Errors: worker.ErrRegistered.
func Register[In, Out any](w *worker.Worker, def *Workflow[In, Out], opts ...RegisterOptions) error {
	var o RegisterOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	d := &driver{p: w.Producer(), def: def, execs: newExecCache(o.cachedExecutions())}
	segOpts := internalOptions
	segOpts.MaxParallel, segOpts.Concurrency = o.MaxParallel, o.Concurrency
	segFn := jetflow.Define[segArgs](SegmentFunction(def.name))
	wakeFn := jetflow.Define[jetflow.Completion](WakeFunction(def.name))
	startFn := jetflow.Define[json.RawMessage](StartFunction(def.name))
	if err := worker.Register(w, segFn, d.segment, segOpts); err != nil {
		return err
	}
	if err := worker.Register(w, startFn, d.startRun, internalOptions); err != nil {
		return err
	}
	if err := worker.Register(w, wakeFn, d.wake, wakeOptions); err != nil {
		return err
	}
	if err := d.serveQueries(w); err != nil {
		return err
	}
	go func() {
		<-w.Stopped()
		d.stopExecutions()
	}()
	return nil
}

// forget drops the execution cached for workflow wf, which has ended
// (canceled while it waited).
func (d *driver) forget(wf string) {
	if x := d.execs.take(wf); x != nil {
		x.drop()
	}
}

// stopExecutions ends the executions cached here, and waits until their
// goroutines have ended: the worker stopped, no segment runs.
func (d *driver) stopExecutions() {
	xs := d.execs.close()
	dropAll(xs)
	for _, x := range xs {
		x.alive.Wait()
	}
}

// RegisterOptions tune how a definition's workflows run.
type RegisterOptions struct {
	// MaxParallel is the most segments of this definition running at once
	// across every worker (the segment function's worker.Options
	// MaxParallel): the most of its workflows executing code at a time.
	// Workflows that wait (sleep, event, child) do not count. Default
	// 1000.
	MaxParallel int
	// Concurrency is the most segments this worker runs at once. Default
	// the worker's Config.Concurrency.
	Concurrency int
	// CachedExecutions is the most waiting workflows of this definition
	// whose execution this worker keeps (sticky execution: the goroutines
	// of the workflow's code, blocked where they wait), so that the next
	// segment, when it runs on this worker, resumes the code where it
	// waited instead of replaying it from the top. The least recently
	// parked is evicted first; the worker's Stop ends them all. Default
	// DefaultCachedExecutions; negative: none (every segment replays).
	CachedExecutions int
}

// cachedExecutions is CachedExecutions with its default.
func (o RegisterOptions) cachedExecutions() int {
	switch {
	case o.CachedExecutions < 0:
		return 0
	case o.CachedExecutions == 0:
		return DefaultCachedExecutions
	}
	return o.CachedExecutions
}

// wake runs when a child run of the workflow ends or one of its timers
// fires: it resumes the workflow if it waits.
func (d *driver) wake(ctx context.Context, j *worker.Job[jetflow.Completion]) error {
	var wc wakeContext
	if err := json.Unmarshal(j.Args.Context, &wc); err != nil || wc.WF == "" {
		return jetflow.Permanent(fmt.Errorf("%w: wake %s: context %s", jetflow.ErrBadArgs, j.ID(), j.Args.Context))
	}
	if wc.Fork {
		return nil // an earlier version's Restart armed it: nothing to do now
	}
	if wc.Purge {
		return janitor(ctx, d.p, d.def.Name(), wc.WF)
	}
	r, err := engine.Of(d.p).Get(ctx, wc.WF)
	if errors.Is(err, jetflow.ErrNotFound) {
		r, _, err = engine.Of(d.p).Store().Decide(ctx, wc.WF)
	}
	if errors.Is(err, jetflow.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if r.State.Terminal() {
		// Canceled: its journal goes when its record does.
		d.forget(wc.WF)
		return schedulePurge(ctx, d.p, d.def.Name(), r)
	}
	jr, err := d.journal(ctx)
	if err != nil {
		return err
	}
	return resume(ctx, d.p, jr, d.def.Name(), wc.WF)
}

// resume schedules the next segment of workflow id if its last segment
// ended waiting. It is idempotent (the segment's id is derived), and a
// resume that comes while a segment runs does nothing: that segment
// checks what it waits for once more after it records that it waits.
//
// A cursor that cannot be read, or names a segment that never ran, fails
// the workflow (failBroken): nothing would resume it otherwise.
func resume(ctx context.Context, p *producer.Producer, jr *journal, name, id string) error {
	cur, err := jr.cursorOf(ctx, id)
	if err == nil && (cur == nil || !cur.Waiting) {
		// Nothing waits, says a direct get, which a replica that is
		// behind may answer: the leader decides, or the resume is lost.
		cur, err = jr.latestCursor(ctx, id)
	}
	if err == nil {
		err = checkAhead(ctx, p, id, cur)
	}
	if isBadJournal(err) {
		return failBroken(ctx, p, name, id, err)
	}
	if err != nil || !cur.waits() {
		return err
	}
	n := cur.Seg + 1
	seg := SegmentID(id, n)
	for range 2 {
		_, err = p.Enqueue(ctx, segmentCall(name, segArgs{WF: id, N: n}), producer.WithID(seg), producer.WithParent(id))
		if !errors.Is(err, producer.ErrAlreadyExists) {
			return err
		}
		r, gerr := engine.Of(p).Get(ctx, seg)
		if gerr != nil || !r.State.Terminal() {
			return gerr // it is there and will run
		}
		if moved, err := cursorMoved(ctx, jr, id, cur); moved || err != nil {
			// Segment n+1 (or another) took the cursor since it was read,
			// after what this resume is for was stored: it sees it.
			return err
		}
		// Segment n+1 ended without taking the cursor (it found segment n
		// running again after a redelivery): one more, named after this
		// cursor's revision, so that every resumer of this state makes
		// the same one.
		seg = jetflow.DerivedID(fmt.Sprintf("%s-seg%d-%d", id, n, cur.rev))
	}
	return nil
}

// cursorMoved reports whether workflow id's cursor, as its leader holds
// it, is no longer cur (a segment wrote it since cur was read). A resume
// that finds the segment it made ended asks it before it makes another:
// a spurious one would take the cursor from the segment that runs, or
// from its cached execution (each then replays).
func cursorMoved(ctx context.Context, jr *journal, id string, cur *cursor) (bool, error) {
	now, err := jr.latestCursor(ctx, id)
	if err != nil {
		return false, err
	}
	return now == nil || now.rev != cur.rev, nil
}

// errBusy: the previous segment still runs; this one is retried shortly.
var errBusy = errors.New("workflow: previous segment still running")

// segment runs one segment of a workflow: it replays the workflow
// function from the journal until the function ends or every branch
// waits. A journal that cannot be read (badJournal) fails the workflow:
// retrying would read it again.
func (d *driver) segment(ctx context.Context, j *worker.Job[segArgs]) error {
	err := d.runSegment(ctx, j)
	if isBadJournal(err) && ctx.Err() == nil {
		return failBroken(ctx, d.p, d.def.Name(), j.Args.WF, err)
	}
	return err
}

// failBroken fails workflow id, whose journal cannot be read (cause, a
// badJournalError naming the key), as its end would (the record, its
// callback, the journal's purge), and returns cause made permanent. A
// workflow that has ended already is left as it is.
func failBroken(ctx context.Context, p *producer.Producer, name, id string, cause error) error {
	eng := engine.Of(p)
	if err := putBrokenCode(ctx, p, id, cause); err != nil {
		return err
	}
	now := time.Now().UTC()
	r, err := eng.Runs().Change(ctx, engine.Fail, id, func(r *jetflow.Run) *jetflow.Run {
		return engine.EndRecord(r, jetflow.Failed, nil, cause.Error(), 1, now, now)
	})
	switch {
	case errors.Is(err, kv.ErrTerminal):
		return jetflow.Permanent(cause)
	case errors.Is(err, jetflow.ErrNotFound), errors.Is(err, jetflow.ErrBadRecord):
		return jetflow.Permanent(fmt.Errorf("%w (the workflow's record: %v)", cause, err))
	case err != nil:
		return err
	}
	if err := eng.Complete(ctx, r); err != nil {
		return err
	}
	if err := schedulePurge(ctx, p, name, r); err != nil {
		return err
	}
	return jetflow.Permanent(cause)
}

// checkAhead checks a cursor that is not waiting and names a later segment
// than the caller knows of: that segment, a run with a record of its own
// (resume creates SegmentID(id, n) first, always), runs or ran. A cursor
// that names a segment that never existed would leave the workflow
// waiting for it for good.
func checkAhead(ctx context.Context, p *producer.Producer, id string, cur *cursor) error {
	if cur == nil || cur.Seg <= 1 || !cur.running() {
		return nil
	}
	seg := SegmentID(id, cur.Seg)
	_, err := engine.Of(p).Get(ctx, seg)
	if errors.Is(err, jetflow.ErrNotFound) {
		_, _, err = engine.Of(p).Store().Decide(ctx, seg)
	}
	if errors.Is(err, jetflow.ErrNotFound) {
		return badJournal(cursorKey(id), "cursor at segment %d, which never ran (run %s)", cur.Seg, seg)
	}
	return err
}

// runSegment runs segment a.N of workflow a.WF: it reads the workflow's
// record, takes the cursor (enter), claims the record, replays the
// workflow's code, and ends, fails or parks the workflow (conclude).
func (d *driver) runSegment(ctx context.Context, j *worker.Job[segArgs]) error {
	a := j.Args
	if a.WF == "" || a.N < 1 {
		return jetflow.Permanent(fmt.Errorf("%w: segment %s", jetflow.ErrBadArgs, j.ID()))
	}
	rec, err := d.record(ctx, a.WF)
	if rec == nil || err != nil {
		return err
	}
	if rec.State.Terminal() {
		d.forget(a.WF)
		return schedulePurge(ctx, d.p, d.def.Name(), rec)
	}
	jr, err := d.journal(ctx)
	if err != nil {
		return err
	}
	if src := wfwire.ForkSource(rec); src != "" && a.N == 1 {
		// Its Restart did not finish: the copy and the release are
		// this segment's.
		if rec, err = finishFork(ctx, d.p, jr, rec, src); errors.Is(err, kv.ErrTerminal) {
			return schedulePurge(ctx, d.p, d.def.Name(), rec)
		} else if err != nil {
			return err
		}
		a.Forked = true
	}
	rs, err := d.enter(ctx, jr, a, j.Fresh())
	if rs == nil || err != nil {
		return err
	}
	s := &segment{d: d, jr: jr, def: d.def, wf: a.WF, n: a.N, ctx: ctx, steps: generation(rs.steps, rs.cur.gen()), claims: rs.claims, cur: rs.cur, rec: rec, id: j.ID(), started: time.Now().UTC(), created: rec.CreationTime, x: rs.x}
	if s.x == nil {
		s.x = newExecution(d.execs.on())
	}
	defer s.leave()
	s.drop = endedRuns(a.WF, a.N, s.steps)
	// The record's claim (inProgress): a first segment that finds it
	// pending writes it only if it runs for recordClaimAfter, or when it
	// parks or starts a child (a short workflow goes from pending to its
	// end, one write less, as a short run does); any later segment at
	// once, as it lists itself among the record's children so that a
	// Cancel reaches it.
	if a.N == 1 && rec.State == jetflow.Pending && slices.Contains(rec.Children, s.id) {
		// An error here is the next write's to meet (park, adopt, finish).
		t := time.AfterFunc(recordClaimAfter, func() { _ = s.claim(ctx) })
		defer t.Stop()
	} else if err := s.claim(ctx); errors.Is(err, kv.ErrTerminal) {
		return nil
	} else if err != nil {
		return err
	}
	return s.run(ctx, rec)
}

// run runs the workflow's code in this segment: it resumes the execution
// it took from the cache, or starts one that replays from the top; then,
// once every branch has ended or waits, concludes. The execution is
// dropped unless the segment's park kept it.
func (s *segment) run(ctx context.Context, rec *jetflow.Run) error {
	if s.x.main == nil {
		s.start(rec)
	} else {
		s.x.resume(s)
	}
	return s.conclude(ctx, s.x.settle())
}

// start starts the workflow's code from the top in execution s.x.
func (s *segment) start(rec *jetflow.Run) {
	root := s.root()
	in := s.input(rec)
	s.x.cur.Store(s)
	s.x.main = s.x.spawn(root, func() (json.RawMessage, error) { return s.def.run(root, in) })
}

// leave drops the segment's execution unless its park kept it.
func (s *segment) leave() {
	if !s.kept {
		s.x.drop()
	}
}

// record reads the record of workflow wf; nil when there is none, and so
// nothing to run.
func (d *driver) record(ctx context.Context, wf string) (*jetflow.Run, error) {
	name := d.def.Name()
	rec, err := engine.Of(d.p).Store().Lookup(ctx, wf)
	if errors.Is(err, jetflow.ErrNotFound) {
		// Start writes the record before the first segment, and a record
		// goes only when it expires: the workflow ended (a delayed start
		// canceled long ago fires here) or never started. Nothing to run.
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if rec.Name != name {
		return nil, jetflow.Permanent(fmt.Errorf("%w: run %s is a %s, not a %s", ErrBadRecord, wf, rec.Name, name))
	}
	return rec, nil
}

// replayState is what a segment replays from: the cursor it holds, and the
// journal's steps and claims.
type replayState struct {
	cur    *cursor
	steps  map[string]*Entry
	claims map[uint64]string
	x      *execution // the execution to resume, nil to replay
}

// enter takes the workflow's cursor for segment a.N and reads the journal;
// nil when the segment has nothing to run.
//
// The cursor: written by the first segment when it parks (a workflow that
// ends in its first segment never writes one), moved on by
// compare-and-swap by each later segment, so that two segments never run
// at once. A first segment that runs first (fresh: a first delivery of its
// first attempt) knows the journal is empty and reads nothing; any other
// reads the journal, cursor included.
func (d *driver) enter(ctx context.Context, jr *journal, a segArgs, fresh bool) (*replayState, error) {
	switch {
	case a.N == 1 && fresh && !a.Forked:
		return &replayState{cur: &cursor{Seg: 1}, steps: map[string]*Entry{}, claims: map[uint64]string{}}, nil
	case a.N == 1:
		return d.enterFirst(ctx, jr, a.WF)
	}
	return d.enterLater(ctx, jr, a)
}

// segmentTurn is what a segment finds the cursor says of its turn.
type segmentTurn int

const (
	// turnMine: the segment's turn: it takes the cursor.
	turnMine segmentTurn = iota
	// turnFirst: no cursor yet, for the first segment: it starts one.
	turnFirst
	// turnNoCursor: no cursor for a later segment: the journal is broken.
	turnNoCursor
	// turnAhead: a later segment ran, or the workflow ended.
	turnAhead
	// turnRedelivered: the segment before runs again (a redelivery): it
	// resumes the workflow when it parks, with a segment of its own.
	turnRedelivered
	// turnBehind: the cursor is at a segment older than the one before:
	// the journal is broken.
	turnBehind
)

// turnOf decides, from cursor cur, whether segment n may run.
func turnOf(cur *cursor, n int) segmentTurn {
	switch {
	case cur == nil && n == 1:
		return turnFirst
	case cur == nil:
		return turnNoCursor
	case cur.state() == cursorDone || cur.Seg > n:
		return turnAhead
	case n == 1, cur.Seg == n, cur.parkedAt(n - 1):
		// For the first segment: segment 1 again (a redelivery), it takes
		// the cursor back.
		return turnMine
	case cur.Seg == n-1:
		return turnRedelivered
	}
	return turnBehind
}

// cursorState is what a cursor says of the workflow.
type cursorState int

const (
	// cursorRunning: segment Seg holds it (runs, or died running).
	cursorRunning cursorState = iota
	// cursorParked: segment Seg parked; the next segment takes it.
	cursorParked
	// cursorDone: the workflow ended.
	cursorDone
)

// state is the cursor's state.
func (c *cursor) state() cursorState {
	switch {
	case c.Done:
		return cursorDone
	case c.Waiting:
		return cursorParked
	}
	return cursorRunning
}

// The cursor's transitions: each returns the next cursor, written by
// compare-and-swap over the revision it keeps (putCursor).

// taken is the cursor held by segment n.
func (c cursor) taken(n int) *cursor {
	c.Seg, c.Waiting, c.Waits = n, false, nil
	return &c
}

// parked is the cursor of its segment parked, waiting for waits.
func (c cursor) parked(waits []string) *cursor {
	c.Waiting, c.Waits = true, waits
	return &c
}

// continued is the cursor of its segment ending the run: parked, the
// next segment starting the next run with input.
func (c cursor) continued(input json.RawMessage) *cursor {
	c.Waiting, c.Waits = true, []string{"continue as new"}
	c.Gen, c.Input = c.gen()+1, input
	return &c
}

// running reports whether a segment holds cursor c.
func (c *cursor) running() bool { return c.state() == cursorRunning }

// waits reports whether cursor c, nil when there is none, waits for the
// next segment: a segment parked and the workflow has not ended.
func (c *cursor) waits() bool { return c != nil && c.state() == cursorParked }

// parkedAt reports whether segment seg parked and the workflow goes on.
func (c *cursor) parkedAt(seg int) bool { return c.Seg == seg && c.state() == cursorParked }

// reached reports whether cursor c, nil when there is none, shows segment
// n's turn or later: segment n-1 parked, segment n or a later one ran, or
// the workflow ended.
func (c *cursor) reached(n int) bool {
	if c == nil {
		return false
	}
	return c.state() == cursorDone || c.Seg >= n || c.parkedAt(n-1)
}

// enterFirst is enter for the first segment run again (or forked): it
// reads the journal, and takes the cursor back if it has one.
func (d *driver) enterFirst(ctx context.Context, jr *journal, wf string) (*replayState, error) {
	snap, err := jr.load(ctx, wf)
	if err != nil {
		return nil, err
	}
	rs := &replayState{cur: snap.cur, steps: snap.steps, claims: snap.claims}
	switch turnOf(snap.cur, 1) {
	case turnFirst:
		rs.cur = &cursor{Seg: 1}
		return rs, nil
	case turnAhead:
		return nil, checkAhead(ctx, d.p, wf, snap.cur)
	}
	rs.cur = rs.cur.taken(1)
	if err := holdCursor(ctx, jr, wf, rs.cur); err != nil {
		return nil, err
	}
	return rs, nil
}

// enterLater is enter for segment a.N > 1: it moves the cursor on from
// segment a.N-1 parked, then reads the journal (kept from the segment
// before when this process ran it).
func (d *driver) enterLater(ctx context.Context, jr *journal, a segArgs) (*replayState, error) {
	cur, err := jr.cursorOf(ctx, a.WF)
	if err == nil && !cur.reached(a.N) {
		// No cursor, or one from before segment n-1 parked: a direct
		// get, which a replica that is behind may answer, would end or
		// drop this segment. The leader decides.
		cur, err = jr.latestCursor(ctx, a.WF)
	}
	if err != nil {
		return nil, err
	}
	switch turnOf(cur, a.N) {
	case turnNoCursor:
		return nil, jetflow.Permanent(fmt.Errorf("workflow %s: segment %d without a cursor", a.WF, a.N))
	case turnAhead:
		return nil, checkAhead(ctx, d.p, a.WF, cur)
	case turnRedelivered:
		return nil, nil
	case turnBehind:
		return nil, jetflow.Permanent(fmt.Errorf("workflow %s: segment %d, cursor at %d", a.WF, a.N, cur.Seg))
	}
	cur = cur.taken(a.N)
	kept := d.take(a.WF, cur.rev)
	x := d.cached(ctx, a.WF, cur, a.N)
	if err := holdCursor(ctx, jr, a.WF, cur); err != nil {
		if x != nil {
			dropAll(d.execs.put(x)) // still parked where it was: kept again
		}
		return nil, err
	}
	switch {
	case x != nil:
		return &replayState{cur: cur, steps: x.steps, claims: x.claims, x: x}, nil
	case kept != nil:
		return &replayState{cur: cur, steps: kept.steps, claims: kept.claims}, nil
	}
	snap, err := jr.load(ctx, a.WF)
	if err != nil {
		return nil, err
	}
	return &replayState{cur: cur, steps: snap.steps, claims: snap.claims}, nil
}

// cached takes the execution cached for workflow wf and returns it if
// segment n, taking over cursor cur (before its write), may resume it
// (mayResume); otherwise it returns nil (the segment replays) and drops
// it, or keeps it when cur is older than the cursor its park wrote (a
// replica behind answered: the segment's write of the cursor fails, and
// its retry may resume it).
func (d *driver) cached(ctx context.Context, wf string, cur *cursor, n int) *execution {
	x := d.execs.take(wf)
	if x == nil {
		return nil
	}
	if !x.waitParked(ctx) {
		x.drop()
		return nil
	}
	c := stickyCheck{cached: true, parkedRev: x.rev, parkedGen: x.gen, parkedSeg: x.seg, rev: cur.rev, gen: cur.gen(), seg: n}
	switch {
	case mayResume(c) == resumeCached:
		return x
	case cur.rev < x.rev:
		dropAll(d.execs.put(x))
	default:
		x.drop()
	}
	return nil
}

// holdCursor writes cur by compare-and-swap; a segment that loses it to
// another is retried shortly.
func holdCursor(ctx context.Context, jr *journal, wf string, cur *cursor) error {
	ok, err := jr.putCursor(ctx, wf, cur)
	if err != nil {
		return err
	}
	if !ok {
		return jetflow.RetryAfter(100*time.Millisecond, errBusy)
	}
	return nil
}

// segmentEnd is how a segment ends, once its branches have returned or
// suspended (decideEnd).
type segmentEnd int

const (
	// endRetry: canceled, or aborted: the segment stops and is retried.
	endRetry segmentEnd = iota
	// endFail: the workflow fails (a fatal error, a replay that ends
	// before a journaled step, the function's error).
	endFail
	// endContinue: the function asked to continue as new.
	endContinue
	// endSucceed: the function returned its result.
	endSucceed
	// endPark: every branch waits.
	endPark
)

// decideEnd decides how a segment ends: stopped (ctx ended, or aborted),
// the workflow failed (fatal, unreached: the code ended before a journaled
// step), or as the main branch's outcome says.
func decideEnd(stopped, fatal bool, main branchOutcome, unreached bool) segmentEnd {
	switch {
	case stopped:
		return endRetry
	case fatal, main.returned && unreached:
		return endFail
	case !main.returned:
		return endPark
	case asNew(main.err) != nil:
		return endContinue
	case main.err != nil:
		return endFail
	}
	return endSucceed
}

// conclude ends the segment once its branches have returned or suspended,
// as decideEnd says: it stops (to be retried), fails the workflow, ends
// it with the main branch's result, continues it as new, or parks it.
func (s *segment) conclude(ctx context.Context, main branchOutcome) error {
	stopped := ctx.Err() != nil || s.aborted != nil
	unreached := s.unreached()
	switch decideEnd(stopped, s.fatal != nil, main, unreached != "") {
	case endRetry:
		if ctx.Err() != nil {
			return s.leaving(context.Cause(ctx))
		}
		return s.leaving(s.aborted)
	case endFail:
		return s.finish(ctx, jetflow.Failed, nil, s.failure(main, unreached))
	case endContinue:
		return s.continueAsNew(ctx, asNew(main.err).input)
	case endSucceed:
		return s.finish(ctx, jetflow.Success, main.result, nil)
	}
	return s.park(ctx)
}

// failure is the error a workflow fails with (decideEnd's endFail).
func (s *segment) failure(main branchOutcome, unreached string) error {
	switch {
	case s.fatal != nil:
		return s.fatal
	case unreached != "":
		e := s.entryAt(unreached)
		return jetflow.Permanent(fmt.Errorf("%w: step %s is %s %q in the journal, the code now ends without reaching it",
			ErrNondeterministic, unreached, e.Kind, e.Name))
	}
	return main.err
}

// segment is one replay of a workflow.
type segment struct {
	d   *driver
	jr  *journal
	def definition
	wf  string
	n   int
	ctx context.Context
	cur *cursor

	id      string    // the segment's run id
	started time.Time // when the segment started
	created time.Time // the workflow record's creation time

	// wmu orders the segment's writes of the workflow's record: the
	// claim (from a timer), adoptions, the end.
	wmu     sync.Mutex
	claimed bool // the record is inProgress with this segment among its children
	// drop: the children the claim removes (endedRuns), from the journal
	// as the segment found it, before its code ran.
	drop  map[string]bool
	ended bool // the segment wrote the record's end: no more claims

	mu sync.Mutex
	// rec is the workflow's record as this segment last wrote it (nil
	// once another write, an adoption, changed it).
	rec     *jetflow.Run
	steps   map[string]*Entry
	claims  map[uint64]string
	waits   []wait
	visited map[string]bool // the steps this replay reached
	// floors: the event floors (eventFloor), by kind and name; own: the
	// lowest revision each step claimed (readFloor). Nil until computed,
	// then kept up by put and addClaim.
	floors map[string]uint64
	own    map[string]uint64
	// readOnly: a query's replay: every branch stops at its first step
	// that has not ended, and nothing is written.
	readOnly bool
	queries  map[string]func() (json.RawMessage, error)
	aborted  error // the segment stops and is retried (replayed)
	fatal    error // the workflow fails
	x        *execution
	// kept: the segment parked and left its execution in the cache.
	kept bool
}

// wait is what a suspended branch waits for.
type wait struct {
	step  string
	kind  StepKind
	run   string
	until time.Time
	event string
}

func (w wait) String() string {
	var parts []string
	if w.run != "" {
		parts = append(parts, "run "+w.run)
	}
	if w.event != "" {
		parts = append(parts, "event "+w.event)
	}
	if !w.until.IsZero() {
		parts = append(parts, "until "+w.until.Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("step %s (%s): %s", w.step, w.kind, strings.Join(parts, ", "))
}

// visit records that this replay reached step id.
func (s *segment) visit(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.visited == nil {
		s.visited = map[string]bool{}
	}
	s.visited[id] = true
}

// unreached returns the first journaled step (in program order) that
// this replay did not reach: the code ended before a step an earlier
// execution journaled, so it took another path (nondeterministic), and
// what that step started (a call, a child) or waited for would be
// dropped silently. "" when every step was reached.
func (s *segment) unreached() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := ""
	for id := range s.steps {
		if !s.visited[id] && (first == "" || stepLess(id, first)) {
			first = id
		}
	}
	return first
}

func (s *segment) entryAt(id string) *Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.steps[id]
}

// put journals e (see journal.putEntry) and keeps what is stored. An
// entry too large for the journal is cut down first (shrink): the step
// fails with ErrResultTooLarge rather than its segment being retried, and
// its code run again, for as long as the segment's attempts last. One that
// still does not fit fails the workflow.
func (s *segment) put(e *Entry) *Entry {
	s.stopReadOnly()
	e.Segment = s.n
	if e.State == StepDone && len(e.Result) > payload.MaxSize {
		shrink(e, payload.MaxSize) // more than jetflow offloads: the step fails
	} else if e.State == StepDone {
		e.Result = s.offload("step-"+e.Step, e.Result)
	}
	stored, err := s.jr.putEntry(s.ctx, s.wf, e)
	if tooLarge(err) && shrink(e, entryLimit(s.jr.js.Conn())) {
		stored, err = s.jr.putEntry(s.ctx, s.wf, e)
	}
	if tooLarge(err) {
		s.failWorkflow(jetflow.Permanent(fmt.Errorf("%w: %w", ErrResultTooLarge, err)))
	}
	if err != nil {
		s.abort(err)
	}
	s.keepStored(stored)
	return stored
}

// keepStored keeps entry e, as the journal stores it, among the
// segment's steps (and its event floors).
func (s *segment) keepStored(e *Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps[e.Step] = e
	if s.floors != nil {
		raiseFloor(s.floors, e)
	}
}

// addClaim records that step id claimed the event (or update) of
// revision seq.
func (s *segment) addClaim(seq uint64, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims[seq] = id
	if s.own != nil {
		lowerOwn(s.own, seq, id)
	}
}

// readFloor is the revision after which the await of step id reads the
// events (kind KindEvent) or updates (KindUpdate) named name: their
// floor (floorLocked), or lower when the step claimed one at or below it
// (its segment stopped between the claim and the step's entry: the step
// takes that one again).
func (s *segment) readFloor(kind StepKind, name, id string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.floorLocked(kind, name)
	if seq, ok := s.own[id]; ok && seq <= f {
		f = seq - 1
	}
	return f
}

// floorLocked (s.mu held) is the floor of the events (kind KindEvent) or
// updates (KindUpdate) named name: the revision of the last one an ended
// await of this run took. When an await takes an event, every event of
// its name stored before is claimed (events are taken in order, the
// await's read caught up with the journal), for good: an await reads only
// those stored after the floor (readFloor), its cost independent of the
// events taken before. The floors are computed from the steps once, then
// kept up by put.
func (s *segment) floorLocked(kind StepKind, name string) uint64 {
	if kind != KindEvent && kind != KindUpdate {
		return 0
	}
	if s.floors == nil {
		s.floors, s.own = map[string]uint64{}, map[string]uint64{}
		for _, e := range s.steps {
			raiseFloor(s.floors, e)
		}
		for seq, id := range s.claims {
			lowerOwn(s.own, seq, id)
		}
	}
	return s.floors[floorKey(kind, name)]
}

// lowerOwn records in own, the lowest revision each step claimed, that
// step id claimed revision seq.
func lowerOwn(own map[string]uint64, seq uint64, id string) {
	if cur, ok := own[id]; !ok || seq < cur {
		own[id] = seq
	}
}

// raiseFloor raises floors for entry e, an await that took an event or
// update.
func raiseFloor(floors map[string]uint64, e *Entry) {
	if e.State != StepDone || (e.Kind != KindEvent && e.Kind != KindUpdate) || e.Waits == nil {
		return
	}
	k := floorKey(e.Kind, e.Name)
	floors[k] = max(floors[k], e.Waits.Seq)
}

func floorKey(kind StepKind, name string) string { return string(kind) + "/" + name }

// tooLarge reports whether err is a journal write too large for the
// journal (ours, or the client's or the server's max payload).
func tooLarge(err error) bool {
	return errors.Is(err, ErrResultTooLarge) || errors.Is(err, nats.ErrMaxPayload)
}

// maxStepError bounds the error a journal entry keeps when the entry is
// too large for the journal.
const maxStepError = 16 << 10

// shrink cuts entry e down to fit a journal entry of limit bytes: its
// error clipped, and an ended step's result replaced by the step's failure
// with ErrResultTooLarge. It reports whether it changed e.
func shrink(e *Entry, limit int) bool {
	changed := false
	if len(e.Error) > maxStepError {
		e.Error = strings.ToValidUTF8(e.Error[:maxStepError], "") + "…"
		changed = true
	}
	if e.State == StepDone && len(e.Result) > 0 {
		n := len(e.Result)
		e.State, e.Result, e.Code = StepFailed, nil, codeTooLarge
		e.Error = fmt.Sprintf("%v: step %s (%s %q): a result of %d bytes, more than a journal entry holds (%d)",
			ErrResultTooLarge, e.Step, e.Kind, e.Name, n, limit)
		changed = true
	}
	return changed
}

// abort ends the calling branch and the segment with err: the segment is
// retried and replays.
func (s *segment) abort(err error) {
	s.mu.Lock()
	if s.aborted == nil {
		s.aborted = err
	}
	s.mu.Unlock()
	runtime.Goexit()
}

// failWorkflow ends the calling branch; the workflow fails with err.
func (s *segment) failWorkflow(err error) {
	s.failWorkflow0(err)
	runtime.Goexit()
}

func (s *segment) failWorkflow0(err error) {
	s.mu.Lock()
	if s.fatal == nil {
		s.fatal = err
	}
	s.mu.Unlock()
}

// leaving runs when a segment stops with err without parking or ending
// the workflow (canceled, or to be retried): if it journaled steps and the
// workflow never parked (no janitor armed yet), it arms the janitor, so
// that a Cancel that stopped it does not leave its journal for good. It
// returns err, saying so when the janitor could not be armed (a retried
// segment arms it when it parks).
func (s *segment) leaving(err error) error {
	s.mu.Lock()
	wrote := len(s.steps) > 0
	s.mu.Unlock()
	if s.cur.rev != 0 || !wrote {
		return err
	}
	ctx, cancel := s.detached()
	defer cancel()
	if jerr := armJanitor(ctx, s.d.p, s.def.Name(), s.wf, time.Now().Add(engine.Of(s.d.p).Streams().Retention)); jerr != nil {
		return fmt.Errorf("%w (its journal's janitor not armed: %v)", err, jerr)
	}
	return err
}

// recordClaimAfter is how long a first segment runs before it claims the
// workflow's record (worker.DefaultClaimAfter, as for a run).
const recordClaimAfter = 100 * time.Millisecond

// claim writes the workflow's record inProgress with this segment among its
// children, once. kv.ErrTerminal: the workflow has ended (canceled).
func (s *segment) claim(ctx context.Context) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.claimed || s.ended {
		return nil
	}
	eng := engine.Of(s.d.p)
	now := time.Now().UTC()
	claim := func(r *jetflow.Run) *jetflow.Run { return engine.StartRecord(r, s.id, now, s.drop) }
	// Over the record as last read or written (one read less); a conflict
	// (a Cancel, a child's adoption) reads it again.
	s.mu.Lock()
	last := s.rec
	s.mu.Unlock()
	var rec *jetflow.Run
	err := kv.ErrConflict
	if last != nil {
		c := claim(last)
		var rev uint64
		if rev, err = eng.Runs().Write(ctx, engine.Claim, last.State, c, last.Revision); err == nil {
			c.Revision = rev
			rec = c
		}
	}
	if err != nil {
		rec, err = eng.Runs().Change(ctx, engine.Claim, s.wf, claim)
	}
	if err != nil {
		return err
	}
	s.claimed = true
	s.mu.Lock()
	s.rec = rec
	s.mu.Unlock()
	return nil
}

// finishStep is the engine step that ends a workflow's record in each state.
var finishStep = map[jetflow.State]engine.Step{jetflow.Success: engine.Succeed, jetflow.Failed: engine.Fail}

// finish ends the workflow: its record, its cursor, its callback.
func (s *segment) finish(ctx context.Context, st jetflow.State, out json.RawMessage, ferr error) error {
	eng := engine.Of(s.d.p)
	now := time.Now().UTC()
	why := ""
	if ferr != nil {
		why = ferr.Error()
	}
	// A failure's code before the record's end: whoever reads the failed
	// record finds it (Result, Get).
	if err := putEndCode(ctx, s.jr, &jetflow.Run{ID: s.wf, CreationTime: s.created}, ferr); err != nil {
		return err
	}
	// Started at the segment's start if never claimed: it ran in one short
	// segment.
	end := func(r *jetflow.Run) *jetflow.Run { return engine.EndRecord(r, st, out, why, 1, s.started, now) }
	// Over the record as the claim left it when nothing wrote it since
	// (one read less); otherwise read it again.
	var r *jetflow.Run
	err := kv.ErrConflict
	s.wmu.Lock()
	s.ended = true
	s.wmu.Unlock()
	s.mu.Lock()
	last := s.rec
	s.mu.Unlock()
	if last != nil {
		e := end(last)
		var rev uint64
		if rev, err = eng.Runs().Write(ctx, finishStep[st], last.State, e, last.Revision); err == nil {
			e.Revision = rev
			r = e
		}
	}
	if err != nil {
		r, err = eng.Runs().Change(ctx, finishStep[st], s.wf, end)
	}
	if err != nil && !errors.Is(err, kv.ErrTerminal) {
		return err
	}
	// The cursor stays as this segment set it (not waiting): the record's
	// end is what every later segment and wake-up checks first.
	if err := eng.Complete(ctx, r); err != nil {
		return err
	}
	return schedulePurge(ctx, s.d.p, s.def.Name(), r)
}

// park records that the workflow waits, then checks once more whether
// what it waits for came meanwhile (a wake that came before the cursor
// said "waiting" did nothing), and resumes it if so.
func (s *segment) park(ctx context.Context) error {
	if err := s.claim(ctx); errors.Is(err, kv.ErrTerminal) {
		return nil // canceled: nothing to wait for
	} else if err != nil {
		return err
	}
	var waits []string
	for _, w := range s.waits {
		waits = append(waits, w.String())
	}
	first := s.cur.rev == 0 // the workflow parks for the first time
	if first {
		// Before the cursor: a segment that dies between the two arms it
		// again when it is replayed.
		retention := engine.Of(s.d.p).Streams().Retention
		if err := armJanitor(ctx, s.d.p, s.def.Name(), s.wf, time.Now().Add(retention)); err != nil {
			return err
		}
	}
	// The claims and floors known now, for ready: the journal and the
	// execution kept go to the next segment, which may run here as soon as
	// the cursor is written, and claim meanwhile.
	s.mu.Lock()
	claimed := maps.Clone(s.claims)
	floors := make([]uint64, len(s.waits))
	for i, w := range s.waits {
		floors[i] = s.floorLocked(w.kind, w.event)
	}
	s.mu.Unlock()
	s.offerExecution()
	next := s.cur.parked(waits)
	ok, err := s.jr.putCursor(ctx, s.wf, next)
	if err == nil && !ok {
		err = fmt.Errorf("workflow %s: cursor changed under segment %d", s.wf, s.n)
	}
	if err != nil {
		s.parkedAs(nil)
		return err
	}
	s.cur = next
	s.parkedAs(next)
	s.d.keep(s.wf, &stickyJournal{rev: s.cur.rev, steps: s.steps, claims: s.claims})
	for i, w := range s.waits {
		ready, err := s.ready(ctx, w, claimed, floors[i])
		if err != nil {
			return err
		}
		if ready {
			return resume(ctx, s.d.p, s.jr, s.def.Name(), s.wf)
		}
	}
	return nil
}

// offerExecution leaves the segment's execution (a sticky one) in the
// driver's cache before its park writes the cursor: the next segment may
// run here as soon as the cursor is written, and waits for parkedAs before
// it checks the execution (cached).
func (s *segment) offerExecution() {
	x := s.x
	if !x.sticky {
		return
	}
	s.mu.Lock()
	x.wf, x.steps, x.claims, x.visited, x.floors, x.own = s.wf, s.steps, s.claims, s.visited, s.floors, s.own
	s.mu.Unlock()
	x.rev, x.gen, x.seg = 0, 0, 0 // an earlier park's: not to be matched
	x.parked = make(chan struct{})
	s.kept = true
	dropAll(s.d.execs.put(x))
}

// parkedAs completes offerExecution: the park wrote cursor cur, or, nil,
// did not (the execution is not kept).
func (s *segment) parkedAs(cur *cursor) {
	x := s.x
	if x.parked == nil {
		return
	}
	if cur != nil {
		x.rev, x.gen, x.seg = cur.rev, cur.gen(), s.n
	} else {
		s.kept = false
		s.d.execs.remove(x)
	}
	close(x.parked)
}

// ready reports whether what w waits for has come; claimed are the event
// claims the segment knows of, floor the event floor of w's event.
func (s *segment) ready(ctx context.Context, w wait, claimed map[uint64]string, floor uint64) (bool, error) {
	if !w.until.IsZero() && !time.Now().Before(w.until) {
		return true, nil
	}
	if w.run != "" {
		st := engine.Of(s.d.p).Store()
		r, err := st.Show(ctx, w.run)
		if err != nil || !r.State.Terminal() {
			r, _, err = st.Decide(ctx, w.run)
		}
		if err != nil {
			return errors.Is(err, jetflow.ErrNotFound), nil
		}
		return r.State.Terminal(), nil
	}
	if w.event != "" {
		read := s.jr.events
		if w.kind == KindUpdate {
			read = s.jr.updates
		}
		evs, err := read(ctx, s.wf, w.event, floor)
		if err != nil {
			return false, err
		}
		for _, ev := range evs {
			// A claim this segment knows of (it read or wrote it) is for
			// good: one read less per event consumed before.
			if _, ok := claimed[ev.seq]; ok {
				continue
			}
			if _, err := s.jr.kv.Get(ctx, claimKey(s.wf, ev.seq)); err != nil {
				return true, nil
			}
		}
	}
	return false, nil
}

// adopt lists run id among the workflow's children, so that Cancel
// reaches it. A workflow that ended meanwhile (canceled) cancels the run
// and stops the segment.
//
// It writes even when the segment's context has ended: a Cancel that came
// between the start of the run and this write (it ends the context only
// after the workflow's record is canceled) must still reach the run.
func (s *segment) adopt(id string) {
	s.stopReadOnly()
	ctx, cancel := s.detached()
	defer cancel()
	err := s.claim(ctx) // a first segment's record may still be pending
	if err == nil {
		err = s.addChild(ctx, id)
	}
	if errors.Is(err, kv.ErrTerminal) {
		if cerr := s.d.p.Cancel(ctx, id); cerr != nil {
			// The segment's error says so: the run goes on uncanceled.
			s.abort(fmt.Errorf("%w (run %s it started: not canceled: %v)", jetflow.ErrCanceled, id, cerr))
			return
		}
		s.abort(jetflow.ErrCanceled)
	}
	if err != nil {
		s.abort(err)
	}
}

// addChild lists run id among the children of the workflow's record.
func (s *segment) addChild(ctx context.Context, id string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	s.rec = nil // written below: finish reads it again
	s.mu.Unlock()
	_, err := engine.Of(s.d.p).Runs().Change(ctx, engine.Beat, s.wf, func(r *jetflow.Run) *jetflow.Run {
		return engine.AddChild(r, id, time.Now())
	})
	return err
}

// detached is the segment's context without its cancellation (30 s at
// most): for the writes that must complete once begun.
func (s *segment) detached() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(s.ctx), 30*time.Second)
}
