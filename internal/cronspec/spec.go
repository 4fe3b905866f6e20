package cronspec

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind selects how a [Spec] is interpreted.
type Kind string

// The schedule kinds.
const (
	KindInterval Kind = "interval" // every Every, in absolute time
	KindHourly   Kind = "hourly"   // every hour at Minute
	KindDaily    Kind = "daily"    // every day at Hour:Minute
	KindWeekly   Kind = "weekly"   // every Weekday at Hour:Minute
	KindMonthly  Kind = "monthly"  // every month on Day at Hour:Minute
	KindCron     Kind = "cron"     // a cron expression, Expr
)

// Spec is a schedule specification. Build one with [Interval], [Hourly],
// [Daily], [Weekly], [Monthly] or [Cron] (optionally followed by
// [Spec.In]), or with [Parse]. The zero value is not valid.
//
// Fields not used by the Kind must be zero; [Spec.Validate] rejects them.
type Spec struct {
	Kind Kind `json:"kind"`
	// Every is the period of an interval spec: a whole number of seconds.
	// Like any time.Duration it is encoded in JSON as integer nanoseconds.
	Every time.Duration `json:"every,omitempty"`
	// Minute (0-59) is used by hourly, daily, weekly and monthly specs.
	Minute int `json:"minute,omitempty"`
	// Hour (0-23) is used by daily, weekly and monthly specs.
	Hour int `json:"hour,omitempty"`
	// Day (1-31) is the day of the month of a monthly spec. Months that
	// are too short to contain it are skipped.
	Day int `json:"day,omitempty"`
	// Weekday is the day of a weekly spec.
	Weekday time.Weekday `json:"weekday,omitempty"`
	// Expr is the cron expression of a cron spec.
	Expr string `json:"expr,omitempty"`
	// TZ is the IANA time zone in which calendar and cron specs are
	// evaluated; "" means UTC. Interval specs ignore it.
	TZ string `json:"tz,omitempty"`
}

// Interval returns a spec firing every d, in absolute time.
func Interval(d time.Duration) Spec { return Spec{Kind: KindInterval, Every: d} }

// Hourly returns a spec firing every hour at the given minute.
func Hourly(minute int) Spec { return Spec{Kind: KindHourly, Minute: minute} }

// Daily returns a spec firing every day at hour:minute.
func Daily(hour, minute int) Spec { return Spec{Kind: KindDaily, Hour: hour, Minute: minute} }

// Weekly returns a spec firing every wd at hour:minute.
func Weekly(wd time.Weekday, hour, minute int) Spec {
	return Spec{Kind: KindWeekly, Weekday: wd, Hour: hour, Minute: minute}
}

// Monthly returns a spec firing on the given day of every month at
// hour:minute. Months without that day (e.g. the 31st in April) are
// skipped, not clamped.
func Monthly(day, hour, minute int) Spec {
	return Spec{Kind: KindMonthly, Day: day, Hour: hour, Minute: minute}
}

// Cron returns a spec for a cron expression: 5 fields (minute hour
// day-of-month month day-of-week), 6 fields with seconds first, or one of
// @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly.
func Cron(expr string) Spec { return Spec{Kind: KindCron, Expr: expr} }

// In returns a copy of s evaluated in the IANA time zone tz ("" or "UTC"
// for UTC). The zone is checked by [Spec.Validate], not here.
func (s Spec) In(tz string) Spec {
	s.TZ = tz
	return s
}

// String returns a human-readable description, e.g. "every 30s",
// "hourly :15 (Europe/London)", "daily 09:00 (UTC)",
// "weekly Mon 09:00 (UTC)", "monthly 31 09:00 (UTC)" or
// "cron 0 9 * * 1-5 (America/New_York)". [Parse] accepts it back.
func (s Spec) String() string {
	zone := s.TZ
	if zone == "" {
		zone = "UTC"
	}
	switch s.Kind {
	case KindInterval:
		return "every " + s.Every.String()
	case KindHourly:
		return fmt.Sprintf("hourly :%02d (%s)", s.Minute, zone)
	case KindDaily:
		return fmt.Sprintf("daily %02d:%02d (%s)", s.Hour, s.Minute, zone)
	case KindWeekly:
		wd := s.Weekday.String()
		if len(wd) > 3 {
			wd = wd[:3]
		}
		return fmt.Sprintf("weekly %s %02d:%02d (%s)", wd, s.Hour, s.Minute, zone)
	case KindMonthly:
		return fmt.Sprintf("monthly %d %02d:%02d (%s)", s.Day, s.Hour, s.Minute, zone)
	case KindCron:
		return fmt.Sprintf("cron %s (%s)", strings.Join(strings.Fields(s.Expr), " "), zone)
	default:
		return fmt.Sprintf("invalid spec kind %q", string(s.Kind))
	}
}

// Validate reports whether s is a well-formed spec that fires at least once
// and never more often than minInterval (0 disables that check).
//
// For interval specs Every is checked directly. For the other kinds the
// shortest gap between consecutive fire times is measured on a sample of
// fire times in wall-clock time (DST transitions can make a real gap
// shorter, see the package documentation).
//
// Errors are *[FieldError] values naming the offending field. All match
// [ErrInvalidSpec]; an unloadable TZ also matches [ErrUnknownZone], a
// too-frequent schedule [ErrIntervalTooShort], and a schedule that never
// fires [ErrNoFireTime].
func (s Spec) Validate(minInterval time.Duration) error {
	p, err := s.compile()
	if err != nil {
		return err
	}
	// The calendar kinds always fire, at fixed wall-clock gaps: no need to
	// sample them (sampling costs about 0.1 ms, which adds up when
	// registering crons by the thousand).
	var gap time.Duration
	switch s.Kind {
	case KindInterval:
		if s.Every < minInterval {
			return &FieldError{Err: ErrIntervalTooShort, Field: "every", Value: s.Every.String(),
				Reason: fmt.Sprintf("value %v is shorter than the minimum interval %v", s.Every, minInterval)}
		}
		return nil
	case KindHourly:
		gap = time.Hour
	case KindDaily:
		gap = 24 * time.Hour
	case KindWeekly:
		gap = 7 * 24 * time.Hour
	case KindMonthly:
		gap = 28 * 24 * time.Hour // the shortest month apart
	default:
		return p.checkSpacing(minInterval)
	}
	if gap < minInterval {
		return &FieldError{Err: ErrIntervalTooShort, Field: "kind", Value: string(s.Kind),
			Reason: fmt.Sprintf("value %q fires %v apart, more often than the minimum interval %v", string(s.Kind), gap, minInterval)}
	}
	return nil
}

// Next returns the first fire time strictly after after, in UTC.
//
// For interval specs that is exactly after+Every: pass the previous
// scheduled fire time (not the time the job actually ran) to avoid drift.
// For the other kinds see the package documentation for the daylight
// saving rules.
func (s Spec) Next(after time.Time) (time.Time, error) {
	p, err := s.compile()
	if err != nil {
		return time.Time{}, err
	}
	return p.next(after)
}

// NextN returns the next n fire times strictly after after, in increasing
// order, in UTC. It is the same computation as calling [Spec.Next]
// repeatedly on its own result.
func (s Spec) NextN(after time.Time, n int) ([]time.Time, error) {
	if n < 0 {
		return nil, fmt.Errorf("cronspec: NextN: negative count %d", n)
	}
	p, err := s.compile()
	if err != nil {
		return nil, err
	}
	out := make([]time.Time, 0, n)
	for range n {
		t, err := p.next(after)
		if err != nil {
			return out, err
		}
		out = append(out, t)
		after = t
	}
	return out, nil
}

// plan is a compiled spec.
type plan struct {
	spec Spec
	loc  *time.Location
	cron *cronExpr
	// rawNext returns the first scheduled wall-clock time ≥ from (wall
	// times are encoded as UTC), or false if there is none up to limit.
	rawNext func(from, limit time.Time) (time.Time, bool)

	// memo of the last rawNext call (a plan is used by one goroutine).
	memo struct {
		valid       bool
		from, limit time.Time
		w           time.Time
		ok          bool
	}
}

// nextWall is rawNext with a one-entry memo. A result "the first match ≥ F
// is W" also answers every query with F ≤ from ≤ W, and "no match in
// [F, L]" every query with F ≤ from and limit ≤ L. This keeps sparse or
// never-matching cron expressions from being searched again for each DST
// period and for each step of NextN.
func (p *plan) nextWall(from, limit time.Time) (time.Time, bool) {
	m := &p.memo
	if m.valid && !from.Before(m.from) {
		if m.ok && !m.w.Before(from) {
			return m.w, !m.w.After(limit)
		}
		if !m.ok && !limit.After(m.limit) {
			return time.Time{}, false
		}
	}
	w, ok := p.rawNext(from, limit)
	m.valid, m.from, m.limit, m.w, m.ok = true, from, limit, w, ok
	return w, ok
}

// compile performs the structural validation shared by Validate, Next and
// NextN.
func (s Spec) compile() (*plan, error) {
	loc, err := loadZone(s.TZ)
	if err != nil {
		return nil, err
	}
	if err := s.checkFields(); err != nil {
		return nil, err
	}
	p := &plan{spec: s, loc: loc}
	if err := p.setKind(); err != nil {
		return nil, err
	}
	return p, nil
}

// specField is a field of a Spec that some kinds use.
type specField struct {
	name  string
	value int
	used  bool // by the spec's kind
}

// checkFields checks that the fields the spec's kind does not use are
// zero, and that the minute and hour it uses are in range.
func (s Spec) checkFields() error {
	minute := specField{"minute", s.Minute, s.Kind != KindInterval && s.Kind != KindCron}
	hour := specField{"hour", s.Hour, minute.used && s.Kind != KindHourly}
	day := specField{"day", s.Day, s.Kind == KindMonthly}
	weekday := specField{"weekday", int(s.Weekday), s.Kind == KindWeekly}
	if err := s.checkUnused(minute, hour, day, weekday); err != nil {
		return err
	}
	if minute.used && (s.Minute < 0 || s.Minute > 59) {
		return rangeErr("minute", s.Minute, 0, 59)
	}
	if hour.used && (s.Hour < 0 || s.Hour > 23) {
		return rangeErr("hour", s.Hour, 0, 23)
	}
	return nil
}

func (s Spec) checkUnused(fields ...specField) error {
	for _, f := range fields {
		if !f.used && f.value != 0 {
			return invalidf(f.name, fmt.Sprint(f.value), "value %d is not used by kind %q and must be zero", f.value, string(s.Kind))
		}
	}
	if s.Kind != KindInterval && s.Every != 0 {
		return invalidf("every", s.Every.String(), "value %v is not used by kind %q and must be zero", s.Every, string(s.Kind))
	}
	if s.Kind != KindCron && s.Expr != "" {
		return invalidf("expr", s.Expr, "value %q is not used by kind %q and must be empty", s.Expr, string(s.Kind))
	}
	return nil
}

// setKind checks the fields proper to the spec's kind and sets the plan's
// next function.
func (p *plan) setKind() error {
	s := p.spec
	switch s.Kind {
	case KindInterval:
		switch {
		case s.Every <= 0:
			return invalidf("every", s.Every.String(), "value %v must be positive", s.Every)
		case s.Every%time.Second != 0:
			return invalidf("every", s.Every.String(), "value %v is not a whole number of seconds", s.Every)
		}
	case KindHourly:
		p.rawNext = p.hourly
	case KindDaily:
		p.rawNext = p.daily
	case KindWeekly:
		if s.Weekday < time.Sunday || s.Weekday > time.Saturday {
			return rangeErr("weekday", int(s.Weekday), 0, 6)
		}
		p.rawNext = p.weekly
	case KindMonthly:
		if s.Day < 1 || s.Day > 31 {
			return rangeErr("day", s.Day, 1, 31)
		}
		p.rawNext = p.monthly
	case KindCron:
		c, err := parseCron(s.Expr)
		if err != nil {
			return err
		}
		p.cron = c
		p.rawNext = c.nextWall
	default:
		return invalidf("kind", string(s.Kind), "value %q is not one of interval, hourly, daily, weekly, monthly, cron", string(s.Kind))
	}
	return nil
}

// zones caches loaded locations: time.LoadLocation reads the zoneinfo
// database on every call.
var zones sync.Map // string -> *time.Location

func loadZone(tz string) (*time.Location, error) {
	if tz == "" || tz == "UTC" {
		return time.UTC, nil
	}
	if l, ok := zones.Load(tz); ok {
		return l.(*time.Location), nil
	}
	if tz == "Local" {
		return nil, &FieldError{Err: ErrUnknownZone, Field: "tz", Value: tz,
			Reason: `value "Local" is not an IANA zone name`}
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, &FieldError{Err: ErrUnknownZone, Field: "tz", Value: tz,
			Reason: fmt.Sprintf("value %q: %v", tz, err)}
	}
	zones.Store(tz, loc)
	return loc, nil
}

// Calendar kinds, in wall-clock time encoded as UTC.

func (p *plan) hourly(from, limit time.Time) (time.Time, bool) {
	t := from.Truncate(time.Hour).Add(time.Duration(p.spec.Minute) * time.Minute)
	if t.Before(from) {
		t = t.Add(time.Hour)
	}
	return t, !t.After(limit)
}

func (p *plan) daily(from, limit time.Time) (time.Time, bool) {
	t := atClock(from, p.spec.Hour, p.spec.Minute)
	if t.Before(from) {
		t = t.AddDate(0, 0, 1)
	}
	return t, !t.After(limit)
}

func (p *plan) weekly(from, limit time.Time) (time.Time, bool) {
	delta := (int(p.spec.Weekday) - int(from.Weekday()) + 7) % 7
	t := atClock(from, p.spec.Hour, p.spec.Minute).AddDate(0, 0, delta)
	if t.Before(from) {
		t = t.AddDate(0, 0, 7)
	}
	return t, !t.After(limit)
}

func (p *plan) monthly(from, limit time.Time) (time.Time, bool) {
	y, m := from.Year(), from.Month()
	for range 48 { // a day ≤ 31 occurs at least every 2 months
		if p.spec.Day <= daysIn(y, m) {
			t := time.Date(y, m, p.spec.Day, p.spec.Hour, p.spec.Minute, 0, 0, time.UTC)
			if !t.Before(from) {
				return t, !t.After(limit)
			}
		}
		if m++; m > time.December {
			y, m = y+1, time.January
		}
	}
	return time.Time{}, false
}

func atClock(t time.Time, hour, minute int) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), hour, minute, 0, 0, time.UTC)
}

func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// horizon bounds every search: no spec fires less often than this (Feb 29
// can be 8 years apart around 2100; 28 years is the weekday/leap cycle).
const horizonYears = 30

// sampleSize is how many consecutive fire times Validate inspects.
const sampleSize = 500

// checkSpacing verifies that a non-interval spec fires at all and that
// consecutive wall-clock fire times are at least minInterval apart.
func (p *plan) checkSpacing(minInterval time.Duration) error {
	ref := time.Date(2001, time.January, 1, 0, 0, 0, 0, time.UTC)
	limit := ref.AddDate(horizonYears, 0, 0)
	field, value := "kind", string(p.spec.Kind)
	if p.cron != nil {
		field, value = "expr", p.cron.text
	}
	w, ok := p.nextWall(ref, limit)
	if !ok {
		return &FieldError{Err: ErrNoFireTime, Field: field, Value: value,
			Reason: fmt.Sprintf("value %q never fires (no match within %d years)", value, horizonYears)}
	}
	if minInterval <= 0 {
		return nil
	}
	for range sampleSize {
		next, ok := p.nextWall(w.Add(time.Nanosecond), limit)
		if !ok {
			return nil
		}
		if gap := next.Sub(w); gap < minInterval {
			return &FieldError{Err: ErrIntervalTooShort, Field: field, Value: value,
				Reason: fmt.Sprintf("value %q fires %v apart, more often than the minimum interval %v", value, gap, minInterval)}
		}
		w = next
	}
	return nil
}

// next is Spec.Next on a compiled spec.
func (p *plan) next(after time.Time) (time.Time, error) {
	if p.spec.Kind == KindInterval {
		return after.Add(p.spec.Every).UTC(), nil
	}
	if t, ok := p.nextInstant(after.UTC()); ok {
		return t, nil
	}
	field, value := "kind", string(p.spec.Kind)
	if p.cron != nil {
		field, value = "expr", p.cron.text
	}
	return time.Time{}, &FieldError{Err: ErrNoFireTime, Field: field, Value: value,
		Reason: fmt.Sprintf("value %q has no fire time within %d years after %s", value, horizonYears, after.UTC().Format(time.RFC3339))}
}

// Validating a cron expression samples its fire times (milliseconds);
// crons registered, read or listed by the thousand usually share a few
// schedules, so the first 10000 answers are kept.
var (
	validated      sync.Map // validation -> validResult
	validatedCount atomic.Int64
)

type validation struct {
	s   Spec
	min time.Duration
}

type validResult struct{ err error }

// ValidateCached is s.Validate(minInterval), remembered.
func ValidateCached(s Spec, minInterval time.Duration) error {
	k := validation{s, minInterval}
	if v, ok := validated.Load(k); ok {
		return v.(validResult).err
	}
	err := s.Validate(minInterval)
	if validatedCount.Add(1) <= 10000 {
		validated.Store(k, validResult{err})
	}
	return err
}
