package pool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Key layout of the pools bucket (<prefix>_pools), for pool <name>:
//
//	<name>.state     max parallelism, rate limit, the running slots and the
//	                 recent start times: every start and every release is a
//	                 compare-and-swap on this one key
//	<name>.lease     the dispatcher lease (Nats-TTL, renewed by CAS)
//	<name>.q.<id>    the queue entry of a pending item: priority, ready time,
//	                 the attempt it waits to start and, for a new item, the
//	                 item itself; removed when the item starts or is canceled
//	                 (one the pool cannot read: when Cancel or CancelAll
//	                 has recorded it as a failed run, dlq-<stream>-<rev>)
//	<name>.i.<id>    the item record, written when the item first starts (or
//	                 is canceled before, or the periodic check takes back
//	                 the slot of its first attempt before it started: then
//	                 pending, with that slot marked revoked); terminal ones
//	                 expire after the retention period, by a Nats-TTL on
//	                 the terminal write
//
// BucketName is the pools bucket for a prefix.
func BucketName(scfg streams.Config) string { return scfg.WithDefaults().PoolsBucket() }

func itemKey(pool, id string) string  { return pool + ".i." + id }
func queueKey(pool, id string) string { return pool + ".q." + id }
func stateKey(pool string) string     { return pool + ".state" }
func leaseKey(pool string) string     { return pool + ".lease" }

// wakeSubject carries "look again" notices to the pool's dispatcher (core
// NATS, best effort: the dispatcher also polls).
func wakeSubject(scfg streams.Config, pool string) string {
	return scfg.WithDefaults().Prefix + ".pool." + pool + ".wake"
}

// queued is the value of a queue entry.
type queued struct {
	Priority Priority `json:"p,omitempty"`
	// Ready is when the item may start (Unix ns): its enqueue time, or the
	// end of a retry's backoff. Aging counts from it.
	Ready int64 `json:"r"`
	// Attempt is the attempt the entry waits to start (1 for a new item).
	Attempt int `json:"a"`
	// Item is the new item (attempt 1), which has no record yet. A retry's
	// entry has none: its record exists.
	Item *Item `json:"item,omitempty"`
	// Key is the item's key (retries carry it too).
	Key string `json:"k,omitempty"`
	// Deb is set on a new item that debounces with its key.
	Deb *debounceEntry `json:"d,omitempty"`
}

// debounced reports whether q is a new item that debounces with its key.
func (q *queued) debounced() bool { return q.Attempt == 1 && q.Deb != nil && q.Deb.Window > 0 }

// check reports a queue entry that the pool did not write (another client
// did): an attempt below 1, a new item whose id or pool is not the entry's,
// a priority out of range. Errors: jetflow.ErrBadRecord.
func (q *queued) check(pool, id string) error {
	switch {
	case q.Attempt < 1:
		return fmt.Errorf("pool %s queue entry %s: %w: attempt %d", pool, id, jetflow.ErrBadRecord, q.Attempt)
	case q.Priority < MinPriority || q.Priority > MaxPriority:
		return fmt.Errorf("pool %s queue entry %s: %w: priority %d", pool, id, jetflow.ErrBadRecord, q.Priority)
	case q.Item != nil && (q.Item.ID != id || q.Item.Pool != pool):
		return fmt.Errorf("pool %s queue entry %s: %w: it holds item %q of pool %q", pool, id, jetflow.ErrBadRecord, q.Item.ID, q.Item.Pool)
	case q.Item != nil && jetflow.ValidateName(q.Item.Function) != nil:
		return fmt.Errorf("pool %s queue entry %s: %w: function %q", pool, id, jetflow.ErrBadRecord, q.Item.Function)
	case q.Item != nil && q.Item.Key != q.Key:
		return fmt.Errorf("pool %s queue entry %s: %w: keys %q and %q", pool, id, jetflow.ErrBadRecord, q.Key, q.Item.Key)
	}
	return nil
}

// check reports an item record that the pool did not write (another client
// did). Errors: jetflow.ErrBadRecord.
func (it *Item) check(pool, id string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("pool %s item %s: %w: %s", pool, id, jetflow.ErrBadRecord, fmt.Sprintf(format, args...))
	}
	switch {
	case it.ID != id || it.Pool != pool:
		return bad("the record is of item %q of pool %q", it.ID, it.Pool)
	case !it.State.Valid():
		return bad("state %q", it.State)
	case it.Attempts < 0:
		return bad("attempts %d", it.Attempts)
	case it.State == jetflow.InProgress && it.RunID != RunID(pool, id, it.Attempts):
		return bad("in progress at attempt %d with run %q", it.Attempts, it.RunID)
	case it.State != jetflow.Canceled && jetflow.ValidateName(it.Function) != nil:
		return bad("function %q", it.Function)
	}
	return nil
}

// debounceEntry is the debounce of a queue entry.
type debounceEntry struct {
	Window  time.Duration `json:"w"`
	MaxWait time.Duration `json:"m,omitempty"`
}

// slot is one running item in the pool state.
type slot struct {
	Attempt int    `json:"a"`
	Granted int64  `json:"t"` // Unix ns
	Key     string `json:"k,omitempty"`
}

// poolState is the value of <name>.state.
type poolState struct {
	Max     int             `json:"max"`
	Rate    RateLimit       `json:"rate,omitzero"`
	Running map[string]slot `json:"running,omitempty"`
	// Starts are the grant times (Unix ns, ascending) of the most recent
	// starts, at most Rate.N of them: the sliding window of the rate limit.
	Starts []int64 `json:"starts,omitempty"`
	// KeyLimit is the most running items per key (0: none), KeyStrategy
	// what happens to a key's new items when it is reached.
	KeyLimit    int      `json:"keyLimit,omitempty"`
	KeyStrategy Strategy `json:"keyStrategy,omitempty"`
	// KeyRate is the per-key rate limit; KeyStarts the grant times of each
	// key's most recent starts within KeyRate.Per (at most KeyRate.N per
	// key; keys without a start in the window are removed).
	KeyRate   RateLimit          `json:"keyRate,omitzero"`
	KeyStarts map[string][]int64 `json:"keyStarts,omitempty"`
}

// sanitize holds the values of a state that another client wrote within
// the pool's limits: a max parallelism, rate or key limit out of range,
// more start times than a rate keeps.
func (st *poolState) sanitize() {
	if st.Running == nil {
		st.Running = map[string]slot{}
	}
	st.Max = min(max(st.Max, 0), MaxParallelismLimit)
	st.KeyLimit = min(max(st.KeyLimit, 0), MaxParallelismLimit)
	if st.KeyStrategy.validate() != nil {
		st.KeyStrategy = Queue
	}
	for _, r := range []*RateLimit{&st.Rate, &st.KeyRate} {
		if r.validate() != nil {
			if r.N <= 0 {
				*r = RateLimit{} // what allowance makes of it: no limit
			} else {
				r.N, r.Per = min(r.N, MaxRate), max(r.Per, time.Millisecond)
			}
		}
	}
	if over := len(st.Starts) - MaxRate; over > 0 {
		st.Starts = st.Starts[over:]
	}
	for k, s := range st.KeyStarts {
		if over := len(s) - MaxRate; over > 0 {
			st.KeyStarts[k] = s[over:]
		}
	}
}

// clampFuture brings start times more than one period after now (a clock
// far ahead, another client's garbage) back to now, so that they hold the
// rate for at most one period, and keeps them ascending.
// It reports whether it changed any.
func (st *poolState) clampFuture(now int64) bool {
	changed := false
	clamp := func(s []int64, per time.Duration) {
		for i, t := range s {
			if t > addSat(now, int64(per)) {
				s[i], changed = now, true
			}
		}
		slices.Sort(s)
	}
	clamp(st.Starts, st.Rate.Per)
	for _, s := range st.KeyStarts {
		clamp(s, st.KeyRate.Per)
	}
	return changed
}

// runningByKey counts the slots per key.
func (st *poolState) runningByKey() map[string]int {
	n := make(map[string]int, len(st.Running))
	for _, s := range st.Running {
		n[s.Key]++
	}
	return n
}

// keyLimited reports whether key is under the per-key limit and rate.
func keyLimited(key string) bool { return key != "" }

// strategyApplies reports whether new items of a key at its limit meet a
// strategy other than Queue (which lets them all wait).
func (st *poolState) strategyApplies() bool {
	return st.KeyLimit > 0 && st.KeyStrategy != Queue && st.KeyStrategy != ""
}

// keyAllowance is how many items of key may start at now under the per-key
// rate limit, and when the next may start if none can (same definition as
// allowance).
func (st *poolState) keyAllowance(key string, now int64) (n int, next int64) {
	if st.KeyRate.N <= 0 || st.KeyRate.Per <= 0 || !keyLimited(key) {
		return int(^uint(0) >> 1), 0
	}
	starts := st.KeyStarts[key]
	cut := now - int64(st.KeyRate.Per)
	recent := 0
	for i := len(starts) - 1; i >= 0 && starts[i] >= cut; i-- {
		recent++
	}
	n = st.KeyRate.N - recent
	if n > 0 {
		return n, 0
	}
	return 0, addSat(addSat(starts[len(starts)-st.KeyRate.N], int64(st.KeyRate.Per)), 1)
}

// recordKeyStart records a start of key at t, keeps at most KeyRate.N
// times per key and removes the keys whose last start left the window.
func (st *poolState) recordKeyStart(key string, t int64) {
	if st.KeyRate.N <= 0 || !keyLimited(key) {
		return
	}
	if st.KeyStarts == nil {
		st.KeyStarts = map[string][]int64{}
	}
	s := append(st.KeyStarts[key], t)
	if over := len(s) - st.KeyRate.N; over > 0 {
		s = append([]int64(nil), s[over:]...)
	}
	st.KeyStarts[key] = s
}

// pruneKeyStarts removes the keys whose every start is older than the
// window at now.
func (st *poolState) pruneKeyStarts(now int64) {
	if st.KeyRate.N <= 0 {
		st.KeyStarts = nil
		return
	}
	cut := now - int64(st.KeyRate.Per)
	for k, s := range st.KeyStarts {
		if len(s) == 0 || s[len(s)-1] < cut {
			delete(st.KeyStarts, k)
		}
	}
}

// returnKeyStart gives back one start of key recorded at t.
func (st *poolState) returnKeyStart(key string, t int64) {
	s := st.KeyStarts[key]
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == t {
			st.KeyStarts[key] = append(s[:i:i], s[i+1:]...)
			return
		}
	}
}

// allowance is how many items may start at now under the rate limit, and
// when the next may start if none can.
func (st *poolState) allowance(now int64) (n int, next int64) {
	if st.Rate.N <= 0 || st.Rate.Per <= 0 {
		return int(^uint(0) >> 1), 0
	}
	cut := now - int64(st.Rate.Per)
	recent := 0
	for i := len(st.Starts) - 1; i >= 0 && st.Starts[i] >= cut; i-- {
		recent++
	}
	n = st.Rate.N - recent
	if n > 0 {
		return n, 0
	}
	// The N-th most recent start must leave the window [t-Per, t].
	return 0, addSat(addSat(st.Starts[len(st.Starts)-st.Rate.N], int64(st.Rate.Per)), 1)
}

// grantTime is the timestamp of a start at now: never before the last
// recorded start, so that Starts stays ascending whatever the clocks do.
func (st *poolState) grantTime(now int64) int64 {
	if k := len(st.Starts); k > 0 && st.Starts[k-1] > now {
		return st.Starts[k-1]
	}
	return now
}

func (st *poolState) recordStarts(t int64, n int) {
	if st.Rate.N <= 0 {
		st.Starts = nil
		return
	}
	for range n {
		st.Starts = append(st.Starts, t)
	}
	if over := len(st.Starts) - st.Rate.N; over > 0 {
		st.Starts = append([]int64(nil), st.Starts[over:]...)
	}
}

// returnStart gives back one start recorded at t (a grant that did not
// start anything).
func (st *poolState) returnStart(t int64) {
	for i := len(st.Starts) - 1; i >= 0; i-- {
		if st.Starts[i] == t {
			st.Starts = append(st.Starts[:i], st.Starts[i+1:]...)
			return
		}
	}
}

// store reads and writes the pools bucket.
type store struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	kv     jetstream.KeyValue
	stream jetstream.Stream
	bucket string
	ttl    time.Duration // of terminal items
}

// openStore opens the pools bucket. streams.Provision (jetflow provision)
// creates it; when it is missing, openStore creates it with
// streams.PoolsStreamConfig (which needs stream-create rights). An existing
// bucket is not updated, so that concurrent starts never flip its settings.
func openStore(ctx context.Context, js jetstream.JetStream, scfg streams.Config) (*store, error) {
	scfg = scfg.WithDefaults()
	bucket := BucketName(scfg)
	name := streams.KVStream(bucket)
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, streams.PoolsStreamConfig(scfg))
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = js.Stream(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("pool: bucket %s: %w", bucket, err)
	}
	if cfg := st.CachedInfo().Config; cfg.DenyDelete || !cfg.AllowAtomicPublish || !cfg.AllowMsgTTL {
		return nil, fmt.Errorf("pool: bucket %s was created with other settings (deny delete %v, atomic publish %v, message TTL %v): "+
			"let streams.Provision (jetflow provision) or the pool package create it", bucket, cfg.DenyDelete, cfg.AllowAtomicPublish, cfg.AllowMsgTTL)
	}
	b, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("pool: bucket %s: %w", bucket, err)
	}
	return &store{js: js, nc: js.Conn(), kv: b, stream: st, bucket: bucket, ttl: scfg.Retention}, nil
}

// slotMark names the slot of an attempt that the dispatcher's periodic
// check took back before the attempt started (see dispatcher.revoke).
type slotMark struct {
	Attempt int   `json:"a"`
	Granted int64 `json:"t"` // Unix ns
}

// itemRecord is the stored form of an item record: the item, and on a
// pending record the slot taken back from a grant that had not started it.
type itemRecord struct {
	*Item
	Revoked *slotMark `json:"revoked,omitempty"`
}

// itemMsg is the write of item it, conditional on the key's last revision
// being expect (0: the key must not exist). Terminal items carry the
// retention TTL.
func (s *store) itemMsg(it *Item, expect uint64) (*nats.Msg, error) {
	data, err := json.Marshal(itemRecord{Item: it, Revoked: it.revoked})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", jetflow.ErrBadArgs, err)
	}
	opts := []kv.PutOption{kv.PutExpect(expect)}
	if it.State.Terminal() {
		opts = append(opts, kv.PutTTL(s.ttl))
	}
	return kv.PutMsg(s.bucket, itemKey(it.Pool, it.ID), data, opts...), nil
}

// queueMsg is the write of a queue entry; a new item's entry (q.Item set)
// is written only if the key has none.
func (s *store) queueMsg(pool, id string, q queued) (*nats.Msg, error) {
	data, err := json.Marshal(q)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", jetflow.ErrBadArgs, err)
	}
	var opts []kv.PutOption
	if q.Item != nil {
		opts = append(opts, kv.PutExpect(0))
	}
	return kv.PutMsg(s.bucket, queueKey(pool, id), data, opts...), nil
}

// putQueued writes a queue entry and returns its sequence.
func (s *store) putQueued(ctx context.Context, pool, id string, q queued) (uint64, error) {
	m, err := s.queueMsg(pool, id, q)
	if err != nil {
		return 0, err
	}
	if q.Item == nil {
		ack, err := s.js.PublishMsg(ctx, m)
		if err != nil {
			return 0, fmt.Errorf("pool: queue item %s: %w", id, err)
		}
		return ack.Sequence, nil
	}
	// A new item's entry is a create: a refusal stands only on the
	// leader's word (kv.CreateConfirmed).
	var seq uint64
	subj := streams.KVSubject(s.bucket, queueKey(pool, id))
	err = kv.CreateConfirmed(ctx, func(ctx context.Context) error {
		ack, err := s.js.PublishMsg(ctx, m)
		if err == nil {
			seq = ack.Sequence
		}
		return err
	}, func(ctx context.Context) (kv.Found, error) {
		last, err := kv.LastFromLeader(ctx, s.js, s.stream.CachedInfo().Config.Name, subj)
		if errors.Is(err, nats.ErrPermissionViolation) {
			// A role that may not ask the leader: what a replica holds
			// is stored; what it lacks is tried again.
			last, err = s.stream.GetLastMsgForSubject(ctx, subj)
		}
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return kv.Missing, nil
		case err != nil:
			return kv.Missing, err
		}
		found := kv.Theirs
		if bytes.Equal(last.Data, m.Data) {
			seq, found = last.Sequence, kv.Ours
		}
		// What a leader cut off from its peers holds may yet be lost.
		if ok, err := kv.LeaderHasQuorum(ctx, s.js, s.stream.CachedInfo().Config.Name); err != nil || !ok {
			return kv.Missing, errors.Join(err, kv.ErrNoQuorum)
		}
		return found, nil
	})
	if errors.Is(err, kv.ErrExists) {
		return 0, fmt.Errorf("item %s: %w", id, ErrAlreadyExists)
	}
	if err != nil {
		return 0, fmt.Errorf("pool: queue item %s: %w", id, err)
	}
	return seq, nil
}

// getQueued reads the queue entry of item id. Errors: jetflow.ErrNotFound.
func (s *store) getQueued(ctx context.Context, pool, id string) (queued, uint64, error) {
	var q queued
	if err := jetflow.ValidateRunID(id); err != nil {
		return q, 0, err
	}
	e, err := s.kv.Get(ctx, queueKey(pool, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return q, 0, fmt.Errorf("pool %s item %s: %w", pool, id, jetflow.ErrNotFound)
	}
	if err != nil {
		return q, 0, fmt.Errorf("pool: get queue entry %s: %w", id, err)
	}
	q, err = decodeQueued(pool, id, e.Value())
	return q, e.Revision(), err
}

// decodeQueued decodes and checks the queue entry of item id. Errors:
// jetflow.ErrBadRecord (an id that is no item id too: the key was not
// written by the pool).
func decodeQueued(pool, id string, b []byte) (queued, error) {
	var q queued
	if err := jetflow.ValidateRunID(id); err != nil {
		return q, fmt.Errorf("pool %s queue entry %s: %w: %w", pool, id, jetflow.ErrBadRecord, err)
	}
	if err := json.Unmarshal(b, &q); err != nil {
		return q, fmt.Errorf("pool %s queue entry %s: %w: %v", pool, id, jetflow.ErrBadRecord, err)
	}
	return q, q.check(pool, id)
}

// writeItem stores it if its record is still at revision expect. Errors:
// ErrAlreadyExists (expect 0), errConflict.
func (s *store) writeItem(ctx context.Context, it *Item, expect uint64) error {
	m, err := s.itemMsg(it, expect)
	if err != nil {
		return err
	}
	ack, err := s.js.PublishMsg(ctx, m)
	if err != nil {
		return s.writeErr(it.ID, expect, err)
	}
	it.Revision = ack.Sequence
	return nil
}

var errConflict = fmt.Errorf("pool: item changed meanwhile: %w", kv.ErrConflict)

func (s *store) writeErr(id string, expect uint64, err error) error {
	if kv.IsWrongSequence(err) {
		if expect == 0 {
			return fmt.Errorf("item %s: %w", id, ErrAlreadyExists)
		}
		return errConflict
	}
	return fmt.Errorf("pool: write item %s: %w", id, err)
}

// getItem reads an item record. Errors: jetflow.ErrNotFound.
func (s *store) getItem(ctx context.Context, pool, id string) (*Item, error) {
	if err := jetflow.ValidateRunID(id); err != nil {
		return nil, err
	}
	e, err := s.kv.Get(ctx, itemKey(pool, id))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("pool %s item %s: %w", pool, id, jetflow.ErrNotFound)
		}
		return nil, fmt.Errorf("pool: get item %s: %w", id, err)
	}
	rec := itemRecord{Item: new(Item)}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, fmt.Errorf("pool %s item %s: %w: %v", pool, id, jetflow.ErrBadRecord, err)
	}
	it := rec.Item
	if err := it.check(pool, id); err != nil {
		return nil, err
	}
	it.Revision, it.revoked = e.Revision(), rec.Revoked
	return it, nil
}

// getState reads the pool state; ok is false when the pool has none.
func (s *store) getState(ctx context.Context, pool string) (*poolState, uint64, bool, error) {
	e, err := s.kv.Get(ctx, stateKey(pool))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("pool: read state of %s: %w", pool, err)
	}
	st := new(poolState)
	if err := json.Unmarshal(e.Value(), st); err != nil {
		return nil, e.Revision(), false, fmt.Errorf("pool %s state: %w: %v", pool, jetflow.ErrBadRecord, err)
	}
	st.sanitize()
	return st, e.Revision(), true, nil
}

// putState writes the pool state if it is still at revision rev (0: absent).
// It returns errConflict when someone wrote first. A write whose reply is
// lost (kv.Transient) or that is refused is settled by the one rule for such
// writes (kv.Settle, on the stream leader's read): landed, it counts (a
// pool's grants are not given twice, nor lost); as the write expected it,
// it is written again (a few times: the caller's next pass reads the state
// again); another writer's state is a conflict.
func (s *store) putState(ctx context.Context, pool string, st *poolState, rev uint64) (uint64, error) {
	data, err := json.Marshal(st)
	if err != nil {
		return 0, err
	}
	subj := streams.KVSubject(s.bucket, stateKey(pool))
	for try := 1; ; try++ {
		ack, err := s.js.PublishMsg(ctx, kv.PutMsg(s.bucket, stateKey(pool), data, kv.PutExpect(rev)))
		if err == nil {
			return ack.Sequence, nil
		}
		if kv.IsWrongSequence(err) && rev == 0 {
			// Absent may mean deleted: its delete marker is the last
			// message, which the create must expect.
			m, gerr := s.stream.GetLastMsgForSubject(ctx, subj)
			if gerr == nil && isMarker(m) {
				rev = m.Sequence
				continue
			}
		}
		if !kv.IsWrongSequence(err) && !kv.Transient(err) {
			return 0, fmt.Errorf("pool: write state of %s: %w", pool, err)
		}
		switch v, seq := s.readBack(ctx, subj, rev, data); {
		case v == kv.Landed:
			return seq, nil
		case v == kv.Superseded, v == kv.Gone:
			return 0, errConflict
		case v == kv.NotLanded && try < 3 && ctx.Err() == nil:
			continue
		case kv.IsWrongSequence(err):
			return 0, errConflict
		}
		return 0, fmt.Errorf("pool: write state of %s: %w", pool, err)
	}
}

// readBack settles a write of data at subject subj that expected revision
// rev (0: create) and was refused or went unanswered (kv.Settle), on the
// word of the stream's leader with a quorum; it returns the verdict and
// the stored revision.
func (s *store) readBack(ctx context.Context, subj string, rev uint64, data []byte) (kv.Verdict, uint64) {
	stream := s.stream.CachedInfo().Config.Name
	last, err := kv.LastFromLeader(ctx, s.js, stream, subj)
	if errors.Is(err, nats.ErrPermissionViolation) {
		// A role that may not ask the leader: what a replica holds
		// stands (as for a queued item's create).
		last, err = s.stream.GetLastMsgForSubject(ctx, subj)
	}
	rb := kv.ReadBack{Err: err, Leader: true}
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound), err == nil && isMarker(last) && rev == 0:
		rb.Err = fmt.Errorf("%w: %s", kv.ErrNotFound, subj)
	case err == nil:
		rb.Rev, rb.Same = last.Sequence, bytes.Equal(last.Data, data)
		if ok, qerr := kv.LeaderHasQuorum(ctx, s.js, stream); qerr != nil || !ok {
			// What a leader cut off from its peers holds may yet be lost.
			rb.Err = errors.Join(qerr, kv.ErrNoQuorum)
		}
	}
	v := kv.Settle(rev, rb)
	return v, rb.Rev
}

// updateState applies change to the pool state by compare-and-swap until it
// succeeds. change returns false to leave the state as it is. It returns
// ErrNotFound when the pool has no state.
func (s *store) updateState(ctx context.Context, pool string, change func(st *poolState) bool) (*poolState, error) {
	for {
		st, rev, ok, err := s.getState(ctx, pool)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("pool %s: %w", pool, ErrNoPool)
		}
		if !change(st) {
			return st, nil
		}
		_, err = s.putState(ctx, pool, st, rev)
		if errors.Is(err, errConflict) {
			continue
		}
		return st, err
	}
}

// isMarker reports whether m is a KV delete, purge or TTL-expiry marker.
func isMarker(m *jetstream.RawStreamMsg) bool {
	return m.Sequence != 0 && (m.Header.Get("KV-Operation") != "" || m.Header.Get("Nats-Marker-Reason") != "")
}

// deleteMsg removes a message (a queue entry) by its sequence, leaving no
// delete marker. One already gone is not an error.
func (s *store) deleteMsg(ctx context.Context, seq uint64) error {
	if err := s.stream.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("pool: remove queue entry %d: %w", seq, err)
	}
	return nil
}

// addSat is a+b, held within int64 rather than wrapping: limits and
// windows of hours or centuries must not turn into times in the past.
func addSat(a, b int64) int64 {
	c := a + b
	switch {
	case a > 0 && b > 0 && c < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && c >= 0:
		return math.MinInt64
	}
	return c
}

// negatesMin reports whether a*b is -MinInt64: it wraps to MinInt64, which
// c/b == a does not catch when b is -1.
func negatesMin(a, b int64) bool { return min(a, b) == math.MinInt64 && max(a, b) == -1 }

// mulSat is a*b, held within int64.
func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	c := a * b
	if c/b != a || negatesMin(a, b) {
		if (a < 0) != (b < 0) {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return c
}
