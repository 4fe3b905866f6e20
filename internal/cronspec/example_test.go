package cronspec_test

import (
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow/internal/cronspec"
)

// A weekday 09:00 job in New York keeps firing at 09:00 local time across
// the 2026-03-08 daylight saving transition: 14:00Z before, 13:00Z after.
func ExampleSpec_NextN() {
	spec := cronspec.Cron("0 9 * * 1-5").In("America/New_York")
	if err := spec.Validate(time.Minute); err != nil {
		fmt.Println(err)
		return
	}
	after := time.Date(2026, 3, 5, 12, 0, 0, 0, time.UTC)
	times, err := spec.NextN(after, 5)
	if err != nil {
		fmt.Println(err)
		return
	}
	ny, _ := time.LoadLocation("America/New_York")
	fmt.Println(spec)
	for _, t := range times {
		fmt.Println(t.Format(time.RFC3339), t.In(ny).Format("Mon 15:04 MST"))
	}
	// Output:
	// cron 0 9 * * 1-5 (America/New_York)
	// 2026-03-05T14:00:00Z Thu 09:00 EST
	// 2026-03-06T14:00:00Z Fri 09:00 EST
	// 2026-03-09T13:00:00Z Mon 09:00 EDT
	// 2026-03-10T13:00:00Z Tue 09:00 EDT
	// 2026-03-11T13:00:00Z Wed 09:00 EDT
}

func ExampleParse() {
	for _, text := range []string{"every 30s", "daily 2:30 (America/New_York)", "monthly 31 9:00", "0 0 * * * 2026"} {
		spec, err := cronspec.Parse(text)
		if err != nil {
			fmt.Println(err)
			continue
		}
		next, _ := spec.Next(time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC))
		fmt.Printf("%-32s next %s\n", spec, next.Format(time.RFC3339))
	}
	// Output:
	// every 30s                        next 2026-03-07T12:00:30Z
	// daily 02:30 (America/New_York)   next 2026-03-08T07:30:00Z
	// monthly 31 09:00 (UTC)           next 2026-03-31T09:00:00Z
	// cronspec: invalid spec: field "expr" has 6 fields and the last one ("2026") looks like a year; only the seconds-first 6-field form (second minute hour day-of-month month day-of-week) is supported in cron expression "0 0 * * * 2026"
}
