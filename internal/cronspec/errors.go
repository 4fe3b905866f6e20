package cronspec

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error returned by [Spec.Validate], [Parse],
// [Spec.Next] and [Spec.NextN] for a bad specification is a *[FieldError]
// that matches [ErrInvalidSpec] with [errors.Is]; zone, interval-policy and
// never-fires problems additionally match [ErrUnknownZone],
// [ErrIntervalTooShort] and [ErrNoFireTime] respectively.
var (
	// ErrInvalidSpec reports a malformed specification: an unknown kind, a
	// field out of range, an unparsable cron expression, and so on.
	ErrInvalidSpec = errors.New("cronspec: invalid spec")

	// ErrUnknownZone reports a TZ that [time.LoadLocation] cannot load.
	ErrUnknownZone = errors.New("cronspec: unknown time zone")

	// ErrIntervalTooShort reports a schedule that fires more often than the
	// minimum interval passed to [Spec.Validate].
	ErrIntervalTooShort = errors.New("cronspec: interval too short")

	// ErrNoFireTime reports a schedule that has no fire time within the
	// search horizon (for example the cron expression "0 0 30 2 *").
	ErrNoFireTime = errors.New("cronspec: no fire time")
)

// FieldError describes which field of a [Spec] (or which field of its cron
// expression) is wrong. Its message always names the field, for example
//
//	cronspec: invalid spec: field "hour" value 25 out of range 0-23
//	cronspec: invalid spec: field "minute" (1st) value 61 out of range 0-59 in cron expression "61 * * * *"
//
// FieldError unwraps to its sentinel (Err) and, when that sentinel is not
// ErrInvalidSpec itself, also to [ErrInvalidSpec].
type FieldError struct {
	// Err is the sentinel: ErrInvalidSpec, ErrUnknownZone,
	// ErrIntervalTooShort or ErrNoFireTime.
	Err error
	// Field is the offending field: a Spec JSON field name ("kind",
	// "every", "minute", "hour", "day", "weekday", "expr", "tz") or, inside
	// a cron expression, one of "second", "minute", "hour",
	// "day-of-month", "month", "day-of-week".
	Field string
	// Pos is the 1-based position of Field inside a cron expression, or 0
	// when Field is a Spec field.
	Pos int
	// Value is the offending text ("" when not applicable).
	Value string
	// Reason completes the sentence "field X ...", e.g.
	// "value 25 out of range 0-23".
	Reason string
	// Expr is the cron expression being parsed, if any.
	Expr string
}

// Error implements error.
func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	fmt.Fprintf(&b, ": field %q", e.Field)
	if e.Pos > 0 {
		fmt.Fprintf(&b, " (%s)", ordinal(e.Pos))
	}
	if e.Reason != "" {
		b.WriteString(" ")
		b.WriteString(e.Reason)
	}
	if e.Expr != "" {
		fmt.Fprintf(&b, " in cron expression %q", e.Expr)
	}
	return b.String()
}

// Unwrap returns the sentinels this error matches.
func (e *FieldError) Unwrap() []error {
	if e.Err == ErrInvalidSpec {
		return []error{ErrInvalidSpec}
	}
	return []error{e.Err, ErrInvalidSpec}
}

func ordinal(n int) string {
	switch n {
	case 1:
		return "1st"
	case 2:
		return "2nd"
	case 3:
		return "3rd"
	default:
		return fmt.Sprintf("%dth", n)
	}
}

func invalidf(field, value, format string, args ...any) *FieldError {
	return &FieldError{Err: ErrInvalidSpec, Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

func rangeErr(field string, v, lo, hi int) *FieldError {
	return invalidf(field, fmt.Sprint(v), "value %d out of range %d-%d", v, lo, hi)
}
