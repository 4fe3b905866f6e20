package cronspec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		spec     Spec
		min      time.Duration
		is       error  // sentinel the error must match (besides ErrInvalidSpec)
		field    string // FieldError.Field
		pos      int    // FieldError.Pos
		contains string // substring of the message
	}{
		{name: "cron minute 61", spec: Cron("61 * * * *"), is: ErrInvalidSpec, field: "minute", pos: 1,
			contains: `cronspec: invalid spec: field "minute" (1st) value 61 out of range 0-59 in cron expression "61 * * * *"`},
		{name: "cron hour 25", spec: Cron("* 25 * * *"), is: ErrInvalidSpec, field: "hour", pos: 2,
			contains: `field "hour" (2nd) value 25 out of range 0-23`},
		{name: "6-field second 60", spec: Cron("60 * * * * *"), is: ErrInvalidSpec, field: "second", pos: 1, contains: `field "second" (1st)`},
		{name: "6-field minute is 2nd", spec: Cron("0 60 * * * *"), is: ErrInvalidSpec, field: "minute", pos: 2, contains: `field "minute" (2nd)`},
		{name: "day-of-month 0", spec: Cron("0 0 0 * *"), is: ErrInvalidSpec, field: "day-of-month", pos: 3, contains: "out of range 1-31"},
		{name: "month 13", spec: Cron("0 0 * 13 *"), is: ErrInvalidSpec, field: "month", pos: 4, contains: "out of range 1-12"},
		{name: "bad month name", spec: Cron("0 0 * foo *"), is: ErrInvalidSpec, field: "month", pos: 4, contains: "not a number or name"},
		{name: "day-of-week 8", spec: Cron("0 0 * * 8"), is: ErrInvalidSpec, field: "day-of-week", pos: 5, contains: "out of range 0-7"},
		{name: "step 0", spec: Cron("*/0 * * * *"), is: ErrInvalidSpec, field: "minute", pos: 1, contains: "step 0 out of range 1-60"},
		{name: "step not a number", spec: Cron("*/x * * * *"), is: ErrInvalidSpec, field: "minute", pos: 1, contains: "is not a number"},
		{name: "reversed range", spec: Cron("0 5-1 * * *"), is: ErrInvalidSpec, field: "hour", pos: 2, contains: "start 5 is after end 1"},
		{name: "range out of bounds", spec: Cron("0 20-24 * * *"), is: ErrInvalidSpec, field: "hour", pos: 2, contains: "value 24 out of range 0-23"},
		{name: "empty list item", spec: Cron("1,,2 * * * *"), is: ErrInvalidSpec, field: "minute", pos: 1, contains: "empty list item"},
		{name: "negative number", spec: Cron("-1 * * * *"), is: ErrInvalidSpec, field: "minute", pos: 1},
		{name: "? in minute", spec: Cron("? * * * *"), is: ErrInvalidSpec, field: "minute", pos: 1, contains: "only allowed in day-of-month and day-of-week"},
		{name: "L in hour", spec: Cron("0 L * * *"), is: ErrInvalidSpec, field: "hour", pos: 2, contains: "modifiers"},
		{name: "LW unsupported", spec: Cron("0 0 LW * *"), is: ErrInvalidSpec, field: "day-of-month", pos: 3, contains: "LW"},
		{name: "W day out of range", spec: Cron("0 0 32W * *"), is: ErrInvalidSpec, field: "day-of-month", pos: 3, contains: "out of range 1-31"},
		{name: "# occurrence 6", spec: Cron("0 0 * * mon#6"), is: ErrInvalidSpec, field: "day-of-week", pos: 5, contains: "must be 1-5"},
		{name: "# in day-of-month", spec: Cron("0 0 1#2 * *"), is: ErrInvalidSpec, field: "day-of-month", pos: 3},
		{name: "month name in day-of-week", spec: Cron("0 0 * * JUL"), is: ErrInvalidSpec, field: "day-of-week", pos: 5, contains: `value "JUL" is not valid`},
		{name: "bad L in day-of-week", spec: Cron("0 0 * * XYZL"), is: ErrInvalidSpec, field: "day-of-week", pos: 5, contains: `value "XYZL" is not valid`},
		{name: "L day out of range", spec: Cron("0 0 * * 8L"), is: ErrInvalidSpec, field: "day-of-week", pos: 5, contains: "value 8 out of range 0-7"},
		{name: "7 fields with year", spec: Cron("* * * * * * 2026"), is: ErrInvalidSpec, field: "expr",
			contains: `field "expr" has 7 fields; the year field is not supported (want 5 fields, or 6 with seconds first) in cron expression "* * * * * * 2026"`},
		{name: "6 fields with trailing year", spec: Cron("0 0 * * * 2026"), is: ErrInvalidSpec, field: "expr", contains: "looks like a year"},
		{name: "4 fields", spec: Cron("* * * *"), is: ErrInvalidSpec, field: "expr", contains: "has 4 fields"},
		{name: "empty expression", spec: Cron("  "), is: ErrInvalidSpec, field: "expr", contains: "is empty"},
		{name: "@reboot", spec: Cron("@reboot"), is: ErrInvalidSpec, field: "expr", contains: "not a supported shortcut"},
		{name: "gronx-only @always", spec: Cron("@always"), is: ErrInvalidSpec, field: "expr"},
		{name: "@every in a cron spec", spec: Cron("@every 5m"), is: ErrInvalidSpec, field: "expr", contains: "interval"},
		{name: "never fires", spec: Cron("0 0 30 2 *"), is: ErrNoFireTime, field: "expr", contains: "never fires"},
		{name: "unknown zone", spec: Daily(9, 0).In("Mars/Olympus"), is: ErrUnknownZone, field: "tz",
			contains: `cronspec: unknown time zone: field "tz" value "Mars/Olympus"`},
		{name: "unknown zone on cron", spec: Cron("@daily").In("Mars/Olympus"), is: ErrUnknownZone, field: "tz"},
		{name: "Local is not IANA", spec: Daily(9, 0).In("Local"), is: ErrUnknownZone, field: "tz"},
		{name: "interval 500ms", spec: Interval(500 * time.Millisecond), is: ErrInvalidSpec, field: "every", contains: "whole number of seconds"},
		{name: "interval 500ms below minimum", spec: Interval(500 * time.Millisecond), min: time.Second, is: ErrInvalidSpec, field: "every"},
		{name: "interval 1.5s", spec: Interval(1500 * time.Millisecond), is: ErrInvalidSpec, field: "every", contains: "whole number of seconds"},
		{name: "interval zero", spec: Interval(0), is: ErrInvalidSpec, field: "every", contains: "must be positive"},
		{name: "interval negative", spec: Interval(-time.Minute), is: ErrInvalidSpec, field: "every"},
		{name: "interval below minimum", spec: Interval(30 * time.Second), min: time.Minute, is: ErrIntervalTooShort, field: "every",
			contains: `cronspec: interval too short: field "every" value 30s is shorter than the minimum interval 1m0s`},
		{name: "6-field cron below minimum", spec: Cron("*/15 * * * * *"), min: time.Minute, is: ErrIntervalTooShort, field: "expr", contains: "15s apart"},
		{name: "cron with a short gap once a day", spec: Cron("0 0,23 * * *"), min: 2 * time.Hour, is: ErrIntervalTooShort, field: "expr", contains: "1h0m0s apart"},
		{name: "hourly below minimum", spec: Hourly(0), min: 2 * time.Hour, is: ErrIntervalTooShort, field: "kind"},
		{name: "Daily(24,0)", spec: Daily(24, 0), is: ErrInvalidSpec, field: "hour",
			contains: `cronspec: invalid spec: field "hour" value 24 out of range 0-23`},
		{name: "Daily(9,60)", spec: Daily(9, 60), is: ErrInvalidSpec, field: "minute", contains: "value 60 out of range 0-59"},
		{name: "Hourly(-1)", spec: Hourly(-1), is: ErrInvalidSpec, field: "minute"},
		{name: "Weekly(7)", spec: Weekly(7, 9, 0), is: ErrInvalidSpec, field: "weekday", contains: "value 7 out of range 0-6"},
		{name: "Monthly(32)", spec: Monthly(32, 9, 0), is: ErrInvalidSpec, field: "day", contains: "value 32 out of range 1-31"},
		{name: "Monthly(0)", spec: Monthly(0, 9, 0), is: ErrInvalidSpec, field: "day"},
		{name: "unknown kind", spec: Spec{Kind: "yearly"}, is: ErrInvalidSpec, field: "kind"},
		{name: "zero spec", spec: Spec{}, is: ErrInvalidSpec, field: "kind"},
		{name: "unused field", spec: Spec{Kind: KindDaily, Hour: 9, Day: 3}, is: ErrInvalidSpec, field: "day", contains: "not used by kind"},
		{name: "unused hour on hourly", spec: Spec{Kind: KindHourly, Hour: 3}, is: ErrInvalidSpec, field: "hour"},
		{name: "unused every", spec: Spec{Kind: KindCron, Expr: "@daily", Every: time.Second}, is: ErrInvalidSpec, field: "every"},
		{name: "unused expr", spec: Spec{Kind: KindInterval, Every: time.Second, Expr: "@daily"}, is: ErrInvalidSpec, field: "expr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.spec.Validate(tt.min)
			if err == nil {
				t.Fatalf("%#v.Validate(%v) = nil, want error", tt.spec, tt.min)
			}
			if !errors.Is(err, ErrInvalidSpec) || !errors.Is(err, tt.is) {
				t.Fatalf("error %q: errors.Is(ErrInvalidSpec)=%v, errors.Is(%v)=%v", err,
					errors.Is(err, ErrInvalidSpec), tt.is, errors.Is(err, tt.is))
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %q is %T, want *FieldError", err, err)
			}
			if fe.Field != tt.field || fe.Pos != tt.pos {
				t.Fatalf("error %q names field %q (pos %d), want %q (pos %d)", err, fe.Field, fe.Pos, tt.field, tt.pos)
			}
			if !strings.Contains(err.Error(), `field "`+tt.field+`"`) {
				t.Fatalf("error %q does not name field %q", err, tt.field)
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Fatalf("error %q does not contain %q", err, tt.contains)
			}
			// Structural errors also make Next fail.
			if tt.min == 0 && !errors.Is(tt.is, ErrNoFireTime) {
				if _, nerr := tt.spec.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); !errors.Is(nerr, tt.is) {
					t.Fatalf("Next error = %v, want %v", nerr, tt.is)
				}
			}
		})
	}
}

func TestValidateOK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec Spec
		min  time.Duration
	}{
		{Interval(time.Second), time.Second},
		{Interval(90 * time.Second), time.Minute},
		{Interval(time.Minute).In("America/New_York"), 0},
		{Hourly(59).In("Europe/London"), time.Hour},
		{Daily(23, 59).In("UTC"), 24 * time.Hour},
		{Weekly(time.Saturday, 0, 0), 7 * 24 * time.Hour},
		{Monthly(31, 9, 0).In("Asia/Kolkata"), 28 * 24 * time.Hour},
		{Cron("0 9 * * 1-5").In("America/New_York"), time.Hour},
		{Cron("*/15 * * * * *"), 15 * time.Second},
		{Cron("0 0 29 2 *"), 0},
		{Cron("0 12 L * *"), 0},
		{Cron("0 9 15W * *"), 0},
		{Cron("0 9 ? * 5L"), 0},
		{Cron("0 9 ? * FRI#3"), 0},
		{Cron("0 9 ? * fril"), 0},
		{Cron("0 0 * * 5-7"), 0},
		{Cron("0 0 * * sun,sat"), 0},
		{Cron("0 0 * jul-aug/1 *"), 0},
		{Cron("5/10 * * * *"), time.Minute},
		{Cron("@MIDNIGHT"), 24 * time.Hour},
		{Cron("  0   9 * *  1-5 "), 0},
	}
	for _, tt := range tests {
		if err := tt.spec.Validate(tt.min); err != nil {
			t.Errorf("%v.Validate(%v) = %v", tt.spec, tt.min, err)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		want Spec
	}{
		{"every 30s", Interval(30 * time.Second)},
		{"@every 30s", Interval(30 * time.Second)},
		{"every 1h30m", Interval(90 * time.Minute)},
		{"hourly 15", Hourly(15)},
		{"hourly :05", Hourly(5)},
		{"daily 9:30", Daily(9, 30)},
		{"daily 00:00", Daily(0, 0)},
		{"weekly mon 09:00", Weekly(time.Monday, 9, 0)},
		{"weekly Sunday 23:59", Weekly(time.Sunday, 23, 59)},
		{"weekly 6 1:00", Weekly(time.Saturday, 1, 0)},
		{"monthly 31 9:00", Monthly(31, 9, 0)},
		{"0 9 * * 1-5", Cron("0 9 * * 1-5")},
		{"cron 0 9 * * 1-5", Cron("0 9 * * 1-5")},
		{"*/15 * * * * *", Cron("*/15 * * * * *")},
		{"@daily", Cron("@daily")},
		{"daily 9:30 (America/New_York)", Daily(9, 30).In("America/New_York")},
		{"cron 0 9 * * 1-5 (America/New_York)", Cron("0 9 * * 1-5").In("America/New_York")},
		{"daily 09:00 (UTC)", Daily(9, 0)},
	}
	for _, tt := range tests {
		got, err := Parse(tt.text)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.text, err)
			continue
		}
		if got != tt.want {
			t.Errorf("Parse(%q) = %#v, want %#v", tt.text, got, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text  string
		is    error
		field string
	}{
		{"every", ErrInvalidSpec, "every"},
		{"every 30", ErrInvalidSpec, "every"},
		{"every 500ms", ErrInvalidSpec, "every"},
		{"hourly", ErrInvalidSpec, "minute"},
		{"hourly 60", ErrInvalidSpec, "minute"},
		{"daily 25:00", ErrInvalidSpec, "hour"},
		{"daily 9", ErrInvalidSpec, "hour"},
		{"daily 9:7", ErrInvalidSpec, "hour"},
		{"daily 9:60", ErrInvalidSpec, "minute"},
		{"daily x:00", ErrInvalidSpec, "hour"},
		{"weekly funday 9:00", ErrInvalidSpec, "weekday"},
		{"weekly 7 9:00", ErrInvalidSpec, "weekday"},
		{"monthly 32 9:00", ErrInvalidSpec, "day"},
		{"monthly 31", ErrInvalidSpec, "day"},
		{"daily 9:30 (Mars/Olympus)", ErrUnknownZone, "tz"},
		{"daily 9:30 ()", ErrInvalidSpec, "tz"},
		{"61 * * * *", ErrInvalidSpec, "minute"},
		{"0 0 * * * 2026", ErrInvalidSpec, "expr"},
		{"", ErrInvalidSpec, "expr"},
		{"@reboot", ErrInvalidSpec, "expr"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.text)
		var fe *FieldError
		if !errors.Is(err, tt.is) || !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("Parse(%q) error = %v, want %v naming field %q", tt.text, err, tt.is, tt.field)
		}
	}
}

func TestStringAndRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec Spec
		want string
	}{
		{Cron("0 9 * * 1-5").In("America/New_York"), "cron 0 9 * * 1-5 (America/New_York)"},
		{Cron(" 0  9 * * 1-5"), "cron 0 9 * * 1-5 (UTC)"},
		{Interval(30 * time.Second), "every 30s"},
		{Interval(90 * time.Second), "every 1m30s"},
		{Hourly(5).In("Europe/London"), "hourly :05 (Europe/London)"},
		{Daily(9, 0), "daily 09:00 (UTC)"},
		{Weekly(time.Wednesday, 17, 30), "weekly Wed 17:30 (UTC)"},
		{Monthly(31, 9, 0).In("Asia/Tokyo"), "monthly 31 09:00 (Asia/Tokyo)"},
		{Spec{Kind: "nope"}, `invalid spec kind "nope"`},
	}
	for _, tt := range tests {
		if got := tt.spec.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.spec, got, tt.want)
		}
		if tt.spec.Validate(0) != nil {
			continue
		}
		back, err := Parse(tt.want)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.want, err)
			continue
		}
		if back.String() != tt.want {
			t.Errorf("Parse(%q).String() = %q", tt.want, back.String())
		}
	}
}

// TestNoFireTime checks that a never-matching expression is reported
// quickly (it used to be searched again for every DST period).
func TestNoFireTime(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{"0 0 30 2 *", "0 0 31 4,6,9,11 *", "* * 31 2 *"} {
		s := Cron(expr).In("America/New_York")
		if err := s.Validate(0); !errors.Is(err, ErrNoFireTime) {
			t.Errorf("%q: Validate = %v, want ErrNoFireTime", expr, err)
		}
		_, err := s.Next(time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC))
		var fe *FieldError
		if !errors.Is(err, ErrNoFireTime) || !errors.Is(err, ErrInvalidSpec) || !errors.As(err, &fe) || fe.Field != "expr" {
			t.Errorf("%q: Next error = %v, want ErrNoFireTime naming field \"expr\"", expr, err)
		}
		if got, err := s.NextN(time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC), 3); err == nil || len(got) != 0 {
			t.Errorf("%q: NextN = %v, %v", expr, got, err)
		}
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		spec Spec
		want string
	}{
		{Daily(9, 30).In("America/New_York"), `{"kind":"daily","minute":30,"hour":9,"tz":"America/New_York"}`},
		{Interval(30 * time.Second), `{"kind":"interval","every":30000000000}`},
		{Weekly(time.Monday, 0, 0), `{"kind":"weekly","weekday":1}`},
		{Monthly(31, 9, 0), `{"kind":"monthly","hour":9,"day":31}`},
		{Cron("0 9 * * 1-5"), `{"kind":"cron","expr":"0 9 * * 1-5"}`},
	} {
		b, err := json.Marshal(tt.spec)
		if err != nil || string(b) != tt.want {
			t.Errorf("json.Marshal(%v) = %s, %v; want %s", tt.spec, b, err, tt.want)
		}
		var back Spec
		if err := json.Unmarshal(b, &back); err != nil || back != tt.spec {
			t.Errorf("json round trip of %v = %#v, %v", tt.spec, back, err)
		}
	}
}
