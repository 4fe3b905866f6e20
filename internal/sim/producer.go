package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
)

// producer enqueues runs (generated or caller ids), retrying on timeouts,
// and now and then cancels one.
type producer struct {
	w    *World
	name string
	n    int
	cur  *enqueue // the Enqueue call under way
}

type enqueue struct {
	rec      record
	tries    int
	rev      uint64
	accepted bool
}

const maxTries = 6

func (p *producer) act(start bool) {
	switch {
	case p.cur != nil && !p.cur.accepted:
		p.create()
	case p.cur != nil:
		p.publish()
	case p.w.rng.IntN(10) == 0:
		p.cancel()
	case start:
		p.n++
		id := fmt.Sprintf("%s-%d", p.name, p.n) // a generated id
		if p.w.rng.IntN(4) == 0 {
			id = fmt.Sprintf("c%d", p.w.rng.IntN(40)) // a caller's id
		}
		p.cur = &enqueue{rec: record{ID: id, State: jetflow.Pending, AMO: p.w.rng.IntN(3) == 0, Token: p.w.token()}}
	}
}

// create makes one round of the record's create: kv.CreateConfirmed (or,
// with RefusedIsLanded, the old rule).
func (p *producer) create() {
	e := p.cur
	e.tries++
	var err error
	if p.w.cfg.Bugs.RefusedIsLanded {
		err = p.createUnconfirmed(e)
	} else {
		err = p.createConfirmed(e)
	}
	switch {
	case err == nil:
		p.w.tracef("%s: Enqueue(%s) = stored (rev %d)", p.name, e.rec.ID, e.rev)
		e.accepted = true
		p.w.check.accept(e.rec.ID)
	case errors.Is(err, kv.ErrExists):
		p.w.tracef("%s: Enqueue(%s) = already exists", p.name, e.rec.ID)
		p.w.check.accept(e.rec.ID)
		p.cur = nil
	case e.tries >= maxTries:
		p.w.tracef("%s: Enqueue(%s) gives up: %v", p.name, e.rec.ID, err)
		p.cur = nil
	default:
		p.w.tracef("%s: Enqueue(%s) try %d: %v", p.name, e.rec.ID, e.tries, err)
	}
}

// createConfirmed is one call of kv.CreateConfirmed over the model. Its
// wait between rounds is a real timer: the round's context ends after the
// first inconclusive leader read, so the call returns ErrUnconfirmed (or
// the context's error) instead of waiting, and the producer tries again
// at a later step, in virtual time.
func (p *producer) createConfirmed(e *enqueue) error {
	ctx := newRoundCtx()
	create := func(ctx context.Context) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rev, err := p.w.bucket.write(op{rec: e.rec, step: engine.Schedule, from: engine.None})
		e.rev = rev
		return err
	}
	find := func(context.Context) (kv.Found, error) {
		v, ok, err := p.w.bucket.leaderGet(e.rec.ID)
		switch {
		case err != nil:
			ctx.end()
			return kv.Missing, err
		case !ok:
			ctx.end()
			return kv.Missing, nil
		case v.rec.Token == e.rec.Token:
			e.rev = v.rev
			return kv.Ours, nil
		}
		return kv.Theirs, nil
	}
	return kv.CreateConfirmed(ctx, create, find)
}

// createUnconfirmed is the rule before issue 26: a refused retry means an
// earlier try landed; a refused first try, that the id is taken.
func (p *producer) createUnconfirmed(e *enqueue) error {
	rev, err := p.w.bucket.write(op{rec: e.rec, step: engine.Schedule, from: engine.None})
	e.rev = rev
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kv.ErrExists) || errors.Is(err, kv.ErrRefused):
		if e.tries > 1 {
			return nil
		}
		return kv.ErrExists
	}
	return err
}

// publish sends the run's first message once; one that is lost is left to
// the repair sweep (the record is the run).
func (p *producer) publish() {
	e := p.cur
	p.cur = nil
	err := p.w.stream.publish(e.rec.ID, 1, e.rev, e.rec.AMO, 0)
	p.w.tracef("%s: publish %s: %v", p.name, e.rec.ID, err)
}

// cancel cancels an accepted run that has not ended, by compare-and-swap.
func (p *producer) cancel() {
	ids := sortedKeys(p.w.check.accepted)
	if len(ids) == 0 {
		return
	}
	id := ids[p.w.rng.IntN(len(ids))]
	v, ok, err := p.w.bucket.leaderGet(id)
	if err != nil || !ok || v.rec.State.Terminal() {
		return
	}
	r := v.rec
	r.State, r.Token = jetflow.Canceled, p.w.token()
	_, err = p.w.bucket.write(op{rec: r, step: engine.Cancel, from: v.rec.State, expect: v.rev})
	p.w.tracef("%s: cancel %s (%s at rev %d): %v", p.name, id, v.rec.State, v.rev, err)
}

// roundCtx is a context that ends when end is called: one round of
// CreateConfirmed per step.
type roundCtx struct {
	context.Context
	done chan struct{}
}

func newRoundCtx() *roundCtx {
	return &roundCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *roundCtx) end() {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
}

func (c *roundCtx) Done() <-chan struct{} { return c.done }

func (c *roundCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (c *roundCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
