package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Key layout of the crons bucket (kv documents it too):
//
//	def.<name>                  the cron: definition and state (kv.CronRecord)
//	due.<hour>.<second>.<name>  index entry: the cron is due at <second>
//	                            (unix seconds; <hour> is second/3600)
//	meta.watermark              unix second up to which the leader has read
//	                            the index
//	meta.code                   names of the code-defined crons (JSON list)
//
// A cron's record names the one index entry it is filed under (Due). The
// evaluator reads only the entries of the seconds that have come (one
// subject filter per second, or per hour for long gaps), so its cost
// follows the crons due, not the crons registered. An entry whose cron no
// longer points at it is stale and is removed when met.
const (
	defPrefix    = kv.CronDefPrefix
	duePrefix    = "due."
	watermarkKey = "meta.watermark"
	codeKey      = "meta.code"
)

// cronRecord is the stored form of a cron.
type cronRecord = kv.CronRecord

// sameDefinition reports whether a and b define the same cron (state aside).
func sameDefinition(a, b *cronRecord) bool {
	type def struct {
		fn, kind, args string
		overlap        bool
		catchUp        int
	}
	of := func(r *cronRecord) def {
		return def{r.Function, string(r.Kind), string(r.Args), r.Overlap, r.CatchUp}
	}
	return a.Spec == b.Spec && of(a) == of(b)
}

func defKey(name string) string { return defPrefix + name }

func dueKey(sec int64, name string) string {
	return duePrefix + strconv.FormatInt(sec/3600, 10) + "." + strconv.FormatInt(sec, 10) + "." + name
}

// parseDueKey splits "due.<hour>.<second>.<name>".
func parseDueKey(key string) (sec int64, name string, ok bool) {
	rest, found := strings.CutPrefix(key, duePrefix)
	if !found {
		return 0, "", false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 || parts[2] == "" {
		return 0, "", false
	}
	sec, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return 0, "", false
	}
	return sec, parts[2], true
}

// dueAt is the second the evaluator files a cron under after evaluating it
// at now: its next fire's second, and never one that has begun.
func dueAt(t, now time.Time) int64 { return max(dueSecond(t), now.Unix()+1) }

// dueSecond is the unix second at which a fire at t is due (t rounded up).
func dueSecond(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	s := t.Unix()
	if t.Nanosecond() != 0 {
		s++
	}
	return s
}

func isWrongSeq(err error) bool {
	return kv.IsWrongSequence(err) || errors.Is(err, jetstream.ErrKeyExists)
}

// open binds the crons bucket and its stream (once).
func (c *Crons) open(ctx context.Context) (jetstream.KeyValue, jetstream.Stream, error) {
	c.openMu.Lock()
	defer c.openMu.Unlock()
	if c.kv != nil {
		return c.kv, c.st, nil
	}
	bucket := c.cfg.Streams.CronsBucket()
	kvb, err := c.js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler: open %s: %w", bucket, err)
	}
	st, err := c.js.Stream(ctx, streams.KVStream(bucket))
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler: open %s: %w", bucket, err)
	}
	c.kv, c.st = kvb, st
	return kvb, st, nil
}

// load reads cron name and its revision. Errors: ErrCronNotFound,
// ErrBadCronRecord (with the revision, so that it can be replaced or
// deleted), ErrUnknownZone (with the record and its revision).
func (c *Crons) load(ctx context.Context, name string) (*cronRecord, uint64, error) {
	kvb, _, err := c.open(ctx)
	if err != nil {
		return nil, 0, err
	}
	e, err := kvb.Get(ctx, defKey(name))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, 0, notFound(name)
		}
		return nil, 0, fmt.Errorf("scheduler: read cron %s: %w", name, err)
	}
	r, err := kv.DecodeCronRecord(name, e.Value())
	return r, e.Revision(), err
}

// write stores r by compare-and-swap on rev (0: create). ok is false when
// the record changed (or appeared) since rev.
func (c *Crons) write(ctx context.Context, r *cronRecord, rev uint64) (bool, error) {
	kvb, _, err := c.open(ctx)
	if err != nil {
		return false, err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return false, err
	}
	if rev == 0 {
		_, err = kvb.Create(ctx, defKey(r.Name), data)
	} else {
		_, err = kvb.Update(ctx, defKey(r.Name), data, rev)
	}
	if err != nil {
		if isWrongSeq(err) {
			return false, nil
		}
		return false, fmt.Errorf("scheduler: write cron %s: %w", r.Name, err)
	}
	return true, nil
}

// putDue files cron name under second sec.
func (c *Crons) putDue(ctx context.Context, sec int64, name string) error {
	kvb, _, err := c.open(ctx)
	if err != nil {
		return err
	}
	if _, err := kvb.Put(ctx, dueKey(sec, name), nil); err != nil {
		return fmt.Errorf("scheduler: index cron %s: %w", name, err)
	}
	return nil
}

// removeDue removes the index entry of name at sec, if any (best effort:
// a stale entry is removed when the evaluator meets it).
func (c *Crons) removeDue(ctx context.Context, sec int64, name string) {
	if sec == 0 {
		return
	}
	kvb, _, err := c.open(ctx)
	if err != nil {
		return
	}
	e, err := kvb.Get(ctx, dueKey(sec, name))
	if err != nil {
		return
	}
	c.removeEntry(ctx, dueKey(sec, name), e.Revision())
}

// removeEntry removes index entry key at revision seq, leaving no marker.
// KV streams refuse to delete a message (DenyDelete), so it purges the
// key's subject up to seq: a newer entry under the same key stays.
func (c *Crons) removeEntry(ctx context.Context, key string, seq uint64) {
	_, st, err := c.open(ctx)
	if err != nil {
		return
	}
	subj := streams.KVSubject(c.cfg.Streams.CronsBucket(), key)
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(seq+1)); err != nil {
		c.log.Debug("remove cron index entry", "key", key, "error", err)
	}
}

// consume delivers the last message of every subject matching filters, in
// stream order, until visit returns false. Markers of deleted keys are
// skipped.
func (c *Crons) consume(ctx context.Context, filters []string, headersOnly bool, visit func(subject string, data []byte, seq uint64) bool) error {
	_, st, err := c.open(ctx)
	if err != nil {
		return err
	}
	cfg := jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       headersOnly,
		MemoryStorage:     true,
		InactiveThreshold: 5 * time.Second,
	}
	if len(filters) == 1 {
		cfg.FilterSubject = filters[0]
	} else {
		cfg.FilterSubjects = filters
	}
	cons, err := st.CreateConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("scheduler: read crons: %w", err)
	}
	defer func() {
		name := cons.CachedInfo().Name
		go func() {
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = st.DeleteConsumer(dctx, name)
		}()
	}()
	// Every entry there was when the consumer was made, never fewer
	// taken for all (kv.FetchPending).
	err = kv.FetchPending(ctx, cons, int(cons.CachedInfo().NumPending), 1000, func(m jetstream.Msg) (bool, error) {
		md, err := m.Metadata()
		if err != nil || m.Headers().Get("KV-Operation") != "" {
			return true, nil
		}
		return visit(m.Subject(), m.Data(), md.Sequence.Stream), nil
	})
	if err != nil {
		return fmt.Errorf("scheduler: read crons: %w", err)
	}
	return nil
}

// seedWatermark stores the evaluator's watermark, if there is none yet,
// before the first index entry is written: every entry is filed at or
// after its writer's now, so the first leader reads the index from there
// instead of reading all of it.
func (c *Crons) seedWatermark(ctx context.Context, now time.Time) {
	if c.seeded.Load() {
		return
	}
	kvb, _, err := c.open(ctx)
	if err != nil {
		return
	}
	wm := now.Add(-lookback).Unix()
	if _, err := kvb.Create(ctx, watermarkKey, []byte(strconv.FormatInt(wm, 10))); err == nil || isWrongSeq(err) {
		c.seeded.Store(true)
	}
}
