package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/cronspec"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Schedule says when a cron fires: an interval, an hourly, daily, weekly
// or monthly time, or a cron expression, evaluated in an IANA time zone
// (In; default UTC). Build one with Interval, Hourly, Daily, Weekly,
// Monthly, Cron or ParseSchedule. Its String form ("every 30s",
// "daily 09:00 (Europe/London)", "cron 0 9 * * 1-5 (America/New_York)")
// is accepted back by ParseSchedule.
//
// Accepted cron expressions: 5 fields (minute hour day-of-month month
// day-of-week), 6 fields with seconds first, and @yearly, @annually,
// @monthly, @weekly, @daily, @midnight, @hourly. Fields take numbers, *,
// ranges a-b, steps */n, a/n and a-b/n, lists, month names jan-dec and day
// names sun-sat (0 or 7 is Sunday), ? in the day fields, L and nW in
// day-of-month, nL and n#k in day-of-week. Year fields, @every and @reboot
// are refused with an error naming the field.
//
// Daylight saving, in the schedule's zone: a wall-clock time skipped by a
// spring-forward transition fires once, shifted forward by the gap (02:30
// fires at 03:30); a wall-clock time repeated by a fall-back transition
// fires once, at its first occurrence. Intervals are fixed periods of
// absolute time and ignore the zone.
//
// A schedule that never fires within 30 years ("0 0 30 2 *", "0 9 31 4 *")
// is refused with ErrNoFireTime; "0 9 29 2 *" fires in leap years only.
type Schedule = cronspec.Spec

// ScheduleKind is the kind of a Schedule: "interval", "hourly", "daily",
// "weekly", "monthly" or "cron".
type ScheduleKind = cronspec.Kind

// Interval fires every d (a whole number of seconds), in absolute time.
// A cron with an interval schedule first fires when it is registered.
func Interval(d time.Duration) Schedule { return cronspec.Interval(d) }

// Hourly fires every hour at minute, of the zone's wall clock (in
// Asia/Kathmandu, +05:45, Hourly(30) fires at :45 UTC). In a zone with
// daylight saving the hour repeated when clocks go back fires once, so
// that night one real hour has no fire; in UTC (the default) or with an
// Interval every real hour has one.
func Hourly(minute int) Schedule { return cronspec.Hourly(minute) }

// Daily fires every day at hour:minute.
func Daily(hour, minute int) Schedule { return cronspec.Daily(hour, minute) }

// Weekly fires every wd at hour:minute.
func Weekly(wd time.Weekday, hour, minute int) Schedule { return cronspec.Weekly(wd, hour, minute) }

// Monthly fires on day (1-31) of every month at hour:minute. A month
// without that day is skipped: Monthly(31, ...) does not fire in April.
func Monthly(day, hour, minute int) Schedule { return cronspec.Monthly(day, hour, minute) }

// Cron fires on a cron expression (see Schedule for the accepted forms).
func Cron(expr string) Schedule { return cronspec.Cron(expr) }

// ParseSchedule reads the text form of a schedule: "every 30s",
// "hourly 15", "daily 9:30", "weekly mon 9:00", "monthly 31 9:00",
// "cron 0 9 * * 1-5" or a bare cron expression, optionally followed by a
// zone in parentheses: "daily 9:30 (America/New_York)".
func ParseSchedule(text string) (Schedule, error) { return cronspec.Parse(text) }

// Errors of schedules, matched with errors.Is. Every one of them also
// matches ErrInvalidSchedule, and, when returned by Register or Define,
// ErrInvalidCron.
var (
	ErrInvalidSchedule  = cronspec.ErrInvalidSpec
	ErrUnknownZone      = cronspec.ErrUnknownZone
	ErrIntervalTooShort = cronspec.ErrIntervalTooShort
	ErrNoFireTime       = cronspec.ErrNoFireTime
)

// Errors of the cron API.
var (
	// ErrInvalidCron: a cron definition that cannot be registered (bad
	// name, schedule, function or arguments).
	ErrInvalidCron = errors.New("scheduler: invalid cron")
	// ErrCronExists: a cron with that name exists (or is defined twice in code).
	ErrCronExists = errors.New("scheduler: cron already exists")
	// ErrCronNotFound: no cron with that name. It also matches jetflow.ErrNotFound.
	ErrCronNotFound = errors.New("scheduler: cron not found")
	// ErrBadCronRecord: a stored cron that cannot be used (written by
	// hand or by something else: invalid JSON, wrong types, another
	// cron's name, an invalid schedule, an enabled cron without a next
	// time, or a next time that its schedule cannot have). It also
	// matches jetflow.ErrBadRecord. Get, Pause and Resume return it;
	// Delete removes the record, and a code-defined cron of that name
	// replaces it. The evaluator logs it, drops its index entry and goes
	// on with the other crons (TickStats.Bad).
	ErrBadCronRecord = kv.ErrBadCronRecord
)

func notFound(name string) error {
	return fmt.Errorf("%w: %q (%w)", ErrCronNotFound, name, jetflow.ErrNotFound)
}

// CronOrigin says where a cron was defined.
type CronOrigin = kv.CronOrigin

const (
	// OriginCode: defined in code (CronConfig.Crons) and synced by the
	// leader at the start of its term; removed when it leaves the code.
	OriginCode = kv.CronOriginCode
	// OriginRuntime: registered at run time with Register; stays until
	// deleted.
	OriginRuntime = kv.CronOriginRuntime
)

// CronDef defines a cron: a unique name, a schedule and the call it makes.
//
//	scheduler.CronDef{
//		Name:     "send-daily-digest",
//		Schedule: scheduler.Daily(9, 0),
//		TZ:       "Europe/Paris",
//		Call:     SendDigest.With(DigestArgs{List: "all"}),
//	}
type CronDef struct {
	// Name is 1-128 ASCII letters, digits, '_' or '-', unique.
	Name string
	// Schedule says when it fires.
	Schedule Schedule
	// TZ, if set, is the IANA zone of the schedule (the same as
	// Schedule.In(TZ)). Default UTC. Intervals ignore it.
	TZ string
	// Call is the function and its static arguments, from Function.With.
	Call jetflow.Call
	// Overlap lets a fire start while the cron's previous run is still
	// pending or running. Default false: that fire is skipped, logged and
	// counted in CronInfo.Skipped; except while a leader catches up after a
	// failover or a slow tick (the fire is evaluated more than a second
	// late, or right after one that was): then a previous run that has not
	// started yet is waited for, within Grace, and the fire is not lost.
	Overlap bool
	// CatchUp is how many fires missed while no scheduler ran (older than
	// CronConfig.Grace when the scheduler comes back) are replayed, oldest
	// first and one at a time unless Overlap is set; at most MaxCatchUp.
	// Default 0: missed fires are skipped (counted in CronInfo.Missed) and
	// the cron continues at its next time.
	CatchUp int
}

// MaxCatchUp bounds CronDef.CatchUp: the missed fires are counted when
// the scheduler comes back, in the evaluation of the cron, and a
// per-second cron down a month would otherwise count millions of them
// while every other cron waits.
const MaxCatchUp = kv.MaxCatchUp

// CronRun is the last run a cron started.
type CronRun = kv.CronRun

// CronInfo is what a cron is and what it did: its definition, state and
// last run. It is kv.CronInfo, the reader's type, so that the dashboard and
// the CLI read crons without the scheduler.
type CronInfo = kv.CronInfo

// CronConfig configures a Crons. Every zero field takes the default named.
type CronConfig struct {
	// Streams names subjects and buckets (default prefix "jetflow").
	Streams streams.Config
	// Logger. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Crons are the crons defined in code. The leader makes the stored set
	// of code-defined crons equal to this one at the start of its term:
	// new ones are added, changed ones updated (a changed schedule starts
	// again from now), ones no longer here deleted. Pausing survives a
	// redeploy. Nil leaves code-defined crons alone (a scheduler that does
	// not own them); a non-nil empty slice deletes them all. While two
	// versions run side by side (a rolling deploy), the set of the
	// scheduler holding the lease is the one in force.
	Crons []CronDef
	// MinInterval is the shortest time allowed between two fires of one
	// cron. Default 1 s.
	MinInterval time.Duration
	// PageSize is how many due crons one evaluation step reads; when more
	// are due the next page is read at once. Default 100.
	PageSize int
	// Parallel bounds the crons of one page fired at once. Default 16.
	Parallel int
	// Grace is how late a fire may start and still be on time. Older fires
	// were missed (the scheduler was down) and follow the cron's CatchUp
	// policy. It covers a slow evaluation or a leader failover. Default 1 min.
	Grace time.Duration
}

func (c CronConfig) withDefaults() CronConfig {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MinInterval <= 0 {
		c.MinInterval = time.Second
	}
	if c.PageSize <= 0 {
		c.PageSize = 100
	}
	if c.Parallel <= 0 {
		c.Parallel = 16
	}
	if c.Grace <= 0 {
		c.Grace = time.Minute
	}
	c.Streams = c.Streams.WithDefaults()
	return c
}

// Crons manages cron jobs in the crons bucket: registration at run time,
// the code-defined set, and the evaluator that fires them. It is safe for
// concurrent use. A Scheduler's leader runs the evaluator (Scheduler.Crons);
// any process may use the rest of the API (NewCrons).
//
// Each fire starts a run through the producer, exactly like RunAt, so it
// has a normal run record. Its id is CronRunID(name, scheduled time): every
// scheduler computes the same one, and the producer refuses a second run
// with an id that exists, so with any number of schedulers, a leader
// failover or a leader stopped between starting a run and recording it,
// each scheduled time of each cron starts at most one run. The cron's state
// (next time, last run, counters) is then advanced by compare-and-swap.
//
// The next time is computed from the previous scheduled time, never from
// now, so crons do not drift. A fire whose time came while the cron's
// previous run is still pending or running is skipped, logged and counted
// (CronInfo.Skipped), unless the cron sets Overlap. A fire is on time up to
// CronConfig.Grace after its time (a slow tick, a failover: the overdue
// fires then go one after the other, each after the previous run ended, none
// skipped because the one just fired has not started); older fires
// were missed while no scheduler ran: they are skipped and counted
// (CronInfo.Missed), or, with CatchUp n, the first n of them are replayed
// in order. Resuming a paused cron computes its next time from now.
//
// The evaluator reads an index keyed by due second (see the key layout in
// cron_store.go), a page of PageSize entries at a time: its cost follows
// the crons due, not the crons registered.
type Crons struct {
	cfg   CronConfig
	js    jetstream.JetStream
	p     *producer.Producer
	store *kv.Store // reads
	log   *slog.Logger
	now   func() time.Time
	code  []cronRecord // validated code-defined crons, nil if not managed

	openMu sync.Mutex
	kv     jetstream.KeyValue
	st     jetstream.Stream

	evalMu  sync.Mutex // one evaluation at a time
	ev      evalState
	running atomic.Bool
	synced  atomic.Bool
	seeded  atomic.Bool // the watermark exists
	drift   drift       // differences of the code-defined crons warned of

	// afterFire, if set (tests), is called after a fire's run exists and
	// before the cron's state is advanced.
	afterFire func(ctx context.Context, name string, t time.Time)
}

// NewCrons returns a cron manager on js. It provisions jetflow's streams
// and buckets (idempotent) and validates the code-defined crons. It does
// not own the connection.
// Errors: ErrInvalidCron, ErrCronExists (a name defined twice).
func NewCrons(ctx context.Context, js jetstream.JetStream, cfg CronConfig) (*Crons, error) {
	p, err := producer.New(ctx, js, producer.Config{Streams: cfg.Streams, Logger: cfg.Logger, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	return newCrons(js, p, cfg)
}

func newCrons(js jetstream.JetStream, p *producer.Producer, cfg CronConfig) (*Crons, error) {
	cfg = cfg.withDefaults()
	c := &Crons{cfg: cfg, js: js, p: p, store: engine.Of(p).Store(), log: cfg.Logger, now: cfg.Now}
	if cfg.Crons != nil {
		c.code = make([]cronRecord, 0, len(cfg.Crons))
		seen := map[string]bool{}
		for _, d := range cfg.Crons {
			r, err := c.recordOf(d, OriginCode)
			if err != nil {
				return nil, err
			}
			if seen[r.Name] {
				return nil, fmt.Errorf("%w: %q is defined twice", ErrCronExists, r.Name)
			}
			seen[r.Name] = true
			c.code = append(c.code, r)
		}
	}
	return c, nil
}

// Crons returns the scheduler's cron manager. The scheduler's leader runs
// its evaluator. Unless ConfigureCrons was called, it uses the scheduler's
// streams, logger and clock with default settings and no code-defined crons.
func (s *Scheduler) Crons() *Crons {
	s.cronsMu.Lock()
	defer s.cronsMu.Unlock()
	if s.crons == nil {
		s.crons, _ = newCrons(s.js, s.p, CronConfig{Streams: s.cfg.Streams, Logger: s.log, Now: s.now})
	}
	return s.crons
}

// ConfigureCrons sets the scheduler's cron configuration: the one place
// where code-defined crons (CronConfig.Crons) and the evaluator's settings
// are given. Call it before Start; the leader syncs the code-defined crons
// at the start of each term. Streams, Logger and Now default to the
// scheduler's. It returns the scheduler's Crons (as Scheduler.Crons does
// from then on). Errors: ErrInvalidCron, ErrCronExists.
func (s *Scheduler) ConfigureCrons(cfg CronConfig) (*Crons, error) {
	if cfg.Streams == (streams.Config{}) {
		cfg.Streams = s.cfg.Streams
	}
	if cfg.Logger == nil {
		cfg.Logger = s.log
	}
	if cfg.Now == nil {
		cfg.Now = s.now
	}
	c, err := newCrons(s.js, s.p, cfg)
	if err != nil {
		return nil, err
	}
	s.cronsMu.Lock()
	s.crons = c
	s.cronsMu.Unlock()
	return c, nil
}

// cronLoop evaluates crons for one leadership term; lead() runs it next to
// the repair sweep. It returns when ctx ends.
func (s *Scheduler) cronLoop(ctx context.Context) { s.Crons().run(ctx) }

// ValidateCronName checks a cron name: 1-128 ASCII letters, digits, '_' or
// '-' (kv.ValidCronName). Errors: ErrInvalidCron.
func ValidateCronName(name string) error {
	switch {
	case len(name) == 0 || len(name) > 128:
		return fmt.Errorf("%w: name %s must be 1-128 bytes", ErrInvalidCron, quoteShort(name))
	case !kv.ValidCronName(name):
		return fmt.Errorf("%w: name %q: names are letters, digits, '_' and '-'", ErrInvalidCron, name)
	}
	return nil
}

// quoteShort quotes s, or its first 64 bytes and its length when longer:
// an error does not repeat a 10 KB name.
func quoteShort(s string) string {
	if len(s) <= 128 {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:64], len(s))
}

// CronRunID is the id of the run a cron starts for scheduled time t:
// "cron-<name>-<unix seconds>". Every scheduler computes the same id, so
// a time fires at most once whatever happens to the leader.
func CronRunID(name string, t time.Time) string { return engine.CronRunID(name, t) }

// ParseCronRunID splits a cron run id into the cron's name and the
// scheduled time; ok is false for other ids.
func ParseCronRunID(id string) (name string, t time.Time, ok bool) { return engine.ParseCronRunID(id) }

// Preview returns the first n fire times of a cron with schedule s
// registered at from, exactly as the evaluator fires them (an interval
// fires at registration, truncated to the second, then every period;
// other kinds at their next time after from). It shares the evaluator's
// code path, daylight-saving rules included.
func Preview(s Schedule, from time.Time, n int) ([]time.Time, error) {
	if n <= 0 {
		return nil, nil
	}
	first, err := firstFire(s, from)
	if err != nil {
		return nil, err
	}
	rest, err := s.NextN(first, n-1)
	return append([]time.Time{first}, rest...), err
}

// firstFire is the first fire time of a cron registered (or whose schedule
// changed) at now.
func firstFire(s Schedule, now time.Time) (time.Time, error) {
	if s.Kind == cronspec.KindInterval {
		if err := s.Validate(0); err != nil {
			return time.Time{}, err
		}
		return now.UTC().Truncate(time.Second), nil
	}
	return s.Next(now)
}

// validateSchedule validates s (cronspec.ValidateCached: crons
// registered by the thousand usually share a few schedules).
func validateSchedule(s Schedule, minInterval time.Duration) error {
	return cronspec.ValidateCached(s, minInterval)
}

// recordOf validates d and returns its stored form, without state.
func (c *Crons) recordOf(d CronDef, origin CronOrigin) (cronRecord, error) {
	if err := ValidateCronName(d.Name); err != nil {
		return cronRecord{}, err
	}
	spec := d.Schedule
	if d.TZ != "" {
		if spec.TZ != "" && spec.TZ != d.TZ {
			return cronRecord{}, fmt.Errorf("%w: %s: TZ %q and schedule zone %q differ", ErrInvalidCron, d.Name, d.TZ, spec.TZ)
		}
		spec.TZ = d.TZ
	}
	if spec.TZ == "UTC" {
		spec.TZ = ""
	}
	if spec.Kind == cronspec.KindInterval {
		spec.TZ = ""
	}
	if err := validateSchedule(spec, c.cfg.MinInterval); err != nil {
		return cronRecord{}, fmt.Errorf("%w: %s: %w", ErrInvalidCron, d.Name, err)
	}
	if d.CatchUp < 0 || d.CatchUp > MaxCatchUp {
		return cronRecord{}, fmt.Errorf("%w: %s: CatchUp %d out of range 0-%d", ErrInvalidCron, d.Name, d.CatchUp, MaxCatchUp)
	}
	args, err := d.Call.Encode()
	if err != nil {
		return cronRecord{}, fmt.Errorf("%w: %s: %w", ErrInvalidCron, d.Name, err)
	}
	maxPayload := c.js.Conn().MaxPayload()
	if limit := kv.ArgsLimit(maxPayload); len(args) > limit {
		// Its definition, and each of its runs' records, would not fit.
		return cronRecord{}, fmt.Errorf("%w: %s: %d bytes of args, more than a run record holds (%d): %w",
			ErrInvalidCron, d.Name, len(args), limit, jetflow.ErrBadArgs)
	}
	// The stored definition holds the args, the schedule (a cron
	// expression or a zone name may be long) and its state (under 1 KB).
	specJSON, _ := json.Marshal(spec)
	if size := len(args) + len(specJSON) + len(d.Call.Name) + len(d.Name) + 1024; maxPayload > 0 && int64(size) > maxPayload {
		return cronRecord{}, fmt.Errorf("%w: %s: its definition would be %d bytes with %d of args and %d of schedule, more than the server's max payload (%d)",
			ErrInvalidCron, d.Name, size, len(args), len(specJSON), maxPayload)
	}
	kind := d.Call.Kind
	if kind == "" {
		kind = jetflow.Retryable
	}
	return cronRecord{
		Name: d.Name, Origin: origin, Spec: spec, Function: d.Call.Name, Kind: kind,
		Args: args, Overlap: d.Overlap, CatchUp: d.CatchUp,
	}, nil
}

// Register adds a cron at run time and returns it. An interval cron first
// fires now; other kinds at their next time. Errors: ErrInvalidCron (and
// the schedule errors), ErrCronExists.
func (c *Crons) Register(ctx context.Context, d CronDef) (*CronInfo, error) {
	r, err := c.recordOf(d, OriginRuntime)
	if err != nil {
		return nil, err
	}
	if err := c.create(ctx, &r); err != nil {
		return nil, err
	}
	return c.info(ctx, &r, false)
}

// create stores a new cron (state set from now): its due entry first,
// then its record, so a crash in between leaves only a stale entry.
func (c *Crons) create(ctx context.Context, r *cronRecord) error {
	kv, _, err := c.open(ctx)
	if err != nil {
		return err
	}
	now := c.now().UTC()
	next, err := firstFire(r.Spec, now)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidCron, r.Name, err)
	}
	r.Enabled, r.Next, r.Due = true, next, dueSecond(next)
	r.Created, r.Updated = now, now
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	c.seedWatermark(ctx, now)
	if _, err := kv.Put(ctx, dueKey(r.Due, r.Name), nil); err != nil {
		return fmt.Errorf("scheduler: index cron %s: %w", r.Name, err)
	}
	if _, err := kv.Create(ctx, defKey(r.Name), data); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: %q", ErrCronExists, r.Name)
		}
		return fmt.Errorf("scheduler: store cron %s: %w", r.Name, err)
	}
	return nil
}

// RegisterBatch registers many crons at once with pipelined writes (for
// migrations and benchmarks). It is not atomic: it returns the errors of
// the crons that could not be registered, joined, after trying them all.
func (c *Crons) RegisterBatch(ctx context.Context, defs []CronDef) error {
	if _, _, err := c.open(ctx); err != nil {
		return err
	}
	now := c.now().UTC()
	c.seedWatermark(ctx, now)
	var errs []error
	type pending struct {
		name string
		f    jetstream.PubAckFuture
	}
	var futs []pending
	bucket := c.cfg.Streams.CronsBucket()
	flush := func() {
		for _, p := range futs {
			select {
			case <-p.f.Ok():
			case err := <-p.f.Err():
				if isWrongSeq(err) {
					err = fmt.Errorf("%w: %q", ErrCronExists, p.name)
				}
				errs = append(errs, err)
			case <-ctx.Done():
				errs = append(errs, ctx.Err())
				return
			}
		}
		futs = futs[:0]
	}
	for _, d := range defs {
		r, err := c.recordOf(d, OriginRuntime)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		next, err := firstFire(r.Spec, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalidCron, r.Name, err))
			continue
		}
		r.Enabled, r.Next, r.Due, r.Created, r.Updated = true, next, dueSecond(next), now, now
		data, err := json.Marshal(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f1, err := c.js.PublishMsgAsync(kv.PutMsg(bucket, dueKey(r.Due, r.Name), nil))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f2, err := c.js.PublishMsgAsync(kv.PutMsg(bucket, defKey(r.Name), data, kv.PutExpect(0)))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		futs = append(futs, pending{r.Name, f1}, pending{r.Name, f2})
		if len(futs) >= 4000 {
			flush()
		}
	}
	flush()
	return errors.Join(errs...)
}

// Get returns cron name with the outcome of its last run.
// Errors: ErrCronNotFound, ErrBadCronRecord.
func (c *Crons) Get(ctx context.Context, name string) (*CronInfo, error) {
	if err := ValidateCronName(name); err != nil {
		return nil, err
	}
	r, _, err := c.load(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.info(ctx, r, true)
}

// List returns every cron, by name, with the outcome of each last run
// (kv.Store.Crons, the one reader of the crons bucket). Its cost is
// proportional to the crons registered.
func (c *Crons) List(ctx context.Context) ([]*CronInfo, error) { return c.store.Crons(ctx) }

// Pause disables cron name: it does not fire until resumed. Pausing a
// paused cron is a no-op. Errors: ErrCronNotFound, ErrBadCronRecord.
func (c *Crons) Pause(ctx context.Context, name string) error {
	return c.modify(ctx, name, func(r *cronRecord, now time.Time) (bool, error) {
		if !r.Enabled {
			return false, nil
		}
		r.Enabled, r.Next, r.Due, r.Replay = false, time.Time{}, 0, 0
		return true, nil
	})
}

// Resume enables cron name. Its next time is computed from now: what it
// missed while paused is not replayed. Errors: ErrCronNotFound,
// ErrBadCronRecord.
func (c *Crons) Resume(ctx context.Context, name string) error {
	return c.modify(ctx, name, func(r *cronRecord, now time.Time) (bool, error) {
		if r.Enabled {
			return false, nil
		}
		next, err := r.Spec.Next(now.Truncate(time.Second))
		if err != nil {
			return false, err
		}
		r.Enabled, r.Next, r.Due, r.Replay = true, next, dueSecond(next), 0
		return true, nil
	})
}

// Trigger starts a run of cron name now, outside its schedule: the cron's
// call with its arguments, id "trigger-<name>-<unix second>" (a second
// Trigger within the same second starts it once), not counted in the
// cron's state; a paused cron is triggered too. A stored record that cannot
// be used, one whose schedule does not validate among them, is refused: it
// may not be what anyone defined. Errors: ErrInvalidCron (the name),
// ErrCronNotFound, ErrBadCronRecord, the producer's.
func (c *Crons) Trigger(ctx context.Context, name string) (*jetflow.Run, error) {
	if err := ValidateCronName(name); err != nil {
		return nil, err
	}
	r, _, err := c.load(ctx, name)
	if err != nil && (r == nil || !errors.Is(err, ErrUnknownZone)) {
		return nil, err // a zone this process lacks does not stop a run by hand
	}
	id := engine.CronTriggerID(name, c.now())
	call := jetflow.Call{Name: r.Function, Kind: r.Kind, Args: r.Args}
	if _, err := c.p.Enqueue(ctx, call, producer.WithID(id)); err != nil && !errors.Is(err, producer.ErrAlreadyExists) {
		return nil, fmt.Errorf("scheduler: trigger cron %s: %w", name, err)
	}
	return c.p.Get(ctx, id)
}

// Delete removes cron name; runs it started are not affected. A
// code-defined cron comes back at the next leader term unless it was
// removed from the code too. A record that cannot be read
// (ErrBadCronRecord) or whose zone this process does not know is deleted
// too. Errors: ErrCronNotFound.
func (c *Crons) Delete(ctx context.Context, name string) error {
	if err := ValidateCronName(name); err != nil {
		return err
	}
	kv, _, err := c.open(ctx)
	if err != nil {
		return err
	}
	for {
		r, rev, err := c.load(ctx, name)
		if err != nil && !errors.Is(err, ErrBadCronRecord) && !errors.Is(err, ErrUnknownZone) {
			return err
		}
		if err := kv.Delete(ctx, defKey(name), jetstream.LastRevision(rev)); err != nil {
			if isWrongSeq(err) {
				continue
			}
			return fmt.Errorf("scheduler: delete cron %s: %w", name, err)
		}
		if r != nil {
			c.removeDue(ctx, r.Due, name)
		}
		return nil
	}
}

// modify applies change to cron name by compare-and-swap, moving its due
// entry when its due second changes.
func (c *Crons) modify(ctx context.Context, name string, change func(r *cronRecord, now time.Time) (bool, error)) error {
	if err := ValidateCronName(name); err != nil {
		return err
	}
	kv, _, err := c.open(ctx)
	if err != nil {
		return err
	}
	for {
		r, rev, err := c.load(ctx, name)
		if err != nil {
			return err
		}
		oldDue := r.Due
		now := c.now().UTC()
		ok, err := change(r, now)
		if err != nil || !ok {
			return err
		}
		r.Updated = now
		if r.Due != 0 && r.Due != oldDue {
			if _, err := kv.Put(ctx, dueKey(r.Due, name), nil); err != nil {
				return fmt.Errorf("scheduler: index cron %s: %w", name, err)
			}
		}
		data, _ := json.Marshal(r)
		if _, err := kv.Update(ctx, defKey(name), data, rev); err != nil {
			if isWrongSeq(err) {
				continue
			}
			return fmt.Errorf("scheduler: update cron %s: %w", name, err)
		}
		if oldDue != 0 && oldDue != r.Due {
			c.removeDue(ctx, oldDue, name)
		}
		return nil
	}
}

// info turns a record into a CronInfo, reading the last run's outcome.
func (c *Crons) info(ctx context.Context, r *cronRecord, withOutcome bool) (*CronInfo, error) {
	return c.store.CronInfo(ctx, r, withOutcome)
}
