package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
)

// Errors of Query and Update.
var (
	// ErrNoQueryHandler: no worker of the workflow's definition runs, or
	// its code, as far as it has run, registered no query of that name.
	ErrNoQueryHandler = wfwire.ErrNoQueryHandler
	// ErrUpdateRejected: the workflow's validator refused the update.
	ErrUpdateRejected = wfwire.ErrUpdateRejected
	// ErrUpdateTimeout: the update was not answered before the caller's
	// ctx ended; it stays stored and may still be handled.
	ErrUpdateTimeout = wfwire.ErrUpdateTimeout
)

// SetQueryHandler registers query name of this workflow: fn answers it
// from the state the workflow's code has reached. A query replays the
// code read-only from the journal (no step runs, nothing is written: the
// replay stops at the first step that has not ended), then calls fn, so
// fn must only read (the variables its closure sees). Register it before
// the workflow's first wait, in the main branch.
func SetQueryHandler[T any](wf *Context, name string, fn func() (T, error)) {
	s := wf.seg
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queries == nil {
		s.queries = map[string]func() (json.RawMessage, error){}
	}
	s.queries[name] = func() (json.RawMessage, error) {
		v, err := fn()
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	}
}

// Query asks workflow id for query name (SetQueryHandler) and decodes the
// answer into T. A worker that registered the workflow's definition
// answers it by replaying the workflow's code read-only from its journal,
// so it works while the workflow waits (sleeps, awaits an event) and
// after it ended. Errors: jetflow.ErrNotFound, producer.ErrNotWorkflow,
// ErrNoQueryHandler (no worker of the definition runs, or no handler of
// that name), the handler's error (its code kept as for Result), ctx's.
func Query[T any](ctx context.Context, p *producer.Producer, id, name string) (T, error) {
	var out T
	r, err := p.Get(ctx, id)
	if err != nil {
		return out, err
	}
	if !wfwire.IsWorkflow(r) {
		return out, fmt.Errorf("run %s (%s): %w", id, r.Name, producer.ErrNotWorkflow)
	}
	eng := engine.Of(p)
	a, err := wfwire.Query(ctx, eng.Conn(), eng.Streams().WithDefaults().Prefix, r.Name, id, name)
	if err != nil {
		return out, err
	}
	if err := a.Err(errorOfCode); err != nil {
		return out, err
	}
	if err := json.Unmarshal(a.Result, &out); err != nil {
		return out, fmt.Errorf("%w: workflow %s: query %s: %v", jetflow.ErrBadArgs, id, name, err)
	}
	return out, nil
}

// serveQueries answers the queries of d's workflows on worker w's
// connection until the worker stops.
func (d *driver) serveQueries(w *worker.Worker) error {
	eng := engine.Of(d.p)
	subject := wfwire.QuerySubject(eng.Streams().WithDefaults().Prefix, d.def.Name())
	sub, err := eng.Conn().QueueSubscribe(subject, subject, func(m *nats.Msg) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var req wfwire.QueryRequest
			a := &wfwire.Answer{}
			if err := json.Unmarshal(m.Data, &req); err != nil {
				a.Error = fmt.Sprintf("%v: query %q", jetflow.ErrBadArgs, m.Data)
			} else {
				a = d.answerQuery(ctx, req)
			}
			b, _ := json.Marshal(a)
			_ = m.Respond(b) // the caller's request times out otherwise
		}()
	})
	if err != nil {
		return fmt.Errorf("workflow %s: serve queries: %w", d.def.Name(), err)
	}
	go func() {
		<-w.Stopped()
		_ = sub.Unsubscribe()
	}()
	return nil
}

// answerQuery replays workflow req.WF read-only and calls its query
// handler req.Name.
func (d *driver) answerQuery(ctx context.Context, req wfwire.QueryRequest) *wfwire.Answer {
	s, err := d.replayReadOnly(ctx, req.WF)
	if err != nil {
		return &wfwire.Answer{Error: err.Error(), Code: codeOf(err)}
	}
	s.mu.Lock()
	h := s.queries[req.Name]
	s.mu.Unlock()
	if h == nil {
		return &wfwire.Answer{Error: fmt.Sprintf("%v: workflow %s has no query %q", ErrNoQueryHandler, req.WF, req.Name), Code: wfwire.CodeNoHandler}
	}
	out, err := h()
	if err != nil {
		return &wfwire.Answer{Error: err.Error(), Code: codeOf(err)}
	}
	return &wfwire.Answer{Result: out}
}

// replayReadOnly replays workflow wf's code from its journal without
// running or writing anything: each branch stops at its first step that
// has not ended.
func (d *driver) replayReadOnly(ctx context.Context, wf string) (*segment, error) {
	rec, err := d.record(ctx, wf)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("workflow %s: %w", wf, jetflow.ErrNotFound)
	}
	jr, err := d.journal(ctx)
	if err != nil {
		return nil, err
	}
	snap, err := jr.load(ctx, wf)
	if err != nil {
		return nil, err
	}
	cur := snap.cur
	if cur == nil {
		cur = &cursor{Seg: 1}
	}
	s := &segment{d: d, jr: jr, def: d.def, wf: wf, n: cur.Seg, ctx: ctx, cur: cur, rec: rec,
		steps: generation(snap.steps, cur.gen()), claims: snap.claims, readOnly: true}
	s.x = newExecution(false)
	s.start(rec)
	s.x.settle()
	return s, nil
}

// root is the Context of the main branch of the segment's run.
func (s *segment) root() *Context { return &Context{seg: s, path: genPath(s.cur.gen())} }

// input is the input of the segment's run: the record's, or the one
// ContinueAsNew gave it.
func (s *segment) input(rec *jetflow.Run) json.RawMessage {
	if s.cur.gen() > 1 {
		return s.cur.Input
	}
	return rec.Args
}

// stopReadOnly stops the calling branch of a query's replay (which runs
// nothing and writes nothing) at a step that has not ended.
func (s *segment) stopReadOnly() {
	if s.readOnly {
		runtime.Goexit()
	}
}
