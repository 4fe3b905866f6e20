package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/payload"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go/jetstream"
)

// Large payloads expire with their run (docs/wire-format.md, "Large
// payloads"): the leader's payload sweep lists the payloads bucket every
// Config.PayloadSweep, notes on each object whose owner's record it finds
// ended when that was (payload.MarkEnded), and deletes those whose owner's
// record, seen ended, is gone since (it expired, the retention after its
// end), as payload.Sweep decides. The bucket's TTL stays as a backstop.

// payloadSweepEvery is the default period of the payload sweep for
// retention r: a tenth of it, at least a second and at most an hour, so
// that every ended record is seen several times before it expires.
func payloadSweepEvery(r time.Duration) time.Duration {
	return min(max(r/10, time.Second), time.Hour)
}

// payloadLoop runs the payload sweep while this scheduler leads.
func (s *Scheduler) payloadLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.PayloadSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		removed, err := s.SweepPayloads(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("payload sweep", "error", err)
		} else if removed > 0 {
			s.log.Debug("payload sweep removed objects", "count", removed)
		}
	}
}

// SweepPayloads makes one payload sweep (the leader makes one every
// Config.PayloadSweep) and returns how many objects it removed. An
// object whose owner's record cannot be read from the runs stream's
// leader is kept until a later sweep.
func (s *Scheduler) SweepPayloads(ctx context.Context) (int, error) {
	obs, err := s.js.ObjectStore(ctx, s.scfg.PayloadsBucket())
	if err != nil {
		return 0, fmt.Errorf("payloads bucket %s: %w", s.scfg.PayloadsBucket(), err)
	}
	lctx, cancel := context.WithTimeout(ctx, time.Minute) // a description per object
	infos, err := obs.List(lctx)
	cancel()
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("payloads bucket %s: list: %w", s.scfg.PayloadsBucket(), err)
	}
	records := map[string]*owned{} // owner -> its record, read once a sweep
	removed := 0
	var errs []error
	for _, info := range infos {
		owner, ok := payload.Owner(info.Name)
		if !ok || info.Deleted {
			continue
		}
		rec, err := s.ownerRecord(ctx, records, owner)
		if err != nil {
			continue // unread: kept, a later sweep reads it again
		}
		gone := func(id string) bool {
			r, err := s.ownerRecord(ctx, records, id)
			return err == nil && r == nil
		}
		act, mark := payload.Sweep(payload.MarkOf(info.Metadata), rec, s.now(), s.scfg.Retention, gone)
		switch act {
		case payload.MarkEnded:
			meta := info.ObjectMeta
			meta.Metadata = mark.Meta(info.Metadata)
			err := within(ctx, func(ctx context.Context) error { return obs.UpdateMeta(ctx, info.Name, meta) })
			if err != nil && !errors.Is(err, jetstream.ErrUpdateMetaDeleted) {
				errs = append(errs, fmt.Errorf("mark %s: %w", info.Name, err))
			}
		case payload.Remove:
			err := within(ctx, func(ctx context.Context) error { return obs.Delete(ctx, info.Name) })
			if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				errs = append(errs, fmt.Errorf("delete %s: %w", info.Name, err))
				continue
			}
			removed++
		}
		if len(errs) >= 3 {
			break // a sweep that fails this often (rights missing, the server away) tries again next time
		}
	}
	return removed, errors.Join(errs...)
}

// sweepOpTimeout bounds each call of the payload sweep to the server: a
// request the server never answers (a right missing) fails it, not the
// sweep's term.
const sweepOpTimeout = 10 * time.Second

func within(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, sweepOpTimeout)
	defer cancel()
	return f(ctx)
}

// owned is a run's record as the sweep read it (nil: none).
type owned struct {
	rec *jetflow.Run
	err error
}

// ownerRecord reads run id's record from the runs stream's leader, once a
// sweep: nil when it has none, an error when the leader did not answer.
func (s *Scheduler) ownerRecord(ctx context.Context, cache map[string]*owned, id string) (*jetflow.Run, error) {
	if o := cache[id]; o != nil {
		return o.rec, o.err
	}
	var r *jetflow.Run
	var leader bool
	err := within(ctx, func(ctx context.Context) error {
		var err error
		r, leader, err = s.store.Decide(ctx, id)
		return err
	})
	o := &owned{rec: r}
	switch {
	case errors.Is(err, kv.ErrNotFound) && leader:
		o.rec = nil
	case errors.Is(err, jetflow.ErrBadRecord):
		o.err = err // not a record the sweep can judge: kept
	case err != nil:
		o.err = err
	case !leader:
		o.err = errors.New("not read from the leader")
	}
	cache[id] = o
	return o.rec, o.err
}
