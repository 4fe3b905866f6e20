package trigger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// loop runs one trigger in one runner: it fetches the trigger's messages
// while the function's queue is below the window, turns each into a run
// and acks it once the run is accepted.
type loop struct {
	r      *Runner
	name   string
	decide decideFunc
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	d    kv.TriggerDef
	wake chan struct{} // closed and replaced when the definition changes

	// epoch is the creation time of the trigger's stream (run ids).
	epoch int64

	messages, runs, existing, skipped, failed atomic.Int64
	// held: waiting for room in the window; paused: waiting for a resume
	// (set once the loop has stopped fetching).
	held, paused atomic.Bool
}

func newLoop(r *Runner, def kv.TriggerDef, decide decideFunc) *loop {
	return &loop{r: r, name: def.Name, d: def, decide: decide, done: make(chan struct{}), wake: make(chan struct{})}
}

func (l *loop) def() kv.TriggerDef {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.d
}

// setDef takes a new definition of the same source (a pause or a resume).
func (l *loop) setDef(d kv.TriggerDef) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d = d
	close(l.wake)
	l.wake = make(chan struct{})
}

func (l *loop) changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wake
}

// Stats are the loop's counters.
func (l *loop) Stats() kv.TriggerStats {
	return kv.TriggerStats{
		Trigger: l.name, Runner: l.r.cfg.ID, Messages: l.messages.Load(), Runs: l.runs.Load(),
		Existing: l.existing.Load(), Skipped: l.skipped.Load(), Failed: l.failed.Load(),
		Held: l.held.Load(), Paused: l.paused.Load(), Seen: time.Now().UTC(),
	}
}

func (l *loop) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	l.cancel = cancel
	go func() {
		defer close(l.done)
		l.run(ctx)
	}()
}

func (l *loop) stop() {
	l.cancel()
	<-l.done
}

// pause waits for d, a change of the definition or the end of ctx.
func (l *loop) pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-l.changed():
	case <-t.C:
	}
}

func (l *loop) run(ctx context.Context) {
	log := l.r.log.With("trigger", l.name)
	var cons jetstream.Consumer
	backoff := 100 * time.Millisecond
	hold := heldPoll
	for ctx.Err() == nil {
		def := l.def()
		if cons == nil {
			var err error
			cons, l.epoch, err = ensureSource(ctx, l.r.js, l.r.scfg, def, l.r.cfg.AckWait)
			if err != nil {
				log.Warn("trigger consumer unavailable; trying again", "error", err)
				l.pause(ctx, backoff)
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
		}
		l.paused.Store(def.Paused)
		if def.Paused {
			l.held.Store(false)
			l.pause(ctx, time.Minute)
			continue
		}
		if !l.same(ctx, cons) {
			// The consumer was made again (its stream deleted and
			// created again, or the trigger deleted and added): the
			// stream's epoch may have changed with it.
			log.Info("trigger consumer made again; reading its stream again")
			cons = nil
			continue
		}
		room, err := l.room(ctx, def)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("trigger: function queue not read; trying again", "function", def.Function, "error", err)
			}
			l.pause(ctx, backoff)
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		if room <= 0 {
			// The function's queue is at the window: look again soon
			// (one consumer info request), less often the longer it
			// stays full.
			l.held.Store(true)
			l.pause(ctx, hold)
			hold = min(2*hold, maxHeldPoll)
			continue
		}
		hold = heldPoll
		l.held.Store(false)
		backoff = 100 * time.Millisecond
		msgs, err := l.fetch(cons, min(room, l.r.cfg.Batch))
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("trigger fetch failed; trying again", "error", err)
				if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
					errors.Is(err, jetstream.ErrConsumerDeleted) {
					cons = nil
				}
				l.pause(ctx, time.Second)
			}
			continue
		}
		if len(msgs) > 0 {
			// Messages fetched are handled to the end, even when the
			// runner stops meanwhile: their runs accepted, then acked.
			l.handle(context.WithoutCancel(ctx), def, msgs)
		}
	}
}

// A trigger held at its window reads the function's queue again after
// heldPoll, doubling up to maxHeldPoll while it stays full.
const (
	heldPoll    = 10 * time.Millisecond
	maxHeldPoll = 160 * time.Millisecond
)

// fetch takes up to n messages: those delivered at once, or, when there
// are none, the next one within a second (a fetch of n waits until it has
// n, which would hold the last messages of a burst back).
func (l *loop) fetch(cons jetstream.Consumer, n int) ([]jetstream.Msg, error) {
	batch, err := cons.FetchNoWait(n)
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) > 0 {
		return msgs, nil
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
		return nil, err
	}
	batch, err = cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		return nil, err
	}
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if err := batch.Error(); len(msgs) == 0 && fetchFailed(err) {
		return nil, err
	}
	return msgs, nil
}

// fetchFailed reports whether err, a fetch's, is a failure: no message
// within the wait is not one.
func fetchFailed(err error) bool {
	return err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout)
}

// same reports whether cons is still the consumer the loop made (or found)
// when it read the stream's epoch: one consumer info request. An error
// other than the consumer's absence counts as the same (the fetch reports
// it).
func (l *loop) same(ctx context.Context, cons jetstream.Consumer) bool {
	created := cons.CachedInfo().Created
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ci, err := cons.Info(ictx)
	if err != nil {
		return !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound)
	}
	return ci.Created.Equal(created)
}

// room is how many more runs the function's queue takes before the window
// is full.
func (l *loop) room(ctx context.Context, def kv.TriggerDef) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := queued(qctx, l.r.js, l.r.scfg, def.Function)
	if err != nil {
		return 0, err
	}
	return def.Window - n, nil
}

// verdict is what becomes of one message.
type verdict uint8

const (
	vRun     verdict = iota + 1 // schedule call as run id
	vSkip                       // the filter refused it: ack
	vFail                       // record a failed run id with reason: ack
	vExisted                    // its run exists: ack
	vRetry                      // a transient error: nak, delivered again later
)

type item struct {
	m      jetstream.Msg
	id     string
	call   jetflow.Call
	v      verdict
	reason error
}

// decideMsg turns message m into a verdict, with no side effect.
func (l *loop) decideMsg(def kv.TriggerDef, m jetstream.Msg) (it item) {
	it.m = m
	md, err := m.Metadata()
	if err != nil {
		// Not a JetStream message: cannot be acked either.
		it.v, it.reason = vRetry, err
		return it
	}
	id, idErr := runID(def, l.epoch, m, md)
	if idErr != nil {
		// The failed record takes the stream-derived id: a redelivery
		// finds it.
		it.id, it.v, it.reason = StreamRunID(def.Name, md.Stream, l.epoch, md.Sequence.Stream), vFail, idErr
		return it
	}
	it.id = id
	defer func() {
		if p := recover(); p != nil {
			it.v, it.reason = vFail, fmt.Errorf("%w: %w: %v", ErrMapping, jetflow.ErrPanic, p)
		}
	}()
	c, skip, err := l.decide(m)
	switch {
	case skip:
		it.v = vSkip
	case err != nil:
		it.v, it.reason = vFail, err
	default:
		it.v, it.call = vRun, c
	}
	return it
}

// handle turns msgs into runs: the runs first (one atomic batch of
// records when it can), then the acks.
func (l *loop) handle(ctx context.Context, def kv.TriggerDef, msgs []jetstream.Msg) {
	items := make([]item, len(msgs))
	var batch []producer.Item
	var batchIdx []int
	for i, m := range msgs {
		items[i] = l.decideMsg(def, m)
		if items[i].v == vRun {
			batch = append(batch, producer.Item{Call: items[i].call, Options: []producer.Option{producer.WithID(items[i].id)}})
			batchIdx = append(batchIdx, i)
		}
	}
	if len(batch) > 1 {
		bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := l.r.p.Batch(bctx, batch)
		cancel()
		if err == nil {
			for _, i := range batchIdx {
				l.runs.Add(1)
				l.settle(ctx, &items[i], true)
			}
		}
		// Else: one at a time below (a run that exists, args too
		// large, a transient error: each message its own outcome).
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range items {
		if items[i].m == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(it *item) {
			defer func() { <-sem; wg.Done() }()
			l.one(ctx, it)
		}(&items[i])
	}
	wg.Wait()
}

// one schedules (or records) one message's run and settles the message.
func (l *loop) one(ctx context.Context, it *item) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if it.v == vRun {
		_, err := l.r.p.Enqueue(ctx, it.call, producer.WithID(it.id))
		switch {
		case err == nil:
			l.runs.Add(1)
		case errors.Is(err, producer.ErrAlreadyExists):
			it.v = vExisted
		case badInput(err):
			it.v, it.reason = vFail, err
		default:
			it.v, it.reason = vRetry, err
		}
	}
	if it.v == vFail {
		existed, err := l.failRun(ctx, it)
		switch {
		case err != nil:
			it.v, it.reason = vRetry, err
		case existed:
			it.v = vExisted
		}
	}
	l.settle(ctx, it, false)
}

// badInput reports whether err is the message's fault: a second try would
// fail the same way.
func badInput(err error) bool {
	switch {
	case errors.Is(err, jetflow.ErrBadArgs), errors.Is(err, jetflow.ErrInvalidName),
		errors.Is(err, jetflow.ErrInvalidRunID), errors.Is(err, producer.ErrArgsTooLarge):
		return true
	}
	return false
}

// settle acks or naks the message of it after its run's outcome, counting
// it; it marks the item done (m nil).
func (l *loop) settle(ctx context.Context, it *item, ran bool) {
	m := it.m
	it.m = nil
	log := l.r.log.With("trigger", l.name, "run_id", it.id)
	if ran {
		it.v = vRun
	}
	switch it.v {
	case vRetry:
		log.Warn("trigger message not scheduled; delivered again later", "error", it.reason)
		if err := m.NakWithDelay(time.Second); err != nil {
			log.Debug("nak failed", "error", err)
		}
		return
	case vSkip:
		l.skipped.Add(1)
	case vExisted:
		l.existing.Add(1)
	case vFail:
		l.failed.Add(1)
	}
	l.messages.Add(1)
	if err := m.Ack(); err != nil {
		// Delivered again after AckWait: its run id finds the run.
		log.Debug("trigger ack failed", "error", err)
	}
}
