package workflow

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
)

// Sticky execution
//
// A segment runs the workflow's code in an execution: the goroutines of
// its branches. Without a cache, a branch that must wait ends
// (runtime.Goexit) and the next segment replays the code from the top.
// With one (RegisterOptions.CachedExecutions, on by default), a branch
// that must wait blocks instead; when every branch blocks or has ended,
// the segment parks the workflow and leaves the execution in the
// worker's cache, keyed by workflow id, with the cursor revision its park
// wrote. The next segment, if it runs on this worker, resumes it when
// mayResume says so: the blocked branches point at the new segment and
// check their waits again (each step that waited runs its check again,
// as a replay reaching it would), and go on or block again. Every other
// case replays from the top, as before; the replay stays the source of
// truth.

// execution is the workflow's code running: the goroutines of its
// branches, across one segment or, resumed, several.
type execution struct {
	mu      sync.Mutex
	settled *sync.Cond // broadcast when running drops to 0
	// running counts the goroutines of the code that run: neither
	// blocked (a wait, a Future.Get) nor ended.
	running int
	// blocked counts the branches blocked at a wait (suspend), until the
	// next release.
	blocked int
	// sticky: a branch that must wait blocks, to be resumed by the next
	// segment; otherwise it ends (runtime.Goexit).
	sticky bool
	// wake is closed to release the blocked branches; next is the segment
	// they go on in, nil when the execution is dropped (they end).
	wake chan struct{}
	next *segment
	// contexts of the branches that have not ended: a resume points them
	// at the new segment.
	contexts []*Context
	main     *branch
	alive    sync.WaitGroup // goroutines of the code that have not ended
	// cur is the segment the code runs in (Context.Context follows it).
	cur atomic.Pointer[segment]
	// parked is closed once the park that offered the execution to the
	// cache has written the cursor (rev, gen and seg set) or failed.
	parked chan struct{}

	// Where it parked (set when cached): the workflow, the cursor's
	// revision and generation the park wrote, the segment that parked,
	// the journal's steps and claims as it left them, and the steps its
	// code reached.
	wf      string
	rev     uint64
	gen     int
	seg     int
	steps   map[string]*Entry
	claims  map[uint64]string
	visited map[string]bool
	floors  map[string]uint64
	own     map[string]uint64
}

func newExecution(sticky bool) *execution {
	x := &execution{sticky: sticky, wake: make(chan struct{})}
	x.settled = sync.NewCond(&x.mu)
	return x
}

// branch is one goroutine of workflow code.
type branch struct {
	x       *execution
	done    chan struct{}
	out     branchOutcome // once done is closed
	ended   bool          // done is closed (under x.mu)
	waiters int           // goroutines blocked in Future.Get on it (under x.mu)
}

// branchOutcome is how a branch ended: returned (with its result and error),
// or not: it suspended, aborted the segment or failed the workflow.
type branchOutcome struct {
	returned bool
	result   json.RawMessage
	err      error
}

// spawn runs body in a goroutine of the execution, the branch of wf. A
// panic fails the workflow.
func (x *execution) spawn(wf *Context, body func() (json.RawMessage, error)) *branch {
	b := &branch{x: x, done: make(chan struct{})}
	wf.b = b
	x.mu.Lock()
	x.running++
	x.contexts = append(x.contexts, wf)
	x.mu.Unlock()
	x.alive.Add(1)
	go func() {
		defer x.alive.Done()
		defer x.exit(b)
		defer func() {
			if b.out.returned {
				return
			}
			if p := recover(); p != nil {
				wf.seg.failWorkflow0(jetflow.Permanent(fmt.Errorf("%w: %v\n%s", jetflow.ErrPanic, p, debug.Stack())))
			}
		}()
		res, err := body()
		b.out = branchOutcome{returned: true, result: res, err: err}
	}()
	return b
}

// exit ends branch b: its waiters run again.
func (x *execution) exit(b *branch) {
	x.mu.Lock()
	defer x.mu.Unlock()
	b.ended = true
	x.running += b.waiters - 1
	b.waiters = 0
	close(b.done)
	if x.running == 0 {
		x.settled.Broadcast()
	}
}

// await blocks the calling goroutine until branch b has ended; it does
// not count as running meanwhile.
func (x *execution) await(b *branch) {
	x.mu.Lock()
	if b.ended {
		x.mu.Unlock()
		return
	}
	b.waiters++
	x.idle()
	x.mu.Unlock()
	<-b.done // exit counted it as running again
}

// idle: one goroutine stops running (x.mu held).
func (x *execution) idle() {
	x.running--
	if x.running == 0 {
		x.settled.Broadcast()
	}
}

// block blocks the calling branch, which must wait, until the execution
// is resumed (true: the branch's Context points at the new segment) or
// dropped (false). A non-sticky execution returns false at once.
func (x *execution) block() bool {
	x.mu.Lock()
	if !x.sticky {
		x.mu.Unlock()
		return false
	}
	wake := x.wake
	x.blocked++
	x.idle()
	x.mu.Unlock()
	<-wake
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.next != nil
}

// followCtx is the context of the segment an execution's code runs in
// (Context.Context).
type followCtx struct{ x *execution }

func (c followCtx) ctx() context.Context                    { return c.x.cur.Load().ctx }
func (c followCtx) Deadline() (deadline time.Time, ok bool) { return c.ctx().Deadline() }
func (c followCtx) Done() <-chan struct{}                   { return c.ctx().Done() }
func (c followCtx) Err() error                              { return c.ctx().Err() }
func (c followCtx) Value(key any) any                       { return c.ctx().Value(key) }

// settle waits until no goroutine of the code runs (each blocked or
// ended) and returns the main branch's outcome: returned or not (ended
// otherwise, or blocked).
func (x *execution) settle() branchOutcome {
	x.mu.Lock()
	defer x.mu.Unlock()
	for x.running > 0 {
		x.settled.Wait()
	}
	if x.main == nil || !x.main.ended {
		return branchOutcome{}
	}
	return x.main.out
}

// release wakes the blocked branches: to go on in segment next, or, nil,
// to end (the execution is dropped) in a dead segment.
func (x *execution) release(next *segment) {
	x.mu.Lock()
	defer x.mu.Unlock()
	live := x.contexts[:0]
	for _, wf := range x.contexts {
		if !wf.b.ended {
			live = append(live, wf)
		}
	}
	clear(x.contexts[len(live):])
	x.contexts = live
	x.next = next
	in := next
	if in == nil && len(x.contexts) > 0 {
		in = x.cur.Load().dead() // started: cur is set
	}
	if in != nil {
		in.x = x
		x.cur.Store(in)
		for _, wf := range x.contexts {
			wf.seg = in
		}
	}
	x.running += x.blocked
	x.blocked = 0
	close(x.wake)
	x.wake = make(chan struct{})
}

// errDropped ends the context of a dropped execution's branches.
var errDropped = errors.New("workflow: execution dropped from the cache")

// dead is the segment a dropped execution's branches end in: its context
// has ended and it is read-only, so that workflow code its branches' deferred
// calls run stops at its first step and writes nothing: the segment
// that ran it has concluded.
func (s *segment) dead() *segment {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errDropped)
	// Only fields that never change: the segment it replaces may still be
	// parking (it writes its cursor).
	return &segment{d: s.d, jr: s.jr, def: s.def, wf: s.wf, n: s.n, ctx: ctx, cur: &cursor{Seg: s.n}, x: s.x,
		steps: map[string]*Entry{}, claims: map[uint64]string{}, readOnly: true}
}

// resume continues the execution in segment s: its blocked branches
// check their waits again in s.
func (x *execution) resume(s *segment) {
	s.mu.Lock()
	s.visited, s.floors, s.own = x.visited, x.floors, x.own
	s.mu.Unlock()
	x.release(s)
}

// drop ends the execution: its blocked branches end (runtime.Goexit, their
// deferred calls run).
func (x *execution) drop() { x.release(nil) }

// suspend ends the calling branch's part in this segment: it waits for w.
// A branch of a sticky execution blocks until the next segment resumes
// it, and returns (the caller checks its step again, in wf.seg, now the
// new segment); otherwise, or when the execution is dropped, the
// goroutine ends with runtime.Goexit (its deferred calls run).
func (wf *Context) suspend(w wait) {
	s := wf.seg
	s.mu.Lock()
	s.waits = append(s.waits, w)
	s.mu.Unlock()
	if !s.x.block() {
		runtime.Goexit()
	}
	if ctx := wf.seg.ctx; ctx.Err() != nil {
		wf.seg.abort(context.Cause(ctx))
	}
}

// untilEnded runs check, a waiting step's check, until the step ends:
// check returns ended false after its branch waited (suspend) and a later
// segment resumed it, which checks again.
func untilEnded[T any](check func() (T, bool, error)) (T, error) {
	for {
		if v, ended, err := check(); ended {
			return v, err
		}
	}
}

// waitParked waits until the park that offered the execution has written
// the cursor or failed (a segment that runs here as soon as the cursor is
// written may find it before); false when that takes over parkWait, or
// ctx ends first.
func (x *execution) waitParked(ctx context.Context) bool {
	t := time.NewTimer(parkWait)
	defer t.Stop()
	select {
	case <-x.parked:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// parkWait bounds waitParked.
const parkWait = 5 * time.Second

// stickyCheck is what a segment knows, when it takes the cursor, of the
// execution this worker cached for its workflow.
type stickyCheck struct {
	cached bool // an execution of the workflow is cached here
	// parkedRev, parkedGen, parkedSeg: the cursor's revision and
	// generation its park wrote, and its segment.
	parkedRev uint64
	parkedGen int
	parkedSeg int
	// rev, gen, seg: the cursor this segment takes over, and its number.
	rev uint64
	gen int
	seg int
}

// stickyVerdict is whether a segment resumes the cached execution, or
// why it replays.
type stickyVerdict int

const (
	// resumeCached: the cursor is where the execution parked it.
	resumeCached stickyVerdict = iota
	// replayNothingCached: none here (another worker ran the segment
	// before, a restart, an eviction, the cache is off).
	replayNothingCached
	// replayCursorMoved: another segment wrote the cursor since (it ran
	// elsewhere, or a redelivery).
	replayCursorMoved
	// replayNotNext: this segment is neither the parked one again (a
	// duplicate: a resume that found the next one ended) nor the next.
	replayNotNext
	// replayOtherRun: the cursor is at another run (continue as new).
	replayOtherRun
)

// mayResume decides whether a segment resumes the execution cached for
// its workflow: only when the cursor it takes over is exactly the one
// that execution's park wrote (no segment ran since, here or elsewhere),
// of the same run, and it is the next segment or the parked one again
// (turnOf let it take that cursor). Anything else replays from the
// journal.
func mayResume(c stickyCheck) stickyVerdict {
	switch {
	case !c.cached:
		return replayNothingCached
	case c.rev != c.parkedRev:
		return replayCursorMoved
	case c.gen != c.parkedGen:
		return replayOtherRun
	case c.seg != c.parkedSeg+1 && c.seg != c.parkedSeg:
		return replayNotNext
	}
	return resumeCached
}

// DefaultCachedExecutions is RegisterOptions.CachedExecutions's default.
const DefaultCachedExecutions = 2048

// execCache holds the executions of workflows parked on this worker, the
// least recently parked evicted first.
type execCache struct {
	mu     sync.Mutex
	size   int // 0: off
	order  *list.List
	byWF   map[string]*list.Element
	closed bool // the worker stopped: nothing is kept
}

func newExecCache(size int) *execCache {
	return &execCache{size: max(size, 0), order: list.New(), byWF: map[string]*list.Element{}}
}

// on reports whether executions are kept.
func (c *execCache) on() bool { return c.size > 0 }

// put keeps x (parking), in place of one of the same workflow; it returns
// the executions to drop (evicted, replaced, or x when nothing is kept).
func (c *execCache) put(x *execution) []*execution {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.on() {
		return []*execution{x}
	}
	var out []*execution
	if el, ok := c.byWF[x.wf]; ok {
		old := el.Value.(*execution)
		c.order.Remove(el)
		delete(c.byWF, x.wf)
		out = append(out, old)
	}
	for c.order.Len() >= c.size {
		el := c.order.Back()
		old := el.Value.(*execution)
		c.order.Remove(el)
		delete(c.byWF, old.wf)
		out = append(out, old)
	}
	c.byWF[x.wf] = c.order.PushFront(x)
	return out
}

// take returns and forgets the execution kept for workflow wf, or nil.
func (c *execCache) take(wf string) *execution {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byWF[wf]
	if !ok {
		return nil
	}
	c.order.Remove(el)
	delete(c.byWF, wf)
	return el.Value.(*execution)
}

// remove forgets x if it is kept.
func (c *execCache) remove(x *execution) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byWF[x.wf]; ok && el.Value == x {
		c.order.Remove(el)
		delete(c.byWF, x.wf)
	}
}

// close forgets every execution and keeps none from now on; it returns
// them, to drop.
func (c *execCache) close() []*execution {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var out []*execution
	for el := c.order.Front(); el != nil; el = el.Next() {
		out = append(out, el.Value.(*execution))
	}
	c.order.Init()
	clear(c.byWF)
	return out
}

// len is the number of executions kept.
func (c *execCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// dropAll drops executions xs.
func dropAll(xs []*execution) {
	for _, x := range xs {
		x.drop()
	}
}
