package cronspec

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestGronxMatchesSearch checks gronx's next tick (on wall-clock times in
// UTC) against this package's independent fallback search.
func TestGronxMatchesSearch(t *testing.T) {
	t.Parallel()
	exprs := []string{
		"* * * * *", "*/7 * * * *", "5/10 3-22/4 * * *", "0 9 * * 1-5", "30 2 * * *",
		"0 0 L * *", "0 12 15W * *", "0 9 ? * 5L", "0 9 * * 1#2", "0 0 13 * 5",
		"0 0 29 2 *", "59 23 31 12 *", "0 0 1,15 * mon", "*/15 * * * * *", "10-20/5 0 0 * * *",
		"0 0 * * 0-7/3", "0 0 31 */2 *", "0 0 1W * *", "0 0 * * 7#1", "@weekly",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, expr := range exprs {
		c, err := parseCron(expr)
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		for range 40 {
			from := base.Add(time.Duration(rng.Int64N(int64(4 * 365 * 24 * time.Hour)))).Truncate(time.Second)
			limit := from.AddDate(horizonYears, 0, 0)
			g, gok := c.nextWall(from, limit)
			s, sok := c.search(from, limit)
			if gok != sok || !g.Equal(s) {
				t.Fatalf("%q from %v: gronx %v (%v), search %v (%v)", expr, from, g, gok, s, sok)
			}
		}
	}
}

// referenceInstants is a brute-force implementation of the package's DST
// rules, written differently from nextInstant: it resolves every scheduled
// wall-clock time independently (referenceResolve) and returns the sorted
// set of instants. The result contains every fire instant after start up to
// and including the first one after end.
func referenceInstants(p *plan, start, end time.Time) []time.Time {
	// UTC offsets lie within [-12h, +14h], so a wall time w fires at an
	// instant within (w-15h, w+13h): walls before start-14h fire before
	// start, and once w-15h is past the first instant after end we have
	// everything.
	from := start.UTC().Add(-14 * time.Hour)
	limit := end.UTC().AddDate(1, 0, 0)
	set := map[time.Time]bool{}
	var firstAfterEnd time.Time
	for w, ok := p.nextWall(from, limit); ok; w, ok = p.nextWall(w.Add(time.Nanosecond), limit) {
		if !firstAfterEnd.IsZero() && w.Add(-15*time.Hour).After(firstAfterEnd) {
			break
		}
		inst := referenceResolve(p.loc, w)
		set[inst] = true
		if inst.After(end) && (firstAfterEnd.IsZero() || inst.Before(firstAfterEnd)) {
			firstAfterEnd = inst
		}
	}
	out := make([]time.Time, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// referenceResolve maps wall-clock time w (encoded as UTC) to an instant:
// the earliest instant whose local reading is w; if there is none (a gap),
// the earliest candidate instant whose local reading is after w, which is w
// read with the pre-transition offset.
func referenceResolve(loc *time.Location, w time.Time) time.Time {
	var offsets []time.Duration
	for d := -30 * time.Hour; d <= 30*time.Hour; d += 30 * time.Minute {
		_, off := w.Add(d).In(loc).Zone()
		if o := time.Duration(off) * time.Second; !slices.Contains(offsets, o) {
			offsets = append(offsets, o)
		}
	}
	var exact, after []time.Time
	for _, o := range offsets {
		inst := w.Add(-o)
		l := inst.In(loc)
		reading := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
		switch {
		case reading.Equal(w):
			exact = append(exact, inst)
		case reading.After(w):
			after = append(after, inst)
		}
	}
	if len(exact) > 0 {
		return slices.MinFunc(exact, time.Time.Compare)
	}
	return slices.MinFunc(after, time.Time.Compare)
}

func TestNextMatchesReference(t *testing.T) {
	t.Parallel()
	zones := []string{
		"America/New_York", "Europe/London", "Australia/Sydney", // southern hemisphere
		"Australia/Lord_Howe", // 30-minute DST shift
		"Asia/Kolkata",        // +05:30, no DST
		"America/Santiago",    // transitions at local midnight
		"Pacific/Apia",        // skipped 2011-12-30 entirely
	}
	specs := []Spec{
		Hourly(0), Hourly(30), Hourly(45), Daily(0, 0), Daily(1, 30), Daily(2, 30), Daily(23, 45),
		Weekly(time.Sunday, 2, 15), Monthly(30, 0, 30),
		Cron("*/20 * * * *"), Cron("30 1 * * *"), Cron("0 0,2 * * *"), Cron("15 2-3 * * 0"), Cron("15,45 */20 0-3,23 * * *"),
	}
	for _, zone := range zones {
		t.Run(zone, func(t *testing.T) {
			t.Parallel()
			windows := transitionWindows(t, zone)
			for _, s := range specs {
				s := s.In(zone)
				p, err := s.compile()
				if err != nil {
					t.Fatal(err)
				}
				for _, start := range windows {
					// Walk 3 days from start, comparing every step with the
					// reference, and also probe Next between fire times.
					end := start.Add(3 * 24 * time.Hour)
					ref := referenceInstants(p, start, end)
					refNext := func(after time.Time) time.Time {
						i, found := slices.BinarySearchFunc(ref, after, time.Time.Compare)
						if found {
							i++
						}
						return ref[i]
					}
					for after := start; after.Before(end); {
						got, err := s.Next(after)
						if err != nil {
							t.Fatalf("%v Next(%v): %v", s, after, err)
						}
						if want := refNext(after); !got.Equal(want) {
							t.Fatalf("%v Next(%v) = %v, reference %v", s, after, got, want)
						}
						if !got.After(after) {
							t.Fatalf("%v Next(%v) = %v: not after", s, after, got)
						}
						mid := after.Add(got.Sub(after) / 2).Truncate(time.Second)
						if m, _ := s.Next(mid); mid.After(after) && !m.Equal(got) {
							t.Fatalf("%v Next(%v) = %v, want %v", s, mid, m, got)
						}
						after = got
					}
				}
			}
		})
	}
}

// transitionWindows returns, for each UTC offset change of zone in 2026
// (and the 2011 date-line jump of Pacific/Apia), an instant 36 hours before
// it. Zones without transitions get one arbitrary window.
func transitionWindows(t *testing.T, zone string) []time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	probe := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
	if zone == "Pacific/Apia" {
		probe = time.Date(2011, 12, 1, 0, 0, 0, 0, loc)
	}
	for range 2 {
		_, end := probe.ZoneBounds()
		if end.IsZero() || end.Year() > 2026 {
			break
		}
		out = append(out, end.Add(-36*time.Hour))
		probe = end
	}
	if len(out) == 0 {
		out = append(out, time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC))
	}
	return out
}

// TestDailyFiresOncePerLocalDay checks the headline rule over a year in
// zones with DST: a daily job at any half hour fires exactly once per local
// calendar day, at its wall-clock time unless that time did not exist.
func TestDailyFiresOncePerLocalDay(t *testing.T) {
	t.Parallel()
	for _, zone := range []string{"America/New_York", "Europe/London", "Australia/Lord_Howe"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for hm := 0; hm < 24*60; hm += 30 {
			s := Daily(hm/60, hm%60).In(zone)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
			times, err := s.NextN(start.Add(-time.Nanosecond), 366)
			if err != nil {
				t.Fatal(err)
			}
			for i, tm := range times {
				l := tm.In(loc)
				want := start.AddDate(0, 0, i)
				if l.Year() != want.Year() || l.YearDay() != want.YearDay() {
					t.Fatalf("%v fire %d at %v, want local day %v", s, i, l, want.Format(time.DateOnly))
				}
				if l.Hour()*60+l.Minute() != hm {
					// Only allowed when hm did not exist that day.
					wall := time.Date(l.Year(), l.Month(), l.Day(), hm/60, hm%60, 0, 0, loc)
					if r := wall.In(loc); r.Hour()*60+r.Minute() == hm && r.Day() == l.Day() {
						t.Fatalf("%v fired at %v although %02d:%02d existed (%v)", s, l, hm/60, hm%60, r)
					}
				}
			}
		}
	}
}
