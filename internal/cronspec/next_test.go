package cronspec

import (
	"testing"
	"time"

	_ "time/tzdata" // tests must not depend on the host's zoneinfo
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("bad test time %q: %v", s, err)
	}
	return tm
}

func fmtTimes(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Format(time.RFC3339)
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestNextN checks hand-computed fire times (expected instants are written
// in UTC). New York: EST is UTC-5, EDT UTC-4; DST starts 2026-03-08 02:00
// EST (07:00Z) and ends 2026-11-01 02:00 EDT (06:00Z). London: GMT is UTC,
// BST UTC+1; BST starts 2026-03-29 01:00Z and ends 2026-10-25 01:00Z.
func TestNextN(t *testing.T) {
	t.Parallel()
	const ny, london = "America/New_York", "Europe/London"
	tests := []struct {
		name  string
		spec  Spec
		after string
		want  []string
	}{
		{
			name: "daily 09:00 NY across spring forward",
			spec: Daily(9, 0).In(ny), after: "2026-03-06T12:00:00Z",
			want: []string{"2026-03-06T14:00:00Z", "2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z", "2026-03-09T13:00:00Z"},
		},
		{
			name: "daily 09:00 NY across fall back",
			spec: Daily(9, 0).In(ny), after: "2026-10-30T12:00:00Z",
			want: []string{"2026-10-30T13:00:00Z", "2026-10-31T13:00:00Z", "2026-11-01T14:00:00Z", "2026-11-02T14:00:00Z"},
		},
		{
			name: "weekdays 9:00 NY over the spring-forward week",
			spec: Cron("0 9 * * 1-5").In(ny), after: "2026-03-04T00:00:00Z",
			want: []string{
				"2026-03-04T14:00:00Z", "2026-03-05T14:00:00Z", "2026-03-06T14:00:00Z", // Wed-Fri, EST
				"2026-03-09T13:00:00Z", "2026-03-10T13:00:00Z", "2026-03-11T13:00:00Z", // Mon-Wed, EDT
			},
		},
		{
			name: "weekdays 9:00 NY over the fall-back week",
			spec: Cron("0 9 * * 1-5").In(ny), after: "2026-10-28T00:00:00Z",
			want: []string{
				"2026-10-28T13:00:00Z", "2026-10-29T13:00:00Z", "2026-10-30T13:00:00Z", // Wed-Fri, EDT
				"2026-11-02T14:00:00Z", "2026-11-03T14:00:00Z", // Mon-Tue, EST
			},
		},
		{
			name: "daily 02:30 NY: gap fires at 03:30 EDT",
			spec: Daily(2, 30).In(ny), after: "2026-03-07T00:00:00Z",
			want: []string{"2026-03-07T07:30:00Z", "2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"},
		},
		{
			name: "daily 02:30 NY: gap, asked from inside the gap's hour",
			spec: Daily(2, 30).In(ny), after: "2026-03-08T07:00:00Z", // 03:00 EDT
			want: []string{"2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"},
		},
		{
			name: "daily 02:30 NY on the fall-back day fires once",
			spec: Daily(2, 30).In(ny), after: "2026-10-31T00:00:00Z",
			want: []string{"2026-10-31T06:30:00Z", "2026-11-01T07:30:00Z", "2026-11-02T07:30:00Z"},
		},
		{
			name: "daily 01:30 NY on the fall-back day fires at the first occurrence only",
			spec: Daily(1, 30).In(ny), after: "2026-10-31T12:00:00Z",
			want: []string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z", "2026-11-03T06:30:00Z"},
		},
		{
			name: "daily 01:30 NY: Next of the first occurrence skips the second",
			spec: Daily(1, 30).In(ny), after: "2026-11-01T05:30:00Z",
			want: []string{"2026-11-02T06:30:00Z"},
		},
		{
			name: "daily 01:30 NY: asked from inside the repeated hour",
			spec: Daily(1, 30).In(ny), after: "2026-11-01T06:00:00Z", // 01:00 EST
			want: []string{"2026-11-02T06:30:00Z"},
		},
		{
			name: "cron 30 2 * * * NY: gap fires at 03:30 EDT like daily",
			spec: Cron("30 2 * * *").In(ny), after: "2026-03-07T00:00:00Z",
			want: []string{"2026-03-07T07:30:00Z", "2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"},
		},
		{
			name: "6-field cron 0 30 2 * * * NY: same rule with seconds",
			spec: Cron("0 30 2 * * *").In(ny), after: "2026-03-07T12:00:00Z",
			want: []string{"2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"},
		},
		{
			name: "cron */15 NY through the gap: shifted fires merge with real ones",
			spec: Cron("*/15 * * * *").In(ny), after: "2026-03-08T06:30:00Z", // 01:30 EST
			want: []string{"2026-03-08T06:45:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z", "2026-03-08T07:30:00Z", "2026-03-08T07:45:00Z", "2026-03-08T08:00:00Z"},
		},
		{
			name: "cron */15 NY through the repeated hour: second occurrence skipped",
			spec: Cron("*/15 * * * *").In(ny), after: "2026-11-01T05:30:00Z", // 01:30 EDT
			want: []string{"2026-11-01T05:45:00Z", "2026-11-01T07:00:00Z", "2026-11-01T07:15:00Z"},
		},
		{
			name: "hourly London on the autumn day: no duplicates",
			spec: Hourly(0).In(london), after: "2026-10-24T22:30:00Z",
			want: []string{"2026-10-24T23:00:00Z", "2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"},
		},
		{
			name: "hourly :30 London on the autumn day",
			spec: Hourly(30).In(london), after: "2026-10-24T23:00:00Z",
			want: []string{"2026-10-24T23:30:00Z", "2026-10-25T00:30:00Z", "2026-10-25T02:30:00Z"},
		},
		{
			name: "hourly London on the spring day: every real hour, once",
			spec: Hourly(0).In(london), after: "2026-03-28T23:30:00Z",
			want: []string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z", "2026-03-29T03:00:00Z"},
		},
		{
			name: "hourly :30 London on the spring day",
			spec: Hourly(30).In(london), after: "2026-03-29T00:00:00Z",
			want: []string{"2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z", "2026-03-29T02:30:00Z"},
		},
		{
			name: "cron 30 1 * * * London on the autumn day fires once",
			spec: Cron("30 1 * * *").In(london), after: "2026-10-24T00:00:00Z",
			want: []string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		},
		{
			name: "cron 30 1 * * * London: Next of the first occurrence",
			spec: Cron("30 1 * * *").In(london), after: "2026-10-25T00:30:00Z",
			want: []string{"2026-10-26T01:30:00Z"},
		},
		{
			name: "cron 30 1 * * * London on the spring day: 02:30 BST",
			spec: Cron("30 1 * * *").In(london), after: "2026-03-28T00:00:00Z",
			want: []string{"2026-03-28T01:30:00Z", "2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"},
		},
		{
			name: "weekly Sunday 02:30 NY on the spring-forward Sunday",
			spec: Weekly(time.Sunday, 2, 30).In(ny), after: "2026-03-01T00:00:00Z",
			want: []string{"2026-03-01T07:30:00Z", "2026-03-08T07:30:00Z", "2026-03-15T06:30:00Z"},
		},
		{
			name: "monthly 31 skips short months and February",
			spec: Monthly(31, 9, 0), after: "2026-01-01T00:00:00Z",
			want: []string{
				"2026-01-31T09:00:00Z", "2026-03-31T09:00:00Z", "2026-05-31T09:00:00Z", "2026-07-31T09:00:00Z",
				"2026-08-31T09:00:00Z", "2026-10-31T09:00:00Z", "2026-12-31T09:00:00Z", "2027-01-31T09:00:00Z",
			},
		},
		{
			name: "monthly 30 skips February",
			spec: Monthly(30, 0, 0), after: "2026-01-30T00:00:00Z",
			want: []string{"2026-03-30T00:00:00Z", "2026-04-30T00:00:00Z"},
		},
		{
			name: "monthly 29 skips February 2027",
			spec: Monthly(29, 9, 0), after: "2027-01-30T00:00:00Z",
			want: []string{"2027-03-29T09:00:00Z"},
		},
		{
			name: "monthly 29 fires in February 2028 (leap)",
			spec: Monthly(29, 9, 0), after: "2028-01-30T00:00:00Z",
			want: []string{"2028-02-29T09:00:00Z", "2028-03-29T09:00:00Z"},
		},
		{
			name: "monthly 31 09:00 NY is 13:00Z in March",
			spec: Monthly(31, 9, 0).In(ny), after: "2026-03-01T00:00:00Z",
			want: []string{"2026-03-31T13:00:00Z", "2026-05-31T13:00:00Z"},
		},
		{
			name: "6-field */15 seconds",
			spec: Cron("*/15 * * * * *"), after: "2026-05-01T12:00:00Z",
			want: []string{"2026-05-01T12:00:15Z", "2026-05-01T12:00:30Z", "2026-05-01T12:00:45Z", "2026-05-01T12:01:00Z"},
		},
		{
			name: "6-field */15 seconds from a fractional second",
			spec: Cron("*/15 * * * * *"), after: "2026-05-01T11:59:59.5Z",
			want: []string{"2026-05-01T12:00:00Z", "2026-05-01T12:00:15Z"},
		},
		{
			name: "@hourly", spec: Cron("@hourly"), after: "2026-05-01T10:20:00Z",
			want: []string{"2026-05-01T11:00:00Z", "2026-05-01T12:00:00Z"},
		},
		{
			name: "@daily", spec: Cron("@daily"), after: "2026-05-01T10:20:00Z",
			want: []string{"2026-05-02T00:00:00Z", "2026-05-03T00:00:00Z"},
		},
		{
			name: "@midnight", spec: Cron("@midnight"), after: "2026-05-01T10:20:00Z",
			want: []string{"2026-05-02T00:00:00Z", "2026-05-03T00:00:00Z"},
		},
		{
			name: "@daily in New York", spec: Cron("@DAILY").In(ny), after: "2026-05-01T10:20:00Z",
			want: []string{"2026-05-02T04:00:00Z"},
		},
		{
			name: "@weekly (Sunday)", spec: Cron("@weekly"), after: "2026-05-01T10:20:00Z",
			want: []string{"2026-05-03T00:00:00Z", "2026-05-10T00:00:00Z"},
		},
		{
			name: "@monthly", spec: Cron("@monthly"), after: "2026-05-01T00:00:00Z",
			want: []string{"2026-06-01T00:00:00Z"},
		},
		{
			name: "@yearly", spec: Cron("@yearly"), after: "2026-05-01T00:00:00Z",
			want: []string{"2027-01-01T00:00:00Z"},
		},
		{
			name: "@annually", spec: Cron("@annually"), after: "2027-01-01T00:00:00Z",
			want: []string{"2028-01-01T00:00:00Z"},
		},
		{
			name: "names, lists and steps", spec: Cron("0 8-18/5 * JAN,jul mon-fri"), after: "2026-07-03T17:00:00Z", // Fri
			want: []string{"2026-07-03T18:00:00Z", "2026-07-06T08:00:00Z", "2026-07-06T13:00:00Z"},
		},
		{
			name: "last day of month (L)", spec: Cron("0 12 L * *"), after: "2028-02-01T00:00:00Z",
			want: []string{"2028-02-29T12:00:00Z", "2028-03-31T12:00:00Z", "2028-04-30T12:00:00Z"},
		},
		{
			name: "second Monday (1#2)", spec: Cron("0 9 * * 1#2"), after: "2026-03-01T00:00:00Z",
			want: []string{"2026-03-09T09:00:00Z", "2026-04-13T09:00:00Z"},
		},
		{
			name: "last Friday (5L)", spec: Cron("0 9 ? * 5L"), after: "2026-03-01T00:00:00Z",
			want: []string{"2026-03-27T09:00:00Z", "2026-04-24T09:00:00Z"},
		},
		{
			name: "nearest weekday (15W; 2026-08-15 is a Saturday)", spec: Cron("0 9 15W * *"), after: "2026-08-01T00:00:00Z",
			want: []string{"2026-08-14T09:00:00Z", "2026-09-15T09:00:00Z"},
		},
		{
			name: "Feb 29 every 4 years", spec: Cron("0 0 29 2 *"), after: "2028-03-01T00:00:00Z",
			want: []string{"2032-02-29T00:00:00Z"},
		},
		{
			name: "Sunday as 7", spec: Cron("0 0 * * 7"), after: "2026-05-01T00:00:00Z",
			want: []string{"2026-05-03T00:00:00Z"},
		},
		{
			name: "day-of-month OR day-of-week when both are restricted", spec: Cron("0 0 13 * 5"), after: "2026-03-01T00:00:00Z",
			want: []string{"2026-03-06T00:00:00Z", "2026-03-13T00:00:00Z", "2026-03-20T00:00:00Z"},
		},
		{
			// Go's ZoneBounds misreports 31 Dec of leap years served by the
			// zone's footer rule (golang/go#81583); this used to hang.
			name: "daily 09:00 NY over 31 Dec 2040 (leap year, footer rule)",
			spec: Daily(9, 0).In(ny), after: "2040-12-30T00:00:00Z",
			want: []string{"2040-12-30T14:00:00Z", "2040-12-31T14:00:00Z", "2041-01-01T14:00:00Z"},
		},
		{
			name: "cron 0 0 1 1 * NY from 31 Dec 2040",
			spec: Cron("0 0 1 1 *").In(ny), after: "2040-12-31T12:00:00Z",
			want: []string{"2041-01-01T05:00:00Z", "2042-01-01T05:00:00Z"},
		},
		{
			name: "daily 02:30 NY across the 2041 spring forward (footer rule)",
			spec: Daily(2, 30).In(ny), after: "2041-03-09T00:00:00Z",
			want: []string{"2041-03-09T07:30:00Z", "2041-03-10T07:30:00Z", "2041-03-11T06:30:00Z"},
		},
		{
			name: "interval ignores zones", spec: Interval(90 * time.Second).In(ny), after: "2026-03-08T06:59:00Z",
			want: []string{"2026-03-08T07:00:30Z", "2026-03-08T07:02:00Z"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			after := mustTime(t, tt.after)
			got, err := tt.spec.NextN(after, len(tt.want))
			if err != nil {
				t.Fatalf("%v.NextN: %v", tt.spec, err)
			}
			if g := fmtTimes(got); !equalStrings(g, tt.want) {
				t.Fatalf("%v.NextN(%s):\n got %v\nwant %v", tt.spec, tt.after, g, tt.want)
			}
			// Next agrees with NextN, returns UTC and is strictly after.
			next, err := tt.spec.Next(after)
			if err != nil {
				t.Fatal(err)
			}
			if !next.Equal(got[0]) || next.Location() != time.UTC || !next.After(after) {
				t.Fatalf("Next(%s) = %v, want %v in UTC", tt.after, next, got[0])
			}
			// The zone of `after` is irrelevant.
			if tt.spec.TZ != "" {
				loc, _ := time.LoadLocation(tt.spec.TZ)
				n2, err := tt.spec.Next(after.In(loc))
				if err != nil || !n2.Equal(next) {
					t.Fatalf("Next(after in %s) = %v, %v; want %v", tt.spec.TZ, n2, err, next)
				}
			}
		})
	}
}

func TestIntervalNoDrift(t *testing.T) {
	t.Parallel()
	s := Interval(90 * time.Second)
	start := mustTime(t, "2026-03-08T06:00:00.123456789Z")
	prev := start
	for i := range 1000 {
		next, err := s.Next(prev)
		if err != nil {
			t.Fatal(err)
		}
		if d := next.Sub(prev); d != 90*time.Second {
			t.Fatalf("iteration %d: Next(%v) - prev = %v, want exactly 90s", i, prev, d)
		}
		prev = next
	}
	if want := mustTime(t, "2026-03-09T07:00:00.123456789Z"); !prev.Equal(want) { // 90000s = 25h later
		t.Fatalf("after 1000 iterations: %v, want %v", prev, want)
	}
	// NextN is the same chain.
	got, err := s.NextN(start, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !got[999].Equal(prev) {
		t.Fatalf("NextN[999] = %v, want %v", got[999], prev)
	}
}

func TestNextReturnsUTC(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	after := time.Date(2026, 5, 1, 8, 0, 0, 0, ny)
	for _, s := range []Spec{Interval(time.Minute).In("America/New_York"), Daily(9, 0).In("America/New_York"), Cron("@hourly")} {
		got, err := s.Next(after)
		if err != nil {
			t.Fatal(err)
		}
		if got.Location() != time.UTC {
			t.Errorf("%v: Next returned location %v, want UTC", s, got.Location())
		}
	}
}

func TestNextNEdgeCases(t *testing.T) {
	t.Parallel()
	after := mustTime(t, "2026-05-01T00:00:00Z")
	got, err := Daily(9, 0).NextN(after, 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("NextN(0) = %v, %v; want empty", got, err)
	}
	if _, err := Daily(9, 0).NextN(after, -1); err == nil {
		t.Fatal("NextN(-1): want error")
	}
}
