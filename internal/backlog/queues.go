package backlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Pool is the queue of one work pool (package pool).
type Pool struct {
	// Name of the pool.
	Name string `json:"pool"`
	// Queued: items in the pool's queue, waiting for a slot, a rate-limit
	// token, or the end of a retry's backoff or a debounce.
	Queued uint64 `json:"queued"`
	// Running: items holding one of the pool's slots.
	Running int `json:"running"`
}

// Trigger is what waits in one trigger's source (package trigger).
type Trigger struct {
	// Name of the trigger.
	Name string `json:"trigger"`
	// Stream is the source stream, Consumer the trigger's durable on it.
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	// Ready: messages not yet delivered to a runner (num_pending).
	Ready uint64 `json:"ready"`
	// InFlight: messages delivered and not yet turned into runs
	// (num_ack_pending).
	InFlight int `json:"inFlight"`
}

// pools reads every pool's queue length and running slots: a stream info
// listing the pools' state keys (one subject per pool), then per pool an
// ephemeral consumer filtered on its queue keys (the server counts them
// from its subject index; nothing is delivered) and one get of its state.
// No pools bucket: no pools.
func (r *Reader) pools(ctx context.Context) ([]Pool, error) {
	bucket := r.cfg.PoolsBucket()
	name := streams.KVStream(bucket)
	st, err := r.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return []Pool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("backlog: pools: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(streams.KVSubject(bucket, "*.state")))
	if err != nil {
		return nil, fmt.Errorf("backlog: pools: %w", err)
	}
	out := []Pool{}
	var errs []error
	for subj := range info.State.Subjects {
		pool := strings.TrimSuffix(strings.TrimPrefix(subj, streams.KVSubject(bucket, "")), ".state")
		p, err := r.pool(ctx, st, bucket, pool)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

func (r *Reader) pool(ctx context.Context, st jetstream.Stream, bucket, pool string) (Pool, error) {
	p := Pool{Name: pool}
	queued, err := r.count(ctx, streams.KVStream(bucket), []string{streams.KVSubject(bucket, pool+".q.>")})
	if err != nil {
		return p, fmt.Errorf("backlog: pool %s: %w", pool, err)
	}
	p.Queued = queued
	m, err := st.GetLastMsgForSubject(ctx, streams.KVSubject(bucket, pool+".state"))
	if err != nil {
		return p, fmt.Errorf("backlog: pool %s: state: %w", pool, err)
	}
	// The pool's state record (package pool): its running slots.
	var state struct {
		Running map[string]json.RawMessage `json:"running"`
	}
	if len(m.Data) > 0 && json.Unmarshal(m.Data, &state) != nil {
		return p, fmt.Errorf("backlog: pool %s: unreadable state", pool)
	}
	p.Running = len(state.Running)
	return p, nil
}

// triggers reads every trigger's consumer on its source stream (a consumer
// info each, which the consumer's leader answers).
func (r *Reader) triggers(ctx context.Context) ([]Trigger, error) {
	tis, err := kv.ReadTriggers(ctx, r.js, r.cfg)
	if err != nil {
		return nil, fmt.Errorf("backlog: triggers: %w", err)
	}
	out := []Trigger{}
	var errs []error
	for _, ti := range tis {
		if ti.Unreadable != "" {
			continue
		}
		if ti.ConsumerError != "" {
			errs = append(errs, fmt.Errorf("backlog: trigger %s: %s", ti.Name, ti.ConsumerError))
			continue
		}
		out = append(out, Trigger{
			Name: ti.Name, Stream: ti.SourceStream(r.cfg), Consumer: kv.TriggerConsumer(r.cfg, ti.Name),
			Ready: uint64(ti.Waiting), InFlight: ti.InFlight,
		})
	}
	return out, errors.Join(errs...)
}

// count is the number of messages of stream on filters: the num_pending of
// an ephemeral consumer, created, read and deleted.
func (r *Reader) count(ctx context.Context, stream string, filters []string) (uint64, error) {
	c, err := r.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Description:       "jetflow: a count for a backlog read",
		FilterSubjects:    filters,
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: 10 * time.Second,
	})
	if err != nil {
		return 0, err
	}
	n := c.CachedInfo().NumPending
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = r.js.DeleteConsumer(dctx, stream, c.CachedInfo().Name) // else it ends InactiveThreshold later
	return n, nil
}
