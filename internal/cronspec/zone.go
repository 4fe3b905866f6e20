package cronspec

import (
	"time"
	// The IANA zone database, for hosts without one (a scratch or
	// distroless container): without it every cron in a zone is refused
	// there with ErrUnknownZone. The host's database, when it has one, is
	// read first; this adds about 450 KB to a binary.
	_ "time/tzdata"
)

// nextInstant maps the spec's wall-clock schedule to instants and returns
// the first one strictly after a (a UTC instant).
//
// The zone's timeline is a sequence of periods with a constant UTC offset
// (time.Time.ZoneBounds). Within a period [ps, pe) with offset o, whose
// predecessor had offset op, the fire instants are:
//
//   - regular: each scheduled wall time w with ps+max(o,op) ≤ w < pe+o
//     fires at w-o. Starting at ps+max(o,op) rather than ps+o drops, after
//     a fall-back transition (op > o), the wall times of the repeated hour:
//     they already fired at their first occurrence, in the previous period.
//   - gap: after a spring-forward transition (op < o) the wall times
//     ps+op ≤ w < ps+o do not exist; each fires at w-op, i.e. shifted
//     forward by the length of the gap (02:30 -> 03:30). If that coincides
//     with a regular fire time it is a single fire.
//
// Regular fire times increase with w, and gap fire times all precede the
// regular fire times of later periods, so the answer is the smaller of the
// first regular and the first gap candidate of the first period that has
// one.
func (p *plan) nextInstant(a time.Time) (time.Time, bool) {
	end := a.AddDate(horizonYears, 0, 0)
	// One wall-clock limit for every query (offsets are at most +14h), so
	// that the memo in nextWall can answer repeated queries.
	wallEnd := end.UTC().Add(15 * time.Hour)
	// probe selects the period to examine; a stays the lower bound.
	for probe := a; !probe.After(end); {
		local := probe.In(p.loc)
		ps, pe := zoneBounds(local)
		o := offsetAt(local)
		op := o
		if !ps.IsZero() {
			op = offsetAt(ps.Add(-time.Second).In(p.loc))
		}

		var best time.Time
		found := false

		// Wall times skipped by a spring-forward transition at ps. Asked
		// first: its lower bound is the smaller, so the memo can answer
		// the regular query below.
		if !ps.IsZero() && op < o {
			lo := later(wall(a, op).Add(time.Nanosecond), wall(ps, op))
			hi := wall(ps, o)
			if lo.Before(hi) {
				if w, ok := p.nextWall(lo, wallEnd); ok && w.Before(hi) {
					best, found = w.Add(-op), true
				}
			}
		}

		// Regular fire times in this period.
		lo := wall(a, o).Add(time.Nanosecond)
		if !ps.IsZero() {
			lo = later(lo, wall(ps, max(o, op)))
		}
		if w, ok := p.nextWall(lo, wallEnd); ok && (pe.IsZero() || w.Before(wall(pe, o))) {
			if t := w.Add(-o); !found || t.Before(best) {
				best, found = t, true
			}
		}

		if found {
			return best, true
		}
		if pe.IsZero() {
			return time.Time{}, false
		}
		probe = pe
	}
	return time.Time{}, false
}

// zoneBounds is t.ZoneBounds() made safe to iterate with: the period it
// returns always contains t. Go (as of 1.26, golang/go#81583) reports, for
// instants on 31 December of a leap year served by a zone's POSIX footer
// rule (years after the zone's last listed transition, e.g. 2040 in
// America/New_York), a period that ends at 00:00 UTC that day, before t.
// That boundary is not an offset change, so the period is taken to start
// at t and to end at the next boundary reported after t. Extra boundaries
// where the offset does not change are harmless to nextInstant.
func zoneBounds(t time.Time) (start, end time.Time) {
	start, end = t.ZoneBounds()
	if start.After(t) {
		start = t
	}
	if end.IsZero() || end.After(t) {
		return start, end
	}
	start = t
	for probe := t; probe.Sub(t) <= 48*time.Hour; probe = probe.Add(time.Hour) {
		s, e := probe.ZoneBounds()
		switch {
		case s.After(t):
			return start, s
		case e.IsZero():
			return start, time.Time{}
		case e.After(t):
			return start, e
		}
	}
	return start, t.Add(48 * time.Hour)
}

// offsetAt returns the UTC offset in effect at t (in t's location).
func offsetAt(t time.Time) time.Duration {
	_, off := t.Zone()
	return time.Duration(off) * time.Second
}

// wall returns the wall-clock reading of instant t under offset o, encoded
// as a UTC time.
func wall(t time.Time, o time.Duration) time.Time {
	return t.UTC().Add(o)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
