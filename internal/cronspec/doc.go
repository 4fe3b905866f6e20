// Package cronspec is the schedule specification of jetflow's cron jobs and
// the one place where their fire times are computed. The cron evaluator
// (which decides when a registered job runs next) and the CLI preview
// command (which shows a user the next few fire times of a spec) both call
// [Spec.Next] / [Spec.NextN], so what a user previews is what runs.
//
// # Specs
//
// A [Spec] is a small JSON-serialisable value of one of six kinds:
//
//	Interval(30*time.Second)            every 30s
//	Hourly(15)                          hourly :15 (UTC)
//	Daily(9, 0)                         daily 09:00 (UTC)
//	Weekly(time.Monday, 9, 0)           weekly Mon 09:00 (UTC)
//	Monthly(31, 9, 0)                   monthly 31 09:00 (UTC)
//	Cron("0 9 * * 1-5")                 cron 0 9 * * 1-5 (UTC)
//
// Calendar kinds (hourly, daily, weekly, monthly) and cron specs are
// evaluated in an IANA time zone set with [Spec.In] ("" means UTC).
// [Parse] reads the text form used on the command line, including the
// output of [Spec.String].
//
// [Spec.Validate] checks a spec before it is registered: every field is
// range-checked and errors are *[FieldError] values that name the field,
// e.g. `cronspec: invalid spec: field "hour" value 25 out of range 0-23`,
// or, inside a cron expression, its name and position, e.g.
// `field "minute" (1st) value 61 out of range 0-59`. They match the
// sentinels [ErrInvalidSpec], [ErrUnknownZone], [ErrIntervalTooShort] and
// [ErrNoFireTime] with [errors.Is].
//
// # Intervals
//
// An interval spec is a fixed period of absolute time; it ignores time
// zones and daylight saving. Next(prev) is exactly prev+Every. The
// evaluator passes the previous scheduled fire time, not the time the job
// actually ran, so the schedule does not drift. Every must be a positive
// whole number of seconds.
//
// # Calendar kinds
//
// Hourly fires every hour at Minute, daily every day at Hour:Minute, weekly
// every Weekday at Hour:Minute, monthly on Day (1-31) at Hour:Minute. A
// monthly spec whose Day is past the end of a month skips that month:
// Monthly(31, …) does not fire in February, April, June, September or
// November, and Monthly(29, …) fires in February only in leap years.
//
// # Cron expressions
//
// Cron accepts the standard 5-field form (minute hour day-of-month month
// day-of-week), a 6-field form with seconds first (second minute hour
// day-of-month month day-of-week), and the shortcuts @yearly, @annually,
// @monthly, @weekly, @daily, @midnight and @hourly. Fields take numbers,
// `*`, ranges a-b, steps */n, a/n and a-b/n, comma lists, month names
// jan-dec and day names sun-sat (0 or 7 is Sunday); `?` is allowed in the
// day fields, and the day fields take the modifiers L (last day of the
// month) and nW (weekday nearest to day n) in day-of-month, and nL (last
// weekday n of the month) and n#k (k-th weekday n of the month) in
// day-of-week. When both day-of-month and day-of-week are restricted
// (neither starts with * or ?), a day matches if either matches, as in
// Vixie cron. Year fields (7 fields, or a 6-field expression whose last
// field looks like a year) and other @ forms such as @reboot are rejected.
//
// Matching is done by github.com/adhocore/gronx, after this package has
// validated each field itself (so errors can name the field) and rewritten
// the expression into gronx's canonical seconds-first numeric form. If
// gronx fails ("tried so hard") or returns a time it does not itself
// consider due, a bounded day-by-day search of our own is used instead.
//
// # Time zones and daylight saving
//
// A fire time of a calendar or cron spec is a wall-clock time in the
// spec's zone. The schedule is first computed on the wall clock, where
// every day has 24 hours (gronx is always handed wall-clock times encoded
// in UTC, so it never sees a transition). Each wall-clock time is then
// mapped to an instant:
//
//   - A wall-clock time that exists once fires at that instant.
//   - Spring forward: a wall-clock time inside the gap does not exist. Its
//     fire is not lost: it fires at the wall-clock time shifted forward by
//     the length of the gap, i.e. it is read with the UTC offset in force
//     before the transition. In America/New_York on 2026-03-08 (02:00 EST
//     jumps to 03:00 EDT), a daily 02:30 job fires at 03:30 EDT
//     (07:30Z), exactly once that day. If a shifted time coincides with a
//     regular fire time (a job at 02:30 and 03:30, or */15 * * * *), it is
//     a single fire: the instants of a schedule form a set.
//   - Fall back: a wall-clock time inside the repeated hour exists twice.
//     It fires once, at its first occurrence (the pre-transition, daylight
//     offset). In America/New_York on 2026-11-01 a daily 01:30 job fires
//     at 01:30 EDT (05:30Z) and not at 01:30 EST (06:30Z): Next of the
//     first occurrence is the next day's 01:30. Likewise an hourly job in
//     Europe/London on 2026-10-25 fires at 00:00Z (01:00 BST) and then
//     02:00Z (02:00 GMT), with no fire at 01:00Z.
//
// The same rules apply to hourly, daily, weekly, monthly and cron specs,
// including 6-field expressions with seconds. Note that they are
// implemented explicitly and do not rely on time.Date, whose normalisation
// of non-existent and ambiguous times depends on the sign of the zone's
// offset (in Go 1.26 it maps 02:30 on 2026-03-08 in New York to 01:30 EST,
// and 01:30 on 2026-10-25 in London to the second occurrence).
//
// As a consequence, consecutive fire times are not always the wall-clock
// distance apart: around a transition a daily job may be 23 or 25 hours
// apart, an hourly job 2 hours apart (fall back), and a sub-hourly cron
// job has fewer fires in the shortened day. The minimum interval check of
// [Spec.Validate] measures gaps on the wall clock.
//
// [Spec.Next] always returns a UTC time strictly after its argument.
// Searches are bounded to 30 years; a spec without a fire time in that
// horizon (such as "0 0 30 2 *") is reported with [ErrNoFireTime].
package cronspec
