package cronspec

import (
	"strconv"
	"strings"
	"time"
)

var weekdayNames = map[string]time.Weekday{
	"sun": time.Sunday, "sunday": time.Sunday,
	"mon": time.Monday, "monday": time.Monday,
	"tue": time.Tuesday, "tues": time.Tuesday, "tuesday": time.Tuesday,
	"wed": time.Wednesday, "wednesday": time.Wednesday,
	"thu": time.Thursday, "thur": time.Thursday, "thurs": time.Thursday, "thursday": time.Thursday,
	"fri": time.Friday, "friday": time.Friday,
	"sat": time.Saturday, "saturday": time.Saturday,
}

// Parse parses the textual form used on the command line:
//
//	every 30s            interval (also "@every 30s"; any time.ParseDuration text)
//	hourly 15            hourly at minute 15 (also "hourly :15")
//	daily 9:30           daily at 09:30
//	weekly mon 09:00     weekly (sun … sat, or full names)
//	monthly 31 9:00      monthly on day 31 (short months are skipped)
//	cron 0 9 * * 1-5     cron expression (the "cron" prefix is optional)
//	0 9 * * 1-5          anything else is a cron expression
//
// Any form may end with a time zone in parentheses, e.g.
// "daily 9:30 (America/New_York)", so Parse accepts the output of
// [Spec.String]; "(UTC)" yields TZ "". The result is checked with
// Validate(0): errors are the same *[FieldError] values.
func Parse(text string) (Spec, error) {
	text = strings.TrimSpace(text)
	tz := ""
	if strings.HasSuffix(text, ")") {
		if i := strings.LastIndex(text, "("); i >= 0 {
			tz = strings.TrimSpace(text[i+1 : len(text)-1])
			text = strings.TrimSpace(text[:i])
			if tz == "" {
				return Spec{}, invalidf("tz", "", "is empty in %q; write (Area/City) or leave it out for UTC", text+" ()")
			}
			if tz == "UTC" {
				tz = ""
			}
		}
	}

	s, err := parseWords(text)
	if err != nil {
		return Spec{}, err
	}
	s.TZ = tz
	if err := s.Validate(0); err != nil {
		return Spec{}, err
	}
	return s, nil
}

func parseWords(text string) (Spec, error) {
	words := strings.Fields(text)
	if len(words) == 0 {
		return Cron(text), nil // reported by Validate as an empty expression
	}
	usage := func(field, value, want string) error {
		return invalidf(field, value, "in %q: want %q", text, want)
	}
	args := words[1:]
	switch strings.ToLower(words[0]) {
	case "every", "@every":
		if len(args) != 1 {
			return Spec{}, usage("every", text, "every <duration>, e.g. every 30s")
		}
		d, err := time.ParseDuration(args[0])
		if err != nil {
			return Spec{}, invalidf("every", args[0], "value %q is not a duration (e.g. 30s, 5m, 1h30m)", args[0])
		}
		return Interval(d), nil
	case "hourly":
		if len(args) != 1 {
			return Spec{}, usage("minute", text, "hourly <minute>, e.g. hourly 15")
		}
		m, err := number("minute", strings.TrimPrefix(args[0], ":"))
		if err != nil {
			return Spec{}, err
		}
		return Hourly(m), nil
	case "daily":
		if len(args) != 1 {
			return Spec{}, usage("hour", text, "daily <H:MM>, e.g. daily 9:30")
		}
		h, m, err := clock(args[0])
		if err != nil {
			return Spec{}, err
		}
		return Daily(h, m), nil
	case "weekly":
		if len(args) != 2 {
			return Spec{}, usage("weekday", text, "weekly <day> <H:MM>, e.g. weekly mon 9:00")
		}
		wd, ok := weekdayNames[strings.ToLower(args[0])]
		if !ok {
			n, err := strconv.Atoi(args[0])
			if err != nil || !allDigits(args[0]) || n > 6 {
				return Spec{}, invalidf("weekday", args[0], "value %q is not a weekday (sun, mon, …, sat or 0-6)", args[0])
			}
			wd = time.Weekday(n)
		}
		h, m, err := clock(args[1])
		if err != nil {
			return Spec{}, err
		}
		return Weekly(wd, h, m), nil
	case "monthly":
		if len(args) != 2 {
			return Spec{}, usage("day", text, "monthly <day> <H:MM>, e.g. monthly 31 9:00")
		}
		d, err := number("day", args[0])
		if err != nil {
			return Spec{}, err
		}
		h, m, err := clock(args[1])
		if err != nil {
			return Spec{}, err
		}
		return Monthly(d, h, m), nil
	case "cron":
		return Cron(strings.Join(args, " ")), nil
	default:
		return Cron(text), nil
	}
}

// clock parses H:MM or HH:MM. Ranges are checked by Validate.
func clock(text string) (int, int, error) {
	hs, ms, ok := strings.Cut(text, ":")
	if !ok || len(ms) != 2 {
		return 0, 0, invalidf("hour", text, "value %q is not a time of day (want H:MM, e.g. 9:30)", text)
	}
	h, err := number("hour", hs)
	if err != nil {
		return 0, 0, err
	}
	m, err := number("minute", ms)
	if err != nil {
		return 0, 0, err
	}
	return h, m, nil
}

func number(field, text string) (int, error) {
	n, err := strconv.Atoi(text)
	if err != nil || !allDigits(text) || len(text) > 4 {
		return 0, invalidf(field, text, "value %q is not a number", text)
	}
	return n, nil
}
