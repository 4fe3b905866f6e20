package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/cronspec"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// lookback is how far before the stored watermark a new leader reads
	// the index again: entries written late (after their second was read)
	// that the previous leader had not evaluated yet.
	lookback = 2 * time.Minute
	// perSecondFilters: up to this many seconds of one hour are read with
	// one subject filter per second; longer spans read the whole hour.
	perSecondFilters = 300
	// filtersPerRead bounds the subject filters of one consumer.
	filtersPerRead = 100
	// maxSteps bounds the fire times one evaluation of one cron walks.
	maxSteps = 1000
	// maxCount bounds the enumeration when counting missed fires.
	maxCount = 10000
)

// evalState is the leader's position in the index.
type evalState struct {
	w     int64               // seconds <= w have been read (0: unknown)
	saved int64               // watermark last stored
	extra map[string]dueEntry // entries to evaluate at the next tick
}

type dueEntry struct {
	key  string
	sec  int64
	name string
	seq  uint64
}

// TickStats says what one evaluation (Tick) did.
type TickStats struct {
	// Due is the number of index entries evaluated.
	Due int
	// Fired runs started, Skipped fires (previous run still active),
	// Missed fires lost to downtime, Stale index entries removed.
	Fired, Skipped, Missed, Stale int
	// Pages read from the index (more than one when more crons were due
	// than CronConfig.PageSize).
	Pages int
	// Errors met; their entries are retried at the next tick.
	Errors int
	// Bad index entries whose cron record cannot be used
	// (ErrBadCronRecord): logged and removed, not retried.
	Bad int
}

func (t *TickStats) add(o TickStats) {
	t.Due += o.Due
	t.Fired += o.Fired
	t.Skipped += o.Skipped
	t.Missed += o.Missed
	t.Stale += o.Stale
	t.Errors += o.Errors
	t.Bad += o.Bad
}

// run evaluates crons until ctx ends: the code-defined set is synced, then
// the index is read at every second. One run at a time per Crons.
func (c *Crons) run(ctx context.Context) {
	if !c.running.CompareAndSwap(false, true) {
		return
	}
	defer c.running.Store(false)
	c.evalMu.Lock()
	c.ev = evalState{}
	c.evalMu.Unlock()
	c.synced.Store(false)

	// Index entries written after their second was read (another
	// process's clock behind ours) are caught by a watch; it is opened
	// again at the next tick if it ends.
	var (
		updates   <-chan jetstream.KeyValueEntry
		watcher   jetstream.KeyWatcher
		watchWait = kv.WatchWait
	)
	defer func() {
		if watcher != nil {
			_ = watcher.Stop()
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-updates:
			if !ok {
				updates, watcher = nil, nil
				continue
			}
			if e != nil {
				c.noteDue(e.Key(), e.Revision())
			}
			continue
		case <-timer.C:
		}
		if updates == nil {
			if kvb, _, err := c.open(ctx); err == nil {
				watcher, err = kv.WatchWithin(ctx, kvb, duePrefix+">", watchWait, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes(), jetstream.MetaOnly())
				watchWait = kv.NextWatchWait(watchWait, err)
				if err == nil {
					updates = watcher.Updates()
				} else if ctx.Err() == nil {
					c.log.Warn("cron evaluator: watch index", "error", err)
				}
			}
		}
		if !c.synced.Load() {
			if err := c.Sync(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("cron evaluator: sync code-defined crons", "error", err)
			}
		}
		if st, err := c.Tick(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("cron evaluator: tick", "error", err)
		} else if st.Fired+st.Skipped+st.Missed > 0 {
			c.log.Debug("cron tick", "fired", st.Fired, "skipped", st.Skipped, "missed", st.Missed, "pages", st.Pages)
		}
		// Wake just after the next second boundary: fire times are whole seconds.
		now := time.Now()
		timer.Reset(now.Truncate(time.Second).Add(time.Second + time.Millisecond).Sub(now))
	}
}

// noteDue records an index entry written after its second was read.
func (c *Crons) noteDue(key string, seq uint64) {
	sec, name, ok := parseDueKey(key)
	if !ok {
		return
	}
	c.evalMu.Lock()
	defer c.evalMu.Unlock()
	if c.ev.w != 0 && sec <= c.ev.w {
		if c.ev.extra == nil {
			c.ev.extra = map[string]dueEntry{}
		}
		c.ev.extra[key] = dueEntry{key: key, sec: sec, name: name, seq: seq}
	}
}

// Tick evaluates the crons due now: it reads the index entries of the
// seconds that came since the previous tick, a page of PageSize at a time
// (a full page plus one means more are due: the next page is read at
// once), fires each due cron through the producer with its deterministic
// run id, and advances it by compare-and-swap. The scheduler's leader
// calls it every second; tests and benchmarks may call it directly.
func (c *Crons) Tick(ctx context.Context) (TickStats, error) {
	c.evalMu.Lock()
	defer c.evalMu.Unlock()
	var stats TickStats
	kvb, _, err := c.open(ctx)
	if err != nil {
		return stats, err
	}
	now := c.now()
	hi := now.Unix()
	var lo int64
	if c.ev.w == 0 {
		e, err := kvb.Get(ctx, watermarkKey)
		switch {
		case err == nil:
			wm, perr := strconv.ParseInt(string(e.Value()), 10, 64)
			if perr != nil || wm <= 0 || wm > hi+int64(lookback/time.Second) {
				// Unreadable (written by hand), or ahead of this clock by
				// more than the lookback (a leader whose clock ran ahead):
				// read from it, the crons filed between it and now would
				// never be read. The whole index is read instead, and the
				// watermark replaced by this leader's.
				c.log.Warn("cron watermark unusable; reading the whole index", "watermark", string(e.Value()), "now", hi)
				lo = 0
				break
			}
			c.ev.saved = wm
			lo = min(wm, hi) - int64(lookback/time.Second) + 1
			if lo < 1 {
				lo = 1
			}
		case errors.Is(err, jetstream.ErrKeyNotFound):
			lo = 0 // never read: the whole index
		default:
			return stats, fmt.Errorf("scheduler: read cron watermark: %w", err)
		}
	} else {
		// The last second read is read again: an entry filed under it by
		// another process after it was read (an interval cron registered
		// then fires first at the start of that second) is found now.
		lo = c.ev.w
	}

	retry := map[string]dueEntry{}
	seen := map[string]bool{} // evaluated in this tick
	// Entries written late, and those that failed before.
	if len(c.ev.extra) > 0 {
		extra := make([]dueEntry, 0, len(c.ev.extra))
		for _, e := range c.ev.extra {
			extra = append(extra, e)
		}
		c.ev.extra = nil
		slices.SortFunc(extra, func(a, b dueEntry) int { return int(a.sec - b.sec) })
		for len(extra) > 0 {
			n := min(len(extra), c.cfg.PageSize)
			stats.add(c.processPage(ctx, extra[:n], now, retry, seen))
			extra = extra[n:]
		}
	}
	// The seconds that came.
	for lo <= hi {
		if err := ctx.Err(); err != nil {
			return stats, err
		}
		entries, err := c.dueEntries(ctx, lo, hi, c.cfg.PageSize+1, seen)
		if err != nil {
			c.ev.extra = mergeEntries(c.ev.extra, retry)
			return stats, err
		}
		stats.Pages++
		page := entries
		if len(page) > c.cfg.PageSize {
			page = page[:c.cfg.PageSize]
		}
		stats.add(c.processPage(ctx, page, now, retry, seen))
		if len(entries) <= c.cfg.PageSize {
			break
		}
	}
	c.ev.extra = mergeEntries(c.ev.extra, retry)
	if hi > c.ev.w {
		c.ev.w = hi
	}
	if wm := c.ev.storedWatermark(); wm != c.ev.saved && ctx.Err() == nil {
		if _, err := kvb.Put(ctx, watermarkKey, []byte(strconv.FormatInt(wm, 10))); err == nil {
			c.ev.saved = wm
		}
	}
	return stats, nil
}

// maxPin bounds how far back a retried entry holds the stored watermark.
const maxPin = 24 * time.Hour

// storedWatermark is the watermark to store: the seconds read, held back
// so that a new leader, which reads from lookback before it, reads again
// the entries this one still retries (their evaluation failed: a stream
// without a leader, say). They are kept only in this leader's memory, and
// an entry not read again is a cron that never fires again. An entry
// retried for longer than maxPin no longer holds it back.
func (ev *evalState) storedWatermark() int64 {
	wm := ev.w
	floor := ev.w - int64(maxPin/time.Second)
	for _, e := range ev.extra {
		if e.sec <= floor {
			continue
		}
		if pin := e.sec + int64(lookback/time.Second) - 1; pin < wm {
			wm = pin
		}
	}
	return wm
}

func mergeEntries(dst, src map[string]dueEntry) map[string]dueEntry {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[string]dueEntry, len(src))
	}
	for k, e := range src {
		dst[k] = e
	}
	return dst
}

// dueFilters are the subject filters of the index entries of seconds
// lo..hi (lo 0: every entry).
func (c *Crons) dueFilters(lo, hi int64) []string {
	pfx := streams.KVSubject(c.cfg.Streams.CronsBucket(), duePrefix)
	if lo <= 0 {
		return []string{pfx + ">"}
	}
	var out []string
	for h := lo / 3600; h <= hi/3600; h++ {
		a, b := max(lo, h*3600), min(hi, h*3600+3599)
		hs := strconv.FormatInt(h, 10)
		if b-a+1 > perSecondFilters || b-a+1 == 3600 {
			out = append(out, pfx+hs+".>")
			continue
		}
		for s := a; s <= b; s++ {
			out = append(out, pfx+hs+"."+strconv.FormatInt(s, 10)+".>")
		}
	}
	return out
}

// dueEntries reads up to limit index entries of seconds lo..hi, leaving
// out those in skip.
func (c *Crons) dueEntries(ctx context.Context, lo, hi int64, limit int, skip map[string]bool) ([]dueEntry, error) {
	pfx := streams.KVSubject(c.cfg.Streams.CronsBucket(), "")
	filters := c.dueFilters(lo, hi)
	var out []dueEntry
	for len(filters) > 0 && len(out) < limit {
		n := min(len(filters), filtersPerRead)
		err := c.consume(ctx, filters[:n], true, func(subject string, _ []byte, seq uint64) bool {
			key := strings.TrimPrefix(subject, pfx)
			sec, name, ok := parseDueKey(key)
			if !ok || !inWindow(sec, lo, hi) {
				return true
			}
			if skip[key] {
				return true
			}
			out = append(out, dueEntry{key: key, sec: sec, name: name, seq: seq})
			return len(out) < limit
		})
		if err != nil {
			return out, err
		}
		filters = filters[n:]
	}
	return out, nil
}

// outcome of evaluating one entry.
type outcome struct {
	TickStats
	retry bool
}

// processPage evaluates a page of entries, Parallel at a time, and marks
// them seen. Entries to retry at the next tick are added to retry.
func (c *Crons) processPage(ctx context.Context, page []dueEntry, now time.Time, retry map[string]dueEntry, seen map[string]bool) TickStats {
	var (
		mu    sync.Mutex
		stats TickStats
		wg    sync.WaitGroup
		sem   = make(chan struct{}, c.cfg.Parallel)
	)
	for _, e := range page {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			o, err := c.evaluate(ctx, e, now)
			mu.Lock()
			defer mu.Unlock()
			seen[e.key] = true
			stats.Due++
			if err != nil {
				if ctx.Err() == nil {
					c.log.Warn("cron evaluation failed; retried next tick", "cron", e.name, "error", err)
				}
				stats.Errors++
				retry[e.key] = e
				return
			}
			stats.add(o.TickStats)
			if o.retry {
				retry[e.key] = e
			}
		}()
	}
	wg.Wait()
	return stats
}

// evaluate handles one index entry: it fires the cron for each of its
// times that has come and files it under its next time.
func (c *Crons) evaluate(ctx context.Context, e dueEntry, now time.Time) (outcome, error) {
	var o outcome
	for attempt := 0; ; attempt++ {
		if attempt == 8 {
			return o, fmt.Errorf("scheduler: cron %s: too many concurrent changes", e.name)
		}
		r, rev, err := c.load(ctx, e.name)
		if errors.Is(err, ErrCronNotFound) {
			c.removeEntry(ctx, e.key, e.seq)
			o.Stale++
			return o, nil
		}
		if err == nil && filedEarly(r, e.sec, now) {
			// Filed early: another process's clock, or a next time
			// written by hand that its schedule cannot have.
			if far, ferr := r.Spec.Next(now.Add(24 * time.Hour)); ferr != nil || r.Next.After(far) {
				err = fmt.Errorf("%w: %q: next time %s is beyond the schedule's next time after tomorrow", ErrBadCronRecord, e.name, r.Next.Format(time.RFC3339))
			}
		}
		if errors.Is(err, ErrBadCronRecord) {
			// Retrying cannot help: left to Delete (or to the code
			// defining it), and the other crons go on.
			c.log.Error("cron record unusable; its index entry is dropped", "cron", e.name, "error", err)
			c.removeEntry(ctx, e.key, e.seq)
			o.Bad++
			return o, nil
		}
		if err != nil {
			return o, err
		}
		if !r.Enabled || r.Due != e.sec {
			c.removeEntry(ctx, e.key, e.seq)
			o.Stale++
			return o, nil
		}
		if r.Next.After(now) {
			o.retry = true // filed early (another process's clock): look again
			return o, nil
		}
		oldDue := r.Due
		st, err := c.advance(ctx, r, now)
		if err != nil {
			return o, err
		}
		if err := ctx.Err(); err != nil {
			return o, err // stopped mid-tick: the next leader advances it
		}
		r.Updated = now.UTC()
		if r.Due != oldDue {
			if err := c.putDue(ctx, r.Due, r.Name); err != nil {
				return o, err
			}
		}
		ok, err := c.write(ctx, r, rev)
		if err != nil {
			return o, err
		}
		if !ok {
			continue // changed meanwhile: fires are idempotent, evaluate again
		}
		if r.Due != oldDue {
			c.removeEntry(ctx, e.key, e.seq)
		}
		o.TickStats = st
		return o, nil
	}
}

// advance fires r for each of its times up to now and moves r.Next past
// now, following the overlap and catch-up policies. It sets r.Due.
//
// A time no older than Grace is on time and fires (or is skipped when the
// previous run is still active and Overlap is off). Older times were
// missed: with CatchUp 0 they are skipped and counted; with CatchUp n the
// first n of them are replayed in order, each after the previous run ended
// (unless Overlap), and the rest are skipped.
func (c *Crons) advance(ctx context.Context, r *cronRecord, now time.Time) (TickStats, error) {
	var st TickStats
	grace := c.cfg.Grace
	limit := now.Add(-grace) // times before limit were missed
	defer func() {
		r.Due = dueAt(r.Next, now)
	}()
	firedLate := false // the previous time was fired late in this pass
	for steps := 0; !r.Next.After(now) && steps < maxSteps; steps++ {
		t := r.Next
		missed := t.Before(limit)
		if r.Replay == 0 && missed {
			if r.CatchUp == 0 {
				n, resume, err := skipMissed(r.Spec, t, limit)
				if err != nil {
					return st, err
				}
				r.Missed += int64(n)
				st.Missed += n
				r.Next = resume
				c.log.Warn("cron missed fires while no scheduler ran; skipped", "cron", r.Name, "missed", n, "first", t, "next", resume)
				continue
			}
			r.Replay = countMissed(r.Spec, t, limit, r.CatchUp)
		}
		if r.Replay > 0 {
			fired, wait, err := c.fire(ctx, r, t, true, false)
			if err != nil {
				return st, err
			}
			if wait {
				return st, nil // the previous run is still active: look again in a second
			}
			if fired {
				st.Fired++
			}
			r.Replay--
			next, err := r.Spec.Next(t)
			if err != nil {
				return st, err
			}
			r.Next = next
			if r.Replay == 0 || !next.Before(limit) {
				r.Replay = 0
				if next.Before(limit) {
					n, resume, err := skipMissed(r.Spec, next, limit)
					if err != nil {
						return st, err
					}
					r.Missed += int64(n)
					st.Missed += n
					r.Next = resume
					c.log.Warn("cron missed more fires than it catches up; skipped", "cron", r.Name, "missed", n, "next", resume)
				}
			}
			continue
		}
		late := now.Sub(t) > catchUpLag || firedLate
		fired, wait, err := c.fire(ctx, r, t, false, late)
		if err != nil {
			return st, err
		}
		firedLate = fired && late
		if wait {
			return st, nil // the previous run has not started: look again in a second
		}
		if fired {
			st.Fired++
		} else {
			st.Skipped++
		}
		next, err := r.Spec.Next(t)
		if err != nil {
			return st, err
		}
		r.Next = next
	}
	return st, nil
}

// skipMissed returns how many fire times lie in [t, limit) (counted up to
// maxCount) and the first fire time at or after limit (for an interval
// more than 292 years behind, a later fire time that may still be before
// limit: the caller skips again from there).
func skipMissed(s cronspec.Spec, t, limit time.Time) (int, time.Time, error) {
	if !t.Before(limit) {
		return 0, t, nil
	}
	if s.Kind == cronspec.KindInterval {
		// Whole periods within limit-t, then one more if still short. No
		// sum of durations here: limit-t saturates at 292 years (a next
		// time written by hand in year 1) and an interval may be as long,
		// and an overflow would move the cron back in time, where it
		// would stay.
		k := limit.Sub(t) / s.Every
		x := t.Add(k * s.Every)
		if x.Before(limit) {
			x, k = x.Add(s.Every), k+1
		}
		return int(k), x, nil
	}
	resume, err := s.Next(limit.Add(-time.Nanosecond))
	if err != nil {
		return 0, time.Time{}, err
	}
	n := 0
	for x := t; x.Before(limit) && n < maxCount; n++ {
		if x, err = s.Next(x); err != nil {
			break
		}
	}
	return n, resume, nil
}

// countMissed counts the fire times in [t, limit), up to most.
func countMissed(s cronspec.Spec, t, limit time.Time, most int) int {
	n := 0
	for x := t; x.Before(limit) && n < most; n++ {
		var err error
		if x, err = s.Next(x); err != nil {
			return n + 1
		}
	}
	return n
}

// fire starts the run of r for time t, unless the previous run is still
// active and r does not allow overlap: then an on-time fire is skipped
// (counted) and a replayed one waits (wait). The run id is the same on
// every scheduler, so a time that another leader fired already is not
// fired again.
//
// catchUp: t is being fired late, or right after an earlier time fired late
// in the same pass (a new leader catching up): a previous run that has not
// started yet is waited for (up to catchUpWait here, then again at the
// next tick, as long as t is within Grace) instead of skipping t.
func (c *Crons) fire(ctx context.Context, r *cronRecord, t time.Time, replay, catchUp bool) (fired, wait bool, err error) {
	id := CronRunID(r.Name, t)
	if !r.Overlap && r.LastRun != "" && r.LastRun != id {
		active, err := c.runActive(ctx, r.LastRun)
		if err != nil {
			return false, false, err
		}
		if active {
			if _, err := engine.Of(c.p).Get(ctx, id); err == nil { // its state: no payload read
				c.fired(r, id, t) // a previous leader fired it
				return true, false, nil
			} else if !errors.Is(err, jetflow.ErrNotFound) {
				return false, false, err
			}
			if replay {
				return false, true, nil
			}
			if catchUp {
				// A time fired late (a failover, a slow tick) whose previous
				// run, fired late too, has not started yet: it waits for
				// that run, within Grace, rather than being skipped.
				switch prev, err := c.awaitStart(ctx, r.LastRun, catchUpWait); {
				case err != nil:
					return false, false, err
				case prev == prevEnded:
					return c.fire(ctx, r, t, replay, catchUp)
				case prev == prevPending:
					return false, true, nil
				}
			}
			r.Skipped++
			c.log.Warn("cron fire skipped: previous run still active", "cron", r.Name, "time", t, "previous_run_id", r.LastRun)
			return false, false, nil
		}
	}
	call := jetflow.Call{Name: r.Function, Kind: r.Kind, Args: r.Args}
	_, err = c.p.RunAt(ctx, t, call, producer.WithID(id))
	switch {
	case err == nil, errors.Is(err, producer.ErrAlreadyExists):
	case errors.Is(err, jetflow.ErrBadArgs), errors.Is(err, jetflow.ErrInvalidName), errors.Is(err, producer.ErrArgsTooLarge):
		r.Skipped++
		c.log.Error("cron fire refused; skipped", "cron", r.Name, "time", t, "error", err)
		return false, false, nil
	default:
		return false, false, err
	}
	if c.afterFire != nil {
		c.afterFire(ctx, r.Name, t)
	}
	c.fired(r, id, t)
	return true, false, nil
}

func (c *Crons) fired(r *cronRecord, id string, t time.Time) {
	r.LastRun, r.LastTime = id, t.UTC()
	r.Fired++
}

// catchUpWait is how long an on-time fire waits in a tick for the previous
// run, not started yet, to end (runs fired back to back when a new leader
// catches up usually take milliseconds).
const catchUpWait = time.Second

// catchUpLag is how late a fire must be evaluated to count as catching up
// (a tick evaluates its times a millisecond after they come).
const catchUpLag = time.Second

type prevRun uint8

const (
	prevEnded   prevRun = iota // ended (or gone): fire
	prevPending                // still waiting to start: wait
	prevRunning                // in progress: an on-time fire is skipped
)

// awaitStart watches run id for up to d while it is pending and reports
// what it became.
func (c *Crons) awaitStart(ctx context.Context, id string, d time.Duration) (prevRun, error) {
	deadline := time.Now().Add(d)
	for {
		run, _, err := c.store.Decide(ctx, id)
		if errors.Is(err, jetflow.ErrNotFound) {
			return prevEnded, nil
		}
		if err != nil {
			return 0, err
		}
		switch {
		case run.State.Terminal():
			return prevEnded, nil
		case run.State == jetflow.InProgress:
			return prevRunning, nil
		case time.Now().After(deadline):
			return prevPending, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runActive reports whether run id is pending or in progress.
func (c *Crons) runActive(ctx context.Context, id string) (bool, error) {
	run, _, err := c.store.Decide(ctx, id)
	if errors.Is(err, jetflow.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !run.State.Terminal(), nil
}

// Sync makes the stored code-defined crons equal to CronConfig.Crons: it
// adds the new ones, updates the changed ones (a changed schedule starts
// again from now; a paused cron stays paused) and deletes those no longer
// defined. A runtime cron with the name of a code-defined one is taken
// over by the code. The leader calls it at the start of each term; it does
// nothing when CronConfig.Crons is nil.
func (c *Crons) Sync(ctx context.Context) error {
	if c.code == nil {
		return nil
	}
	kvb, _, err := c.open(ctx)
	if err != nil {
		return err
	}
	var before []string
	e, err := kvb.Get(ctx, codeKey)
	switch {
	case err == nil:
		if err := json.Unmarshal(e.Value(), &before); err != nil {
			c.log.Warn("undecodable list of code-defined crons", "error", err)
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("scheduler: read code-defined crons: %w", err)
	}
	names := make([]string, 0, len(c.code))
	for i := range c.code {
		if err := c.syncOne(ctx, c.code[i]); err != nil {
			return err
		}
		names = append(names, c.code[i].Name)
	}
	// Everything that was defined in code before and is not now.
	gone := map[string]bool{}
	for _, n := range before {
		gone[n] = true
	}
	for _, n := range names {
		delete(gone, n)
	}
	for n := range gone {
		if err := c.removeCode(ctx, n); err != nil {
			return err
		}
	}
	data, _ := json.Marshal(names)
	if _, err := kvb.Put(ctx, codeKey, data); err != nil {
		return fmt.Errorf("scheduler: store code-defined crons: %w", err)
	}
	c.synced.Store(true)
	return nil
}

func (c *Crons) syncOne(ctx context.Context, want cronRecord) error {
	kvb, _, err := c.open(ctx)
	if err != nil {
		return err
	}
	for {
		cur, rev, err := c.load(ctx, want.Name)
		if errors.Is(err, ErrBadCronRecord) {
			// The code defines it: the unusable record is replaced.
			c.log.Warn("code-defined cron replaces an unusable record", "cron", want.Name, "error", err)
			if err := kvb.Delete(ctx, defKey(want.Name), jetstream.LastRevision(rev)); err != nil && !isWrongSeq(err) {
				return fmt.Errorf("scheduler: delete cron %s: %w", want.Name, err)
			}
			continue
		}
		if errors.Is(err, ErrCronNotFound) {
			r := want
			err := c.create(ctx, &r)
			if errors.Is(err, ErrCronExists) {
				continue
			}
			if err == nil {
				c.log.Info("code-defined cron added", "cron", r.Name, "schedule", r.Spec.String())
			}
			return err
		}
		if err != nil {
			return err
		}
		if cur.Origin == OriginCode && sameDefinition(cur, &want) {
			return nil
		}
		now := c.now().UTC()
		upd := *cur
		upd.Spec, upd.Function, upd.Kind, upd.Args = want.Spec, want.Function, want.Kind, want.Args
		upd.Overlap, upd.CatchUp, upd.Updated = want.Overlap, want.CatchUp, now
		if cur.Origin != OriginCode {
			c.log.Warn("code-defined cron replaces a runtime cron of the same name", "cron", want.Name)
		}
		if (cur.Spec != want.Spec || cur.Origin != OriginCode) && upd.Enabled {
			next, err := firstFire(want.Spec, now)
			if err != nil {
				return err
			}
			upd.Next, upd.Due, upd.Replay = next, dueSecond(next), 0
			if err := c.putDue(ctx, upd.Due, upd.Name); err != nil {
				return err
			}
		}
		upd.Origin = OriginCode
		ok, err := c.write(ctx, &upd, rev)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if cur.Due != upd.Due {
			c.removeDue(ctx, cur.Due, cur.Name)
		}
		c.log.Info("code-defined cron updated", "cron", upd.Name, "schedule", upd.Spec.String())
		return nil
	}
}

// removeCode deletes cron name if it is still code-defined.
func (c *Crons) removeCode(ctx context.Context, name string) error {
	kvb, _, err := c.open(ctx)
	if err != nil {
		return err
	}
	for {
		r, rev, err := c.load(ctx, name)
		if errors.Is(err, ErrCronNotFound) {
			return nil
		}
		if err != nil && !errors.Is(err, ErrBadCronRecord) && !errors.Is(err, ErrUnknownZone) {
			return err // an unusable record under a name the code defined is removed
		}
		if r != nil && r.Origin != OriginCode {
			return nil
		}
		if err := kvb.Delete(ctx, defKey(name), jetstream.LastRevision(rev)); err != nil {
			if isWrongSeq(err) {
				continue
			}
			return fmt.Errorf("scheduler: delete cron %s: %w", name, err)
		}
		if r != nil {
			c.removeDue(ctx, r.Due, name)
		}
		c.log.Info("code-defined cron removed", "cron", name)
		return nil
	}
}

// inWindow reports whether due second sec is at most hi and, where lo is
// set (> 0), at least lo.
func inWindow(sec, lo, hi int64) bool {
	if sec > hi {
		return false
	}
	return lo <= 0 || sec >= lo
}

// filedEarly reports whether enabled cron r is filed under due second sec
// with a next time still to come.
func filedEarly(r *cronRecord, sec int64, now time.Time) bool {
	return r.Enabled && r.Due == sec && r.Next.After(now)
}
