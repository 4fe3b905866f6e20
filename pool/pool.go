package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/jsbatch"
	"github.com/jetflow-dev/jetflow/internal/lifecycle"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// Limits.
const (
	// DefaultMaxParallelism is a new pool's max parallelism (Convex's default).
	DefaultMaxParallelism = 10
	// MaxParallelismLimit is the largest max parallelism a pool takes: every
	// start and end rewrites the set of running items in one record.
	MaxParallelismLimit = 1000
	// MaxRate is the largest N of a RateLimit: the window keeps the last N
	// start times.
	MaxRate = 10000
	// MaxBatch is the most items EnqueueBatch takes in one call.
	MaxBatch = producer.MaxBatch
)

// Errors. Each is matched with errors.Is.
var (
	// ErrInvalidConfig: a pool name, max parallelism, rate limit or priority
	// out of range.
	ErrInvalidConfig = errors.New("pool: invalid configuration")
	// ErrNoPool: the pool has no state in the bucket (New was never called
	// for it).
	ErrNoPool = errors.New("pool: no such pool")
	// ErrAlreadyExists: an item with the requested id exists in this pool;
	// the call returns its id and enqueued nothing. It matches
	// producer.ErrAlreadyExists too.
	ErrAlreadyExists = fmt.Errorf("pool: item already exists: %w", producer.ErrAlreadyExists)
	// ErrTooManyItems: more than MaxBatch items in one EnqueueBatch.
	ErrTooManyItems = errors.New("pool: too many items in one call")
	// ErrBatchFailed: the batch was refused by the server; none of it was
	// written.
	ErrBatchFailed = errors.New("pool: batch not written")
	// ErrInvalidKey: an item's key is longer than MaxKeyLen or not UTF-8
	// (JSON, which stores it, would merge such keys), or the pool's
	// Config.Key function failed on the item's args (the error wraps the
	// function's error too). Nothing was enqueued.
	ErrInvalidKey = errors.New("pool: invalid item key")
)

// MaxKeyLen is the longest item key, in bytes.
const MaxKeyLen = 256

// Strategy is what a pool does with a new item whose key is at its limit
// (Config.KeyLimit running items of that key).
type Strategy string

// Strategies.
const (
	// Queue (the default): the item waits until the key runs fewer than
	// KeyLimit items.
	Queue Strategy = "queue"
	// CancelInProgress: the newest items win. When a key has more items
	// running or waiting to start than KeyLimit, the oldest waiting ones
	// and then the oldest running ones are canceled (through Cancel: a
	// running item's run is canceled, its handler's context ends with
	// jetflow.ErrCanceled), each recorded as canceled with the reason and
	// the id of the item that superseded it.
	CancelInProgress Strategy = "cancel-in-progress"
	// DropNewest: a key admits at most KeyLimit items running or waiting to
	// start; a new item beyond that is recorded as canceled with the reason
	// "dropped", never started, never silently lost.
	DropNewest Strategy = "drop-newest"
)

func (s Strategy) validate() error {
	switch s {
	case "", Queue, CancelInProgress, DropNewest:
		return nil
	}
	return fmt.Errorf("%w: key strategy %q: queue, cancel-in-progress or drop-newest", ErrInvalidConfig, s)
}

// Debounce collapses the items of one key: items arriving within Window of
// each other become one run, started once the key has been quiet for
// Window, with the last item's args, and at most MaxWait after the first
// item of the burst arrived (0: no maximum). The collapsed items are
// recorded as canceled, "debounced into <id>", with SupersededBy set.
type Debounce struct {
	Window  time.Duration `json:"window,omitempty"`
	MaxWait time.Duration `json:"maxWait,omitempty"`
}

// IsZero reports whether d is no debounce.
func (d Debounce) IsZero() bool { return d.Window == 0 && d.MaxWait == 0 }

func (d Debounce) validate() error {
	if d.IsZero() {
		return nil
	}
	maxWaitOK := d.MaxWait == 0 || d.MaxWait >= d.Window
	if d.Window < time.Millisecond || !maxWaitOK {
		return fmt.Errorf("%w: debounce window %s, max wait %s: the window must be at least 1ms and max wait 0 or at least the window",
			ErrInvalidConfig, d.Window, d.MaxWait)
	}
	return nil
}

// KeyFunc derives an item's key from its encoded args.
type KeyFunc func(args json.RawMessage) (string, error)

// KeyOf makes a KeyFunc from a function of the typed args, e.g.
//
//	pool.KeyOf(func(a EmailArgs) string { return a.CustomerID })
func KeyOf[A any](f func(A) string) KeyFunc {
	return func(args json.RawMessage) (string, error) {
		var a A
		if len(args) > 0 {
			if err := json.Unmarshal(args, &a); err != nil {
				return "", err
			}
		}
		return f(a), nil
	}
}

// MaxKeyWeight is the largest weight Config.KeyWeight may give a key.
const MaxKeyWeight = 1000

// Priority orders pending items when the pool is saturated: the dispatcher
// starts the item with the smallest rank, ready time - priority x Aging.
// Any value from MinPriority to MaxPriority is valid.
type Priority int

// Named priorities.
const (
	Low    Priority = -1
	Normal Priority = 0
	High   Priority = 1

	MinPriority Priority = -10
	MaxPriority Priority = 10
)

func (p Priority) String() string {
	switch p {
	case Low:
		return "low"
	case Normal:
		return "normal"
	case High:
		return "high"
	}
	return strconv.Itoa(int(p))
}

// RateLimit allows at most N starts in any window of length Per, across
// every process. Items over the limit wait; they are never dropped or
// failed. The zero value means no limit.
type RateLimit struct {
	N   int           `json:"n,omitempty"`
	Per time.Duration `json:"per,omitempty"`
}

// IsZero reports whether r is no limit.
func (r RateLimit) IsZero() bool { return r.N == 0 && r.Per == 0 }

func (r RateLimit) validate() error {
	if r.IsZero() {
		return nil
	}
	if r.N < 1 || r.N > MaxRate || r.Per < time.Millisecond {
		return fmt.Errorf("%w: rate limit %d per %s: N must be 1-%d and Per at least 1ms", ErrInvalidConfig, r.N, r.Per, MaxRate)
	}
	return nil
}

// Retry is a pool's retry policy. The pool retries, not the worker: each
// attempt is a run of its own with one attempt, so that a retry waits for a
// slot and a rate-limit token like any start, and a backing-off item holds
// no slot (as in Convex's workpool).
type Retry struct {
	// MaxAttempts, first attempt included. Default 5 for retryable
	// functions and 1 (no retry) for at-most-once ones, as Convex retries
	// actions only when asked. Set it to retry at-most-once functions: each
	// attempt is still run at most once.
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// Backoff between attempts: exponential with full jitter (see
	// jetflow.Backoff); default initial 250 ms, base 2, max 1 h.
	Backoff jetflow.Backoff `json:"backoff,omitzero"`
}

func (r Retry) withDefaults() Retry {
	if r.Backoff.Initial <= 0 {
		r.Backoff.Initial = 250 * time.Millisecond
	}
	r.Backoff = r.Backoff.WithDefaults()
	return r
}

// Config configures a Pool. Every zero field takes the default named.
type Config struct {
	// Name of the pool: 1-64 ASCII letters, digits or '_'. Required.
	Name string
	// MaxParallelism is the most items of the pool running at once across
	// the cluster. It is stored with the pool: zero keeps the stored value
	// (DefaultMaxParallelism for a new pool), a positive value replaces it.
	// SetMaxParallelism changes it at run time; 0 pauses the pool.
	MaxParallelism int
	// RateLimit limits starts per period across the cluster. Stored like
	// MaxParallelism: the zero value keeps the stored limit (none for a new
	// pool); SetRateLimit changes or removes it.
	RateLimit RateLimit
	// Retry is the retry policy of items enqueued through this Pool value
	// (stored on each item). See Retry for defaults.
	Retry Retry
	// Aging is how long a pending item waits to rise one priority level.
	// Default 1 minute. See Priority.
	Aging time.Duration

	// Key derives each item's key from its args (e.g. the customer id),
	// unless the item has WithKey. Items without a key (nil Key, or an empty
	// result) are in the key "": fairness treats it as one key; KeyLimit and
	// KeyRate do not apply to it. Default: none.
	Key KeyFunc
	// KeyLimit is the most items of one key running at once across the
	// cluster, enforced in the same compare-and-swap as MaxParallelism.
	// Stored with the pool like MaxParallelism: zero keeps the stored value
	// (none for a new pool); SetKeyLimit changes it at run time.
	KeyLimit int
	// KeyStrategy is what happens to a new item whose key is at KeyLimit
	// (default Queue). Stored with KeyLimit, and set only with it.
	KeyStrategy Strategy
	// KeyRate limits starts per period per key (the definition of
	// RateLimit, for each key alone). Stored like RateLimit; SetKeyRate
	// changes it.
	KeyRate RateLimit
	// KeyWeight gives a key its share of starts when keys compete: a key of
	// weight 2 gets two starts for every one of a key of weight 1. Values
	// are clamped to 1..MaxKeyWeight. Default: 1 for every key. It is the
	// active dispatcher's: give every process the same.
	KeyWeight func(key string) int
	// KeyBurst is how many starts ahead of the keys served all along a key
	// may take when it becomes runnable after a pause (times its weight):
	// a tenant's small burst starts about as soon as in an idle pool. 0
	// means the default, 10; negative means none (strict turns). The
	// active dispatcher's.
	KeyBurst int
	// Debounce applies to every item enqueued through this Pool value
	// (WithDebounce overrides it per item). Default: none.
	Debounce Debounce

	// Logger for warnings. Default: discard.
	Logger *slog.Logger
	// ID names this dispatcher in the lease. Default: generated.
	ID string
	// LeaseTTL is how long a dead dispatcher keeps the lease. Default 5 s;
	// the dispatcher renews every LeaseTTL/5 and standbys try as often.
	LeaseTTL time.Duration
	// PollInterval is how often the dispatcher looks for free slots without
	// being told. Default 1 s.
	PollInterval time.Duration
	// ReconcileInterval is the period of the check of running items (a lost
	// completion, a crash between granting a slot and starting the run).
	// Default 5 s.
	ReconcileInterval time.Duration
	// ReconcileGrace is how long a slot may look inconsistent before the
	// check repairs it. Default 10 s. A grant that takes longer than this
	// to start its item (a pause, a slow server) loses its slot to the
	// check and starts nothing; the item waits for a slot again.
	ReconcileGrace time.Duration
	// MaxStartsPerPass bounds the items one dispatcher pass starts. Default 64.
	MaxStartsPerPass int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Aging <= 0 {
		c.Aging = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ID == "" {
		c.ID = nuid.Next()
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 5 * time.Second
	}
	if c.LeaseTTL < time.Second {
		c.LeaseTTL = time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = 5 * time.Second
	}
	if c.ReconcileGrace <= 0 {
		c.ReconcileGrace = 10 * time.Second
	}
	if c.MaxStartsPerPass <= 0 {
		c.MaxStartsPerPass = 64
	}
	switch {
	case c.KeyBurst == 0:
		c.KeyBurst = 10
	case c.KeyBurst < 0:
		c.KeyBurst = 0
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Retry = c.Retry.withDefaults()
	return c
}

// ValidateName checks a pool name: 1-64 ASCII letters, digits or '_'.
func ValidateName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: pool name %q must be 1-64 bytes", ErrInvalidConfig, name)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("%w: pool name %q: letters, digits and '_' only", ErrInvalidConfig, name)
		}
	}
	return nil
}

// nameByte reports whether c may be in a pool name: an ASCII letter, a
// digit or '_'.
func nameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
		return true
	}
	return false
}

// Pool is a named work pool: a client (Enqueue, Status, Cancel, ...) and,
// after Start, a candidate dispatcher. It is safe for concurrent use. It does
// not own the producer or the connection behind it.
type Pool struct {
	core
	cfg   Config
	name  string
	life  lifecycle.L
	lease *kv.Lease

	mu    sync.Mutex
	stats DispatcherStats
}

// New opens pool cfg.Name on the producer's connection and prefix, creating
// the pools bucket and the pool's state when they do not exist, and storing
// cfg's non-zero MaxParallelism and RateLimit. Errors: ErrInvalidConfig.
func New(ctx context.Context, p *producer.Producer, cfg Config) (*Pool, error) {
	if err := ValidateName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.MaxParallelism < 0 || cfg.MaxParallelism > MaxParallelismLimit {
		return nil, fmt.Errorf("%w: max parallelism %d: 0-%d", ErrInvalidConfig, cfg.MaxParallelism, MaxParallelismLimit)
	}
	if err := cfg.RateLimit.validate(); err != nil {
		return nil, err
	}
	if cfg.Retry.MaxAttempts < 0 {
		return nil, fmt.Errorf("%w: max attempts %d", ErrInvalidConfig, cfg.Retry.MaxAttempts)
	}
	if cfg.KeyLimit < 0 || cfg.KeyLimit > MaxParallelismLimit {
		return nil, fmt.Errorf("%w: key limit %d: 0-%d", ErrInvalidConfig, cfg.KeyLimit, MaxParallelismLimit)
	}
	if err := cfg.KeyStrategy.validate(); err != nil {
		return nil, err
	}
	if cfg.KeyStrategy != "" && cfg.KeyLimit == 0 {
		return nil, fmt.Errorf("%w: key strategy %s without a key limit", ErrInvalidConfig, cfg.KeyStrategy)
	}
	if err := cfg.KeyRate.validate(); err != nil {
		return nil, err
	}
	if err := cfg.Debounce.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	scfg := engine.Of(p).Streams()
	js := engine.Of(p).JetStream()
	var pl *Pool
	err := watchDenied(ctx, js.Conn(), func(ctx context.Context) error {
		st, err := openStore(ctx, js, scfg)
		if err != nil {
			return err
		}
		pl = &Pool{core: core{p: p, scfg: scfg, st: st, log: cfg.Logger, now: cfg.Now}, cfg: cfg, name: cfg.Name}
		pl.lease = kv.NewLease(js, st.kv, leaseKey(cfg.Name), cfg.ID, cfg.LeaseTTL, cfg.Now)
		return pl.ensureState(ctx)
	})
	if err != nil {
		return nil, err
	}
	return pl, nil
}

// watchDenied runs fn so that a request the server denies (a user without
// the work pools block of docs/permissions.md) ends it at once with the
// server's permissions violation (errors.Is nats.ErrPermissionViolation),
// not at ctx's deadline.
func watchDenied(ctx context.Context, nc *nats.Conn, fn func(ctx context.Context) error) error {
	return natsperm.Do(ctx, nc, fn, "$JS.", "$KV.")
}

func (pl *Pool) ensureState(ctx context.Context) error {
	for range 100 {
		st, rev, ok, err := pl.st.getState(ctx, pl.name)
		if errors.Is(err, jetflow.ErrBadRecord) {
			if err := pl.rebuildState(ctx, rev, err); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if !ok {
			st = &poolState{Max: DefaultMaxParallelism, Running: map[string]slot{}}
		}
		changed := !ok
		if m := pl.cfg.MaxParallelism; m > 0 && st.Max != m {
			st.Max, changed = m, true
		}
		if r := pl.cfg.RateLimit; !r.IsZero() && st.Rate != r {
			st.Rate, changed = r, true
			st.recordStarts(0, 0)
		}
		if n := pl.cfg.KeyLimit; n > 0 {
			strat := pl.cfg.KeyStrategy
			if strat == "" {
				strat = Queue
			}
			if st.KeyLimit != n || st.KeyStrategy != strat {
				st.KeyLimit, st.KeyStrategy, changed = n, strat, true
			}
		}
		if r := pl.cfg.KeyRate; !r.IsZero() && st.KeyRate != r {
			st.KeyRate, changed = r, true
			st.KeyStarts = nil
		}
		if !changed {
			return nil
		}
		if _, err := pl.st.putState(ctx, pl.name, st, rev); errors.Is(err, errConflict) {
			continue
		} else if err != nil {
			return err
		}
		pl.wake()
		return nil
	}
	return fmt.Errorf("pool %s: state keeps changing: %w", pl.name, errConflict)
}

// rebuildState replaces the pool's state record, unreadable at revision
// rev (another client wrote it: why), by one made from this Pool's
// configuration and the item records: every item in progress holds its
// slot again. A slot granted but whose item was not yet in progress is
// lost with the record; the start of such an item goes on all the same.
func (pl *Pool) rebuildState(ctx context.Context, rev uint64, why error) error {
	pl.log.Warn("pool state unreadable: rebuilding it from the items in progress", "pool", pl.name, "error", why)
	st := &poolState{Max: DefaultMaxParallelism, Running: map[string]slot{}, Rate: pl.cfg.RateLimit, KeyRate: pl.cfg.KeyRate}
	if pl.cfg.MaxParallelism > 0 {
		st.Max = pl.cfg.MaxParallelism
	}
	if pl.cfg.KeyLimit > 0 {
		st.KeyLimit, st.KeyStrategy = pl.cfg.KeyLimit, pl.cfg.KeyStrategy
		if st.KeyStrategy == "" {
			st.KeyStrategy = Queue
		}
	}
	keys, err := kv.ListKeys(ctx, pl.st.kv, itemKey(pl.name, "*"))
	if err != nil {
		return fmt.Errorf("pool: list items of %s: %w", pl.name, err)
	}
	pfx := len(itemKey(pl.name, ""))
	for _, k := range keys {
		it, err := pl.st.getItem(ctx, pl.name, k[pfx:])
		if errors.Is(err, jetflow.ErrNotFound) || errors.Is(err, jetflow.ErrBadRecord) || errors.Is(err, jetflow.ErrInvalidRunID) {
			continue
		}
		if err != nil {
			return err
		}
		if it.State == jetflow.InProgress {
			st.Running[it.ID] = slot{Attempt: it.Attempts, Granted: it.Started.UnixNano(), Key: it.Key}
		}
	}
	if _, err := pl.st.putState(ctx, pl.name, st, rev); err != nil && !errors.Is(err, errConflict) {
		return err
	}
	pl.stat(func(s *DispatcherStats) { s.Repaired++ })
	return nil
}

// Name is the pool's name.
func (pl *Pool) Name() string { return pl.name }

// Option tunes one enqueued item.
type Option func(*options)

type options struct {
	id          string
	priority    Priority
	onComplete  *jetflow.Call
	maxAttempts int
	timeout     time.Duration
	key         *string
	debounce    *Debounce
}

// WithID gives the item its id, an idempotency key within the pool.
// Enqueuing an id that exists returns that id and ErrAlreadyExists, never a
// second item. Default: a generated id.
func WithID(id string) Option { return func(o *options) { o.id = id } }

// WithPriority sets the item's priority (default Normal).
func WithPriority(p Priority) Option { return func(o *options) { o.priority = p } }

// WithOnComplete runs c exactly once when the item ends: succeeded (after
// its retries), failed for good, or canceled. c's function receives a
// jetflow.Completion whose Run describes the item (ID is the item id,
// Attempts the attempts made, State/Result/Error the outcome, Pool and
// Priority set) and whose Context is c's args.
func WithOnComplete(c jetflow.Call) Option { return func(o *options) { o.onComplete = &c } }

// WithMaxAttempts overrides the pool's Retry.MaxAttempts for this item.
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// WithTimeout sets the timeout of each attempt (default: the function's).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithKey sets the item's key (e.g. "customer-42"), overriding Config.Key:
// per-key limits, throttles, debounce and fairness group items by it. At
// most MaxKeyLen bytes.
func WithKey(key string) Option { return func(o *options) { o.key = &key } }

// WithDebounce debounces the item with the other items of its key (see
// Debounce), overriding Config.Debounce. WithDebounce(0, 0) turns it off.
func WithDebounce(window, maxWait time.Duration) Option {
	return func(o *options) { o.debounce = &Debounce{Window: window, MaxWait: maxWait} }
}

// Item is the status of one pool item.
type Item struct {
	ID       string `json:"id"`
	Pool     string `json:"pool"`
	Function string `json:"fn"`
	// Key groups the item with the other items of its key (WithKey,
	// Config.Key).
	Key      string          `json:"key,omitempty"`
	Kind     jetflow.Kind    `json:"kind,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Priority Priority        `json:"priority,omitempty"`
	// State is Pending (waiting for a slot, or backing off before a retry),
	// InProgress (holding a slot: started, running), or the outcome:
	// Success, Failed, Canceled.
	State       jetflow.State   `json:"state"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"maxAttempts"`
	Backoff     jetflow.Backoff `json:"backoff,omitzero"`
	Timeout     time.Duration   `json:"timeout,omitempty"`
	// RunID is the run of the current (or last) attempt: Watch it for
	// progress. Attempt n of item id in pool p is run p-id-n.
	RunID     string    `json:"runId,omitempty"`
	Enqueued  time.Time `json:"enqueued"`
	NotBefore time.Time `json:"notBefore,omitzero"`
	// Started is when the current (or last) attempt was granted its slot
	// (and its rate-limit token).
	Started   time.Time `json:"started,omitzero"`
	Completed time.Time `json:"completed,omitzero"`
	Error     string    `json:"error,omitempty"`
	// SupersededBy is the item that replaced this canceled one: the winner
	// of its debounce, or the newer item of its key under CancelInProgress.
	SupersededBy string            `json:"supersededBy,omitempty"`
	Result       json.RawMessage   `json:"result,omitempty"`
	OnComplete   *jetflow.Callback `json:"onComplete,omitempty"`
	// Trace carries the enqueuer's W3C trace context to the attempt runs.
	Trace map[string]string `json:"trace,omitempty"`
	// Revision is the record's KV revision.
	Revision uint64 `json:"-"`
	// revoked, on a pending record, is the slot the dispatcher's periodic
	// check took back before its attempt started: a grant holding that
	// slot must not start the attempt (stored as "revoked", see itemRecord).
	revoked *slotMark
}

// Running reports whether the item holds a slot.
func (it *Item) Running() bool { return it.State == jetflow.InProgress }

// Finished reports whether the item has its outcome.
func (it *Item) Finished() bool { return it.State.Terminal() }

// RunID is the run id of attempt n of item id in pool pool.
func RunID(pool, id string, n int) string {
	return jetflow.DerivedID(pool + "-" + id + "-" + strconv.Itoa(n))
}

// CallbackID is the run id of the on-complete callback of item id.
func CallbackID(pool, id string) string { return jetflow.DerivedID(pool + "-" + id + "-complete") }

// Entry is one item of EnqueueBatch.
type Entry struct {
	Call    jetflow.Call
	Options []Option
}

func (pl *Pool) prepare(ctx context.Context, c jetflow.Call, opts []Option) (*prepared, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	args, err := c.Encode()
	if err != nil {
		return nil, err
	}
	if o.priority < MinPriority || o.priority > MaxPriority {
		return nil, fmt.Errorf("%w: priority %d outside %d..%d", ErrInvalidConfig, o.priority, MinPriority, MaxPriority)
	}
	var key string
	switch {
	case o.key != nil:
		key = *o.key
	case pl.cfg.Key != nil:
		if key, err = pl.cfg.Key(args); err != nil {
			return nil, fmt.Errorf("%w: key of %s: %w", ErrInvalidKey, c.Name, err)
		}
	}
	if len(key) > MaxKeyLen {
		return nil, fmt.Errorf("%w: key of %d bytes, at most %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	if !utf8.ValidString(key) {
		// JSON would store it with U+FFFD in place of each bad byte: two
		// tenants' keys would become one, and share its limits.
		return nil, fmt.Errorf("%w: key %+q is not UTF-8", ErrInvalidKey, key)
	}
	deb := pl.cfg.Debounce
	if o.debounce != nil {
		deb = *o.debounce
	}
	if err := deb.validate(); err != nil {
		return nil, err
	}
	id := o.id
	if id == "" {
		id = nuid.Next()
	} else if err := jetflow.ValidateRunID(id); err != nil {
		return nil, err
	}
	kind := c.Kind
	if kind == "" {
		kind = jetflow.Retryable
	}
	max := pl.cfg.Retry.MaxAttempts
	if o.maxAttempts > 0 {
		max = o.maxAttempts
	}
	if max <= 0 {
		max = 5
		if kind == jetflow.AtMostOnce {
			max = 1
		}
	}
	it := &Item{
		ID: id, Pool: pl.name, Function: c.Name, Key: key, Kind: kind, Args: args, Priority: o.priority,
		State: jetflow.Pending, MaxAttempts: max, Backoff: pl.cfg.Retry.Backoff, Timeout: o.timeout,
		Enqueued: pl.now().UTC(), Trace: telemetry.Inject(ctx),
	}
	if o.onComplete != nil {
		cargs, err := o.onComplete.Encode()
		if err != nil {
			return nil, fmt.Errorf("on-complete: %w", err)
		}
		it.OnComplete = &jetflow.Callback{Function: o.onComplete.Name, Args: cargs}
	}
	return &prepared{it: it, deb: deb}, nil
}

// prepared is an item ready to be queued.
type prepared struct {
	it  *Item
	deb Debounce
}

// entry is the item's first queue entry.
func (p *prepared) entry() queued {
	q := queued{Priority: p.it.Priority, Ready: p.it.Enqueued.UnixNano(), Attempt: 1, Key: p.it.Key, Item: p.it}
	if !p.deb.IsZero() {
		q.Deb = &debounceEntry{Window: p.deb.Window, MaxWait: p.deb.MaxWait}
	}
	return q
}

// Enqueue adds an item to the pool and returns its id once it is durable.
// It starts when the pool has a free slot and its rate limit allows, in
// priority order. Errors: jetflow.ErrInvalidName, jetflow.ErrBadArgs,
// jetflow.ErrInvalidRunID, ErrInvalidConfig (priority),
// producer.ErrArgsTooLarge, ErrAlreadyExists (with the id).
func (pl *Pool) Enqueue(ctx context.Context, c jetflow.Call, opts ...Option) (string, error) {
	var id string
	err := watchDenied(ctx, pl.st.nc, func(ctx context.Context) error {
		var err error
		id, err = pl.enqueue(ctx, c, opts)
		return err
	})
	return id, err
}

func (pl *Pool) enqueue(ctx context.Context, c jetflow.Call, opts []Option) (string, error) {
	pr, err := pl.prepare(ctx, c, opts)
	if err != nil {
		return "", err
	}
	it := pr.it
	if err := pl.checkSize(len(it.Args)); err != nil {
		return "", err
	}
	// One write: the queue entry holds the new item. It is refused if the
	// item waits already; an item that has started has a record instead.
	seq, err := pl.st.putQueued(ctx, pl.name, it.ID, pr.entry())
	if errors.Is(err, ErrAlreadyExists) {
		return it.ID, err
	}
	if err != nil {
		return "", err
	}
	if cur, err := pl.st.getItem(ctx, pl.name, it.ID); err == nil {
		if cur.Enqueued.Equal(it.Enqueued) && cur.Function == it.Function {
			return it.ID, nil // ours, started already
		}
		if err := pl.st.deleteMsg(ctx, seq); err != nil {
			// Dropped as stale by the dispatcher when it comes up.
			pl.log.Debug("remove a duplicate queue entry", "pool", pl.name, "item", it.ID, "error", err)
		}
		return it.ID, fmt.Errorf("item %s: %w", it.ID, ErrAlreadyExists)
	} else if !errors.Is(err, jetflow.ErrNotFound) {
		// The entry is durable: if the item existed, the dispatcher drops it.
		pl.log.Warn("enqueue: check for an existing item", "pool", pl.name, "item", it.ID, "error", err)
	}
	return it.ID, nil
}

func (pl *Pool) checkSize(n int) error {
	if max := pl.st.nc.MaxPayload(); max > 0 && int64(2*n)+8192 > max {
		return fmt.Errorf("%w: %d bytes of args, server max payload %d", producer.ErrArgsTooLarge, n, max)
	}
	return nil
}

// EnqueueBatch adds up to MaxBatch items at once, all or none (one atomic
// JetStream batch), and returns their ids in order. An item whose WithID
// exists fails the whole call with ErrAlreadyExists (naming the id) and
// nothing is written. Errors also: ErrTooManyItems, ErrBatchFailed,
// producer.ErrArgsTooLarge, and those of Enqueue.
func (pl *Pool) EnqueueBatch(ctx context.Context, entries []Entry) ([]string, error) {
	var ids []string
	err := watchDenied(ctx, pl.st.nc, func(ctx context.Context) error {
		var err error
		ids, err = pl.enqueueBatch(ctx, entries)
		return err
	})
	return ids, err
}

func (pl *Pool) enqueueBatch(ctx context.Context, entries []Entry) ([]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	if len(entries) > MaxBatch {
		return nil, fmt.Errorf("%w: %d > %d", ErrTooManyItems, len(entries), MaxBatch)
	}
	items := make([]*Item, len(entries))
	preps := make([]*prepared, len(entries))
	seen := make(map[string]bool, len(entries))
	total := 0
	for i, e := range entries {
		pr, err := pl.prepare(ctx, e.Call, e.Options)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		it := pr.it
		preps[i] = pr
		if seen[it.ID] {
			return nil, fmt.Errorf("item %d: %s twice in one batch: %w", i, it.ID, ErrAlreadyExists)
		}
		if err := pl.checkSize(len(it.Args)); err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		seen[it.ID] = true
		total += len(it.Args)
		items[i] = it
	}
	if total > producer.MaxBatchArgs {
		return nil, fmt.Errorf("%w: %d bytes of args in one call, limit %d", producer.ErrArgsTooLarge, total, producer.MaxBatchArgs)
	}
	// Items that started already have a record (items still waiting are
	// caught by the batch's compare-and-swap on their queue entries).
	if err := pl.checkNew(ctx, items); err != nil {
		return nil, err
	}
	msgs := make([]*nats.Msg, len(items))
	for i, it := range items {
		m, err := pl.st.queueMsg(pl.name, it.ID, preps[i].entry())
		if err != nil {
			return nil, err
		}
		msgs[i] = m
	}
	if _, err := jsbatch.Publish(ctx, pl.st.nc, msgs); err != nil {
		if kv.IsWrongSequence(err) {
			for _, it := range items {
				if _, _, gerr := pl.st.getQueued(ctx, pl.name, it.ID); gerr == nil {
					return nil, fmt.Errorf("item %s: %w", it.ID, ErrAlreadyExists)
				}
			}
		}
		return nil, fmt.Errorf("%w: %w", ErrBatchFailed, err)
	}
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return ids, nil
}

// checkNew returns ErrAlreadyExists if one of items has a record.
func (pl *Pool) checkNew(ctx context.Context, items []*Item) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, 32)
	)
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := pl.st.getItem(ctx, pl.name, it.ID)
			switch {
			case err == nil:
				err = fmt.Errorf("item %s: %w", it.ID, ErrAlreadyExists)
			case errors.Is(err, jetflow.ErrNotFound):
				return
			}
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return first
}

// Status returns the item's record: a pending item's as enqueued, a started
// one's as last written. Errors: jetflow.ErrNotFound (never enqueued, or
// finished longer ago than the retention period), jetflow.ErrInvalidRunID.
func (pl *Pool) Status(ctx context.Context, id string) (*Item, error) {
	var it *Item
	err := watchDenied(ctx, pl.st.nc, func(ctx context.Context) error {
		var err error
		it, err = pl.status(ctx, id)
		return err
	})
	return it, err
}

func (pl *Pool) status(ctx context.Context, id string) (*Item, error) {
	it, err := pl.st.getItem(ctx, pl.name, id)
	if !errors.Is(err, jetflow.ErrNotFound) {
		return it, err
	}
	q, _, qerr := pl.st.getQueued(ctx, pl.name, id)
	if qerr == nil && q.Item != nil {
		return q.Item, nil
	}
	if qerr == nil {
		// A retry's entry whose record was just removed: gone.
		return nil, err
	}
	if errors.Is(qerr, jetflow.ErrNotFound) {
		// Started between the two reads.
		return pl.st.getItem(ctx, pl.name, id)
	}
	return nil, qerr
}

// Cancel cancels item id. A pending item never starts; a running one has its
// run canceled (its handler's context ends with cause jetflow.ErrCanceled)
// and gives its slot back. The item's on-complete callback runs with
// Canceled. Canceling a finished item is a no-op. Errors:
// jetflow.ErrNotFound, jetflow.ErrInvalidRunID, jetflow.ErrBadRecord (the
// item's record, or its queue entry, was written by another client and
// cannot be read; such a queue entry is recorded as a failed run, the
// dead letter the error names, and removed from the queue, so that it is
// reported once).
func (pl *Pool) Cancel(ctx context.Context, id string) error {
	return watchDenied(ctx, pl.st.nc, func(ctx context.Context) error { return pl.cancel(ctx, id, cancelCause{}) })
}

// cancelCause says why the pool itself canceled an item (a key's strategy,
// a debounce): the reason is appended to the item's error, and by names the
// item that superseded it.
type cancelCause struct {
	reason string
	by     string
}

func (c cancelCause) apply(it *Item) {
	it.Error = jetflow.ErrCanceled.Error()
	if c.reason != "" {
		it.Error += ": " + c.reason
	}
	it.SupersededBy = c.by
}

func (pl *Pool) cancel(ctx context.Context, id string, why cancelCause) error {
	var prev jetflow.State
	var it *Item
	for {
		var err error
		it, err = pl.st.getItem(ctx, pl.name, id)
		if errors.Is(err, jetflow.ErrNotFound) {
			// Never started: the item is in its queue entry. Writing its
			// record as canceled keeps the dispatcher from starting it.
			q, seq, qerr := pl.st.getQueued(ctx, pl.name, id)
			if errors.Is(qerr, jetflow.ErrBadRecord) {
				// Another client's entry: recorded as a dead letter and
				// removed, reported once.
				if err := pl.deadLetterQueued(ctx, id); err != nil {
					return err
				}
				continue
			}
			if qerr != nil {
				if errors.Is(qerr, jetflow.ErrNotFound) {
					if _, gerr := pl.st.getItem(ctx, pl.name, id); gerr == nil {
						continue // started meanwhile
					}
				}
				return qerr
			}
			if q.Item == nil {
				continue
			}
			c := *q.Item
			c.State, c.Completed = jetflow.Canceled, pl.now().UTC()
			why.apply(&c)
			if err := pl.st.writeItem(ctx, &c, 0); errors.Is(err, ErrAlreadyExists) {
				continue // started meanwhile
			} else if err != nil {
				return err
			}
			if err := pl.st.deleteMsg(ctx, seq); err != nil {
				pl.log.Debug("remove queue entry of canceled item; the dispatcher will", "pool", pl.name, "item", id, "error", err)
			}
			return pl.ensureCallback(ctx, &c)
		}
		if err != nil {
			return err
		}
		if it.State.Terminal() {
			return nil
		}
		prev = it.State
		it.State = jetflow.Canceled
		it.Completed = pl.now().UTC()
		why.apply(it)
		err = pl.st.writeItem(ctx, it, it.Revision)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	if prev == jetflow.InProgress && it.RunID != "" {
		if err := pl.cancelRun(ctx, it); err != nil {
			return err
		}
		return pl.ensureCallback(ctx, it)
	}
	// A retry waiting for its backoff: drop its queue entry (the dispatcher
	// would drop it too when it comes up).
	if _, seq, err := pl.st.getQueued(ctx, pl.name, id); err == nil {
		if err := pl.st.deleteMsg(ctx, seq); err != nil {
			pl.log.Debug("remove the queue entry of a canceled retry; the dispatcher drops it", "pool", pl.name, "item", id, "error", err)
		}
	}
	return pl.ensureCallback(ctx, it)
}

// cancelRun cancels the run of a running item that was just canceled. If
// the dispatcher has not created the run yet, Cancel writes it first, as
// canceled, so that it never starts. The dispatcher gives the slot back when
// it sees the item canceled.
func (pl *Pool) cancelRun(ctx context.Context, it *Item) error {
	err := pl.p.Cancel(ctx, it.RunID)
	if !errors.Is(err, jetflow.ErrNotFound) {
		// The run's on-complete (the pool's done function) gives the
		// slot back and runs the item's callback.
		return err
	}
	now := pl.now().UTC()
	tomb := engine.CancelRun(&jetflow.Run{
		ID: it.RunID, Name: it.Function, Kind: it.Kind, Args: it.Args,
		ScheduledTime: now, CreationTime: now, Pool: pl.name, Priority: int(it.Priority), MaxAttempts: 1,
	}, now)
	if _, err := engine.Of(pl.p).Runs().Write(ctx, engine.Cancel, engine.None, tomb, 0); err != nil {
		if errors.Is(err, kv.ErrExists) {
			// Created meanwhile: cancel it.
			return pl.p.Cancel(ctx, it.RunID)
		}
		return err
	}
	return nil
}

// CancelAll cancels every item of the pool that is pending or running when
// it is called, and returns how many it canceled: the pending ones first, so
// that the slots the running ones give back start none of them. An item
// that starts meanwhile (a slot freed by an item ending) is canceled as a
// running one. Items enqueued while it runs may escape it.
//
// A queue entry the pool cannot read (another client wrote it: not JSON,
// an item of another id or pool, a key that is no item id) is resolved
// once: recorded as a failed run (the engine's dead letter, id
// dlq-<pools stream>-<revision>, its value as the args, the reason as the
// error) and removed from the queue. The call reports it with
// jetflow.ErrBadRecord naming the dead letter, after canceling the
// others; the next CancelAll does not meet it again.
func (pl *Pool) CancelAll(ctx context.Context) (int, error) {
	var pending, unreadable []string
	keys, err := kv.ListKeys(ctx, pl.st.kv, queueKey(pl.name, "*"))
	if err != nil {
		return 0, fmt.Errorf("pool: list queue of %s: %w", pl.name, err)
	}
	pfx := len(queueKey(pl.name, ""))
	for _, k := range keys {
		if jetflow.ValidateRunID(k[pfx:]) != nil {
			unreadable = append(unreadable, k[pfx:]) // no item has that id
			continue
		}
		pending = append(pending, k[pfx:])
	}
	st, _, ok, err := pl.st.getState(ctx, pl.name)
	if err != nil {
		return 0, err
	}
	var bad badReports
	for _, id := range unreadable {
		bad.add(pl.deadLetterQueued(ctx, id))
	}
	n, err := pl.cancelEach(ctx, pending, &bad)
	if err != nil || !ok {
		return n, errors.Join(err, bad.err())
	}
	running := make([]string, 0, len(st.Running))
	for id := range st.Running {
		if !slices.Contains(pending, id) {
			running = append(running, id)
		}
	}
	m, err := pl.cancelEach(ctx, running, &bad)
	return n + m, errors.Join(err, bad.err())
}

// badReports gathers the unreadable records a CancelAll met: the first
// maxBadReports reports, and how many there were.
type badReports struct {
	mu   sync.Mutex
	errs []error
	n    int
}

const maxBadReports = 10

// add notes err if it is a report of an unreadable record, and returns
// whether it was.
func (b *badReports) add(err error) bool {
	if !errors.Is(err, jetflow.ErrBadRecord) {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	if len(b.errs) < maxBadReports {
		b.errs = append(b.errs, err)
	}
	return true
}

func (b *badReports) err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	errs := b.errs
	if more := b.n - len(errs); more > 0 {
		errs = append(errs[:len(errs):len(errs)], fmt.Errorf("%w: %d more", jetflow.ErrBadRecord, more))
	}
	return errors.Join(errs...)
}

// cancelEach cancels the items ids (32 at a time) and returns how many it
// canceled; the unreadable records it meets go to bad.
func (pl *Pool) cancelEach(ctx context.Context, ids []string, bad *badReports) (int, error) {
	var (
		mu    sync.Mutex
		n     int
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 32)
	)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			it, err := pl.st.getItem(ctx, pl.name, id)
			if err == nil && it.State.Terminal() {
				return
			}
			if err == nil || errors.Is(err, jetflow.ErrNotFound) {
				err = pl.Cancel(ctx, id)
			}
			if bad.add(err) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				n++
			case errors.Is(err, jetflow.ErrNotFound):
			case first == nil:
				first = err
			}
		}()
	}
	wg.Wait()
	return n, first
}

// SetMaxParallelism changes the pool's max parallelism at run time, for
// every dispatcher: 0 pauses the pool (running items finish, none start).
// Lowering it does not stop running items; new ones start when the running
// count is below the new limit. Errors: ErrInvalidConfig.
func (pl *Pool) SetMaxParallelism(ctx context.Context, n int) error {
	if n < 0 || n > MaxParallelismLimit {
		return fmt.Errorf("%w: max parallelism %d: 0-%d", ErrInvalidConfig, n, MaxParallelismLimit)
	}
	_, err := pl.st.updateState(ctx, pl.name, func(st *poolState) bool {
		if st.Max == n {
			return false
		}
		st.Max = n
		return true
	})
	pl.wake()
	return err
}

// SetRateLimit changes the pool's rate limit at run time; the zero value
// removes it. The window keeps the starts already recorded.
func (pl *Pool) SetRateLimit(ctx context.Context, r RateLimit) error {
	if err := r.validate(); err != nil {
		return err
	}
	_, err := pl.st.updateState(ctx, pl.name, func(st *poolState) bool {
		if st.Rate == r {
			return false
		}
		st.Rate = r
		st.recordStarts(0, 0)
		return true
	})
	pl.wake()
	return err
}

// SetKeyLimit changes the pool's per-key limit and strategy at run time,
// for every dispatcher; n 0 removes the limit. Lowering it stops no
// running item. Errors: ErrInvalidConfig.
func (pl *Pool) SetKeyLimit(ctx context.Context, n int, s Strategy) error {
	if n < 0 || n > MaxParallelismLimit {
		return fmt.Errorf("%w: key limit %d: 0-%d", ErrInvalidConfig, n, MaxParallelismLimit)
	}
	if err := s.validate(); err != nil {
		return err
	}
	if s == "" || n == 0 {
		s = Queue
	}
	_, err := pl.st.updateState(ctx, pl.name, func(st *poolState) bool {
		if st.KeyLimit == n && st.KeyStrategy == s {
			return false
		}
		st.KeyLimit, st.KeyStrategy = n, s
		return true
	})
	pl.wake()
	return err
}

// SetKeyRate changes the pool's per-key rate limit at run time; the zero
// value removes it. Errors: ErrInvalidConfig.
func (pl *Pool) SetKeyRate(ctx context.Context, r RateLimit) error {
	if err := r.validate(); err != nil {
		return err
	}
	_, err := pl.st.updateState(ctx, pl.name, func(st *poolState) bool {
		if st.KeyRate == r {
			return false
		}
		st.KeyRate = r
		st.KeyStarts = nil
		return true
	})
	pl.wake()
	return err
}

// Info is the pool's stored state.
type Info struct {
	Name           string
	MaxParallelism int
	RateLimit      RateLimit
	KeyLimit       int
	KeyStrategy    Strategy
	KeyRate        RateLimit
	// Running are the ids of the items holding a slot. The dispatcher gives
	// the slots of ended items back: while none runs, they stay listed.
	Running []string
	// RunningByKey counts the slots held per key (items without a key
	// under "").
	RunningByKey map[string]int
}

// Info reads the pool's state. Errors: ErrNoPool.
func (pl *Pool) Info(ctx context.Context) (Info, error) {
	st, _, ok, err := pl.st.getState(ctx, pl.name)
	if err != nil {
		return Info{}, err
	}
	if !ok {
		return Info{}, fmt.Errorf("pool %s: %w", pl.name, ErrNoPool)
	}
	inf := Info{Name: pl.name, MaxParallelism: st.Max, RateLimit: st.Rate, KeyLimit: st.KeyLimit, KeyStrategy: st.KeyStrategy,
		KeyRate: st.KeyRate, RunningByKey: map[string]int{}}
	for id, s := range st.Running {
		inf.Running = append(inf.Running, id)
		inf.RunningByKey[s.Key]++
	}
	slices.Sort(inf.Running)
	return inf, nil
}

func (pl *Pool) wake() { pl.core.wake(pl.name) }
