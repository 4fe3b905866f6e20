// Package backlog reads how much work waits for jetflow's workers: per
// function, the runs ready (published, not yet delivered), in flight
// (delivered, not acknowledged), the age of the oldest ready run and the
// runs that ended failed; for the whole deployment, the runs the delayed
// store holds due within the next minute and ten minutes. It is what the
// backlog gauges (internal/telemetry), the scaling endpoint and
// `jetflow functions stats` report.
//
// Every figure comes from the server at a cost per read that does not grow
// with the runs kept:
//   - ready and in flight are the function consumer's num_pending and
//     num_ack_pending, from a consumer info request, which the consumer's
//     leader answers (a follower's figure can lag);
//   - the oldest ready run is one message get: the first message of the
//     function's subjects after the consumer's delivered sequence;
//   - due counts come from the delayed bucket's keys, <due unix
//     second>.<run id>: an ephemeral consumer filtered on the seconds of the
//     window, whose num_pending the server computes from its subject index
//     (cost in proportion to the seconds and the entries in the window, not
//     to the entries due later);
//   - failed runs are the run index's checkpoint (one direct get), absent
//     when no indexer runs;
//   - a work pool's queue is counted as the due runs are (an ephemeral
//     consumer on its queue keys: the server counts them from its subject
//     index), its running items are its state record's slots (one get);
//   - a trigger's ready and in-flight messages are its durable consumer's
//     on the source stream (a consumer info, from the consumer's leader).
//
// One read costs a stream info, a consumer list, one consumer info and at
// most one message get per function, two consumer creates and deletes, one
// direct get, a watch of the trigger definitions and a consumer info per
// trigger, and a stream info plus a consumer create, delete and a get per
// pool.
package backlog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Function is the backlog of one function.
type Function struct {
	// Name of the function.
	Name string `json:"function"`
	// Consumer is the durable consumer its workers share.
	Consumer string `json:"consumer"`
	// Ready: runs published and not yet delivered to a worker.
	Ready uint64 `json:"ready"`
	// InFlight: runs delivered and not yet acknowledged (running, waiting
	// in a worker's buffer, or waiting for a redelivery after a retry).
	InFlight int `json:"inFlight"`
	// Redelivered: of InFlight, the runs delivered more than once.
	Redelivered int `json:"redelivered"`
	// OldestReadyAge is how long the oldest ready run has waited since it
	// was published (0 when none is ready), in seconds.
	OldestReadyAge float64 `json:"oldestReadyAgeSeconds"`
	// Failed: runs that ended failed (retries exhausted, a permanent
	// error, a bad message dead-lettered) and are kept for the retention
	// period, from the run index; -1 when no run index answers.
	Failed int64 `json:"failed"`
	// Waiting is workers' load: Ready plus InFlight.
	Waiting uint64 `json:"waiting"`
	// DesiredWorkers is Waiting over the target per worker, rounded up:
	// what a KEDA metrics-api ScaledObject with target 1 scales to.
	DesiredWorkers int `json:"desiredWorkers"`
}

// queuesTimeout bounds the read of the pools' and the triggers' queues.
const queuesTimeout = 3 * time.Second

// Figures are one read of the backlog.
type Figures struct {
	// At is when they were read (this host's clock).
	At time.Time `json:"at"`
	// Functions, by name.
	Functions []Function `json:"functions"`
	// Due1m and Due10m: runs in the delayed store due at most 1 and 10
	// minutes from now, runs up to a minute overdue (not yet published by
	// the scheduler) included. The store's keys name no function, so these
	// are for every function.
	Due1m  uint64 `json:"due1m"`
	Due10m uint64 `json:"due10m"`
	// Unserved: runs in the function stream that no function's consumer
	// accounts for: runs of functions no worker has served yet. (Read apart
	// from the consumers, so it is approximate while runs flow.)
	Unserved uint64 `json:"unserved"`
	// Ready, InFlight, Waiting sum the functions'.
	Ready    uint64 `json:"ready"`
	InFlight int    `json:"inFlight"`
	Waiting  uint64 `json:"waiting"`
	// Target is the runs one worker takes (the target per worker the
	// desired counts divide by).
	Target int `json:"targetPerWorker"`
	// DesiredWorkers is (Waiting + Due1m) over Target, rounded up: zero
	// only when nothing is ready, in flight or due within a minute.
	DesiredWorkers int `json:"desiredWorkers"`
	// FailedSource says where Failed comes from: "index", or "none" when
	// no run index answers.
	FailedSource string `json:"failedSource"`
	// Pools: each work pool's queue and running items, by name.
	Pools []Pool `json:"pools"`
	// Triggers: what waits in each trigger's source, by name.
	Triggers []Trigger `json:"triggers"`
	// QueuesError says what of Pools and Triggers could not be read (those
	// are left out); it is not Read's error.
	QueuesError string `json:"queuesError,omitempty"`
}

// Function returns the figures of function name, or false.
func (f *Figures) Function(name string) (Function, bool) {
	for _, fn := range f.Functions {
		if fn.Name == name {
			return fn, true
		}
	}
	return Function{}, false
}

// WithTarget returns f with its desired worker counts for target runs per
// worker (at least 1).
func (f Figures) WithTarget(target int) Figures {
	target = max(target, 1)
	f.Target = target
	fns := make([]Function, len(f.Functions))
	for i, fn := range f.Functions {
		fn.DesiredWorkers = desired(fn.Waiting, target)
		fns[i] = fn
	}
	f.Functions = fns
	f.DesiredWorkers = desired(f.Waiting+f.Due1m, target)
	return f
}

func desired(n uint64, target int) int {
	return int(math.Ceil(float64(n) / float64(target)))
}

// Reader reads the backlog of one deployment (one prefix).
type Reader struct {
	js  jetstream.JetStream
	cfg streams.Config
	// Now is the clock of ages and due windows. Default time.Now.
	Now func() time.Time
	// MaxAge: Cached returns a read at most this old. Default 5 s.
	MaxAge time.Duration

	mu   sync.Mutex
	last *Figures
	at   time.Time
	err  error
}

// New returns a reader of the backlog of the deployment cfg names.
func New(js jetstream.JetStream, cfg streams.Config) *Reader {
	return &Reader{js: js, cfg: cfg.WithDefaults(), Now: time.Now, MaxAge: 5 * time.Second}
}

// Cached is Read at most once per MaxAge: gauges and the scaling endpoint
// share its reads, so that several scrapes cost one read.
func (r *Reader) Cached(ctx context.Context) (*Figures, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last != nil && time.Since(r.at) < r.MaxAge {
		return r.last, r.err
	}
	f, err := r.Read(ctx)
	if err != nil && f == nil {
		return nil, err
	}
	r.last, r.at, r.err = f, time.Now(), err
	return f, err
}

// Read reads the figures now. A function whose figures could not be read
// is left out and named in the error, returned with the rest.
func (r *Reader) Read(ctx context.Context) (*Figures, error) {
	now := r.Now()
	stream, err := r.js.Stream(ctx, r.cfg.FunctionStream())
	if err != nil {
		return nil, fmt.Errorf("backlog: %s: %w", r.cfg.FunctionStream(), err)
	}
	f := &Figures{At: now, Functions: []Function{}, FailedSource: "index"}
	cp, cpErr := runindex.ReadCheckpoint(ctx, r.js, r.cfg)
	if cpErr != nil {
		f.FailedSource = "none"
	}
	var errs []error
	names := stream.ConsumerNames(ctx)
	for name := range names.Name() {
		fn, ok, err := r.function(ctx, stream, name, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		fn.Failed = -1
		if cp != nil {
			fn.Failed = cp.Sum(fn.Name, now).Failed
		}
		f.Functions = append(f.Functions, fn)
		f.Ready += fn.Ready
		f.InFlight += fn.InFlight
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("backlog: consumers: %w", err)
	}
	sort.Slice(f.Functions, func(i, j int) bool { return f.Functions[i].Name < f.Functions[j].Name })
	f.Waiting = f.Ready + uint64(f.InFlight)
	if info, err := stream.Info(ctx); err == nil {
		f.Unserved = unserved(info.State.Msgs, f.Waiting)
	} else {
		errs = append(errs, fmt.Errorf("backlog: %s: %w", r.cfg.FunctionStream(), err))
	}
	sec := now.Unix()
	if f.Due1m, err = r.DueBetween(ctx, sec-60, sec+60); err != nil {
		errs = append(errs, err)
	}
	if f.Due10m, err = r.DueBetween(ctx, sec-60, sec+600); err != nil {
		errs = append(errs, err)
	}
	// Pools and triggers are reported apart from the functions' figures:
	// a pool or a trigger's source this user may not read (a trigger on a
	// user's stream) must not make the scaling endpoint answer 503.
	// A request the user may not make goes unanswered: each read has
	// queuesTimeout, not the caller's whole ctx.
	var qerrs []error
	qctx, cancel := context.WithTimeout(ctx, queuesTimeout)
	defer cancel()
	if f.Pools, err = r.pools(qctx); err != nil {
		qerrs = append(qerrs, err)
	}
	qctx, cancel = context.WithTimeout(ctx, queuesTimeout)
	defer cancel()
	if f.Triggers, err = r.triggers(qctx); err != nil {
		qerrs = append(qerrs, err)
	}
	if err := errors.Join(qerrs...); err != nil {
		f.QueuesError = err.Error()
	}
	g := f.WithTarget(1)
	return &g, errors.Join(errs...)
}

// function reads the figures of the function whose consumer is name; ok is
// false for a consumer that is not a function's.
func (r *Reader) function(ctx context.Context, stream jetstream.Stream, name string, now time.Time) (Function, bool, error) {
	c, err := stream.Consumer(ctx, name) // a consumer info: the leader answers
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return Function{}, false, nil // deleted meanwhile
	}
	if err != nil {
		return Function{}, false, fmt.Errorf("backlog: consumer %s: %w", name, err)
	}
	info := c.CachedInfo()
	fnName, ok := r.functionOf(info.Config)
	if !ok {
		return Function{}, false, nil
	}
	fn := Function{
		Name: fnName, Consumer: name, Ready: info.NumPending, InFlight: info.NumAckPending,
		Redelivered: info.NumRedelivered,
	}
	fn.Waiting = fn.Ready + uint64(fn.InFlight)
	if fn.Ready > 0 {
		m, err := stream.GetMsg(ctx, info.Delivered.Stream+1, jetstream.WithGetMsgSubject(info.Config.FilterSubject))
		switch {
		case err == nil:
			fn.OldestReadyAge = max(now.Sub(m.Time), 0).Seconds()
		case errors.Is(err, jetstream.ErrMsgNotFound):
			// taken meanwhile
		default:
			return Function{}, false, fmt.Errorf("backlog: oldest run of %s: %w", fnName, err)
		}
	}
	return fn, true, nil
}

// functionOf names the function of a consumer filtered on
// <prefix>.fn.<function>.*.
func (r *Reader) functionOf(cc jetstream.ConsumerConfig) (string, bool) {
	f := cc.FilterSubject
	if f == "" || len(cc.FilterSubjects) > 0 {
		return "", false
	}
	pfx := r.cfg.FunctionFilter("")
	pfx = pfx[:len(pfx)-len(".*")] // <prefix>.fn.
	if len(f) <= len(pfx)+len(".*") || f[:len(pfx)] != pfx || f[len(f)-2:] != ".*" {
		return "", false
	}
	name := f[len(pfx) : len(f)-2]
	return name, r.cfg.FunctionFilter(name) == f
}

// DueBetween counts the delayed store's entries due in the seconds from
// through to (Unix seconds, both included): one ephemeral consumer filtered
// on each second's keys, created, read and deleted.
func (r *Reader) DueBetween(ctx context.Context, from, to int64) (uint64, error) {
	if to < from {
		return 0, nil
	}
	bucket := r.cfg.DelayedBucket()
	filters := make([]string, 0, to-from+1)
	for s := from; s <= to; s++ {
		filters = append(filters, streams.KVSubject(bucket, strconv.FormatInt(s, 10)+".*"))
	}
	n, err := r.count(ctx, streams.KVStream(bucket), filters)
	if err != nil {
		return 0, fmt.Errorf("backlog: delayed runs due: %w", err)
	}
	return n, nil
}

// unserved is what the function stream holds beyond what its consumers
// account for: runs of functions no worker has served yet (no consumer), a
// work-queue stream keeping each message until it is acknowledged.
func unserved(stored, waiting uint64) uint64 {
	if stored > waiting {
		return stored - waiting
	}
	return 0
}
