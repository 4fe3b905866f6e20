package cronspec

import (
	"fmt"
	"math/bits"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/adhocore/gronx"
)

// shortcuts are the supported "@" forms, expanded to 5-field expressions.
// gronx has no @midnight, and its non-standard tags (@always, @5minutes, …)
// are deliberately not accepted.
var shortcuts = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

const shortcutList = "@yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly"

// fieldDef describes one cron field.
type fieldDef struct {
	name     string
	min, max int
	names    map[string]int
	dom, dow bool // accepts "?" and the day modifiers
}

var (
	monthNames = map[string]int{
		"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6,
		"JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12,
	}
	dayNames = map[string]int{
		"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6,
	}

	// cronFields are the six fields, seconds first.
	cronFields = [6]fieldDef{
		{name: "second", min: 0, max: 59},
		{name: "minute", min: 0, max: 59},
		{name: "hour", min: 0, max: 23},
		{name: "day-of-month", min: 1, max: 31, dom: true},
		{name: "month", min: 1, max: 12, names: monthNames},
		{name: "day-of-week", min: 0, max: 7, names: dayNames, dow: true},
	}

	fourDigits = regexp.MustCompile(`[0-9]{4}`)
)

// cronExpr is a validated cron expression.
type cronExpr struct {
	text  string    // user text, whitespace collapsed
	segs  [6]string // canonical numeric fields, seconds first
	gexpr string    // segs joined: what gronx evaluates
	// bit masks of the allowed seconds, minutes and hours, used by align
	// and by the fallback search.
	sec, min, hour uint64
}

// parseCron validates text and returns its canonical form. Errors are
// *FieldError values naming the offending field and its position.
func parseCron(text string) (*cronExpr, error) {
	norm := strings.Join(strings.Fields(text), " ")
	exprErr := func(format string, args ...any) error {
		return invalidf("expr", norm, format, args...)
	}
	countErr := func(format string, args ...any) error {
		e := invalidf("expr", norm, format, args...)
		e.Expr = norm
		return e
	}
	if norm == "" {
		return nil, exprErr("is empty; want 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first")
	}
	fields := strings.Fields(norm)
	if strings.HasPrefix(norm, "@") {
		lower := strings.ToLower(fields[0])
		if lower == "@every" {
			return nil, exprErr("value %q is not a cron expression; use an interval spec (Interval, or \"every 30s\")", norm)
		}
		exp, ok := shortcuts[lower]
		if !ok || len(fields) != 1 {
			return nil, exprErr("value %q is not a supported shortcut (want %s)", norm, shortcutList)
		}
		fields = strings.Fields(exp)
	}

	offset := 0 // index into cronFields of the user's first field
	switch len(fields) {
	case 5:
		offset = 1
	case 6:
		if fourDigits.MatchString(fields[5]) {
			return nil, countErr("has 6 fields and the last one (%q) looks like a year; only the seconds-first 6-field form (second minute hour day-of-month month day-of-week) is supported", fields[5])
		}
	case 7:
		return nil, countErr("has 7 fields; the year field is not supported (want 5 fields, or 6 with seconds first)")
	default:
		return nil, countErr("has %d fields; want 5 (minute hour day-of-month month day-of-week) or 6 with seconds first", len(fields))
	}

	c := &cronExpr{text: norm, segs: [6]string{"0"}}
	for i, raw := range fields {
		def := cronFields[i+offset]
		canon, mask, err := parseField(def, raw)
		if err != nil {
			err.Pos, err.Expr = i+1, norm
			return nil, err
		}
		c.segs[i+offset] = canon
		switch i + offset {
		case 0:
			c.sec = mask
		case 1:
			c.min = mask
		case 2:
			c.hour = mask
		}
	}
	if offset == 1 {
		c.sec = 1 // second 0
	}
	c.gexpr = strings.Join(c.segs[:], " ")
	return c, nil
}

// parseField validates one field and returns its canonical (numeric) text
// and, for plain numeric fields, the mask of values it allows.
func parseField(def fieldDef, raw string) (string, uint64, *FieldError) {
	items := strings.Split(raw, ",")
	out := make([]string, len(items))
	var mask uint64
	for i, item := range items {
		canon, m, err := parseItem(def, strings.ToUpper(item))
		if err != nil {
			return "", 0, err
		}
		out[i] = canon
		mask |= m
	}
	return strings.Join(out, ","), mask, nil
}

// parseItem parses one item of a field's list: *, ?, a modifier (L, nW,
// nL, n#k), a step, a range or a value. It returns the item's canonical
// text and the values it selects.
func parseItem(def fieldDef, item string) (string, uint64, *FieldError) {
	switch item {
	case "":
		return "", 0, invalidf(def.name, item, "has an empty list item")
	case "*":
		return "*", span(def.min, def.max, 1), nil
	case "?":
		if !def.dom && !def.dow {
			return "", 0, invalidf(def.name, item, "value \"?\" is only allowed in day-of-month and day-of-week")
		}
		return "?", 0, nil
	}
	// gronx modifiers: L and nW in day-of-month, nL and n#k in day-of-week.
	if strings.ContainsAny(item, "#LW") && !isName(def, item) {
		return parseModifier(def, item)
	}
	if base, stepText, ok := strings.Cut(item, "/"); ok {
		return parseStep(def, item, base, stepText)
	}
	if strings.Contains(item, "-") {
		a, b, err := rangeValues(def, item, item)
		if err != nil {
			return "", 0, err
		}
		return fmt.Sprintf("%d-%d", a, b), span(a, b, 1), nil
	}
	v, err := value(def, item, item)
	if err != nil {
		return "", 0, err
	}
	return strconv.Itoa(v), span(v, v, 1), nil
}

// parseModifier parses an item with a gronx modifier: L and nW in
// day-of-month, nL and n#k in day-of-week. The days it selects depend on
// the month: its mask is 0.
func parseModifier(def fieldDef, item string) (string, uint64, *FieldError) {
	bad := func(format string, args ...any) (string, uint64, *FieldError) {
		return "", 0, invalidf(def.name, item, format, args...)
	}
	switch {
	case def.dom && item == "L":
		return "L", 0, nil
	case def.dom && item == "LW":
		return bad("value \"LW\" is not supported (use L or nW)")
	case def.dom && strings.HasSuffix(item, "W"):
		n, err := value(def, item[:len(item)-1], item)
		if err != nil {
			if !allDigits(item[:len(item)-1]) {
				return bad("value %q is not valid (day-of-month modifiers are L and nW)", item)
			}
			return "", 0, err
		}
		return strconv.Itoa(n) + "W", 0, nil
	case def.dow && strings.Contains(item, "#"):
		day, nth, _ := strings.Cut(item, "#")
		d, err := value(def, day, item)
		if err != nil {
			return "", 0, err
		}
		k, ok := occurrence(nth)
		if !ok {
			return bad("value %q: occurrence after # must be 1-5", item)
		}
		return fmt.Sprintf("%d#%d", d, k), 0, nil
	case def.dow && strings.HasSuffix(item, "L") && len(item) > 1:
		d, err := value(def, item[:len(item)-1], item)
		if err != nil {
			if _, name := def.names[item[:len(item)-1]]; !name && !allDigits(item[:len(item)-1]) {
				return bad("value %q is not valid (day-of-week modifiers are nL and n#k)", item)
			}
			return "", 0, err
		}
		return strconv.Itoa(d) + "L", 0, nil
	case def.dom:
		return bad("value %q is not valid (day-of-month modifiers are L and nW)", item)
	case def.dow:
		return bad("value %q is not valid (day-of-week modifiers are nL and n#k)", item)
	}
	return bad("value %q is not valid (modifiers L, W and # are only allowed in day-of-month and day-of-week)", item)
}

// occurrence parses the k of n#k: 1 to 5, digits only.
func occurrence(nth string) (int, bool) {
	if !allDigits(nth) {
		return 0, false
	}
	k, err := strconv.Atoi(nth)
	return k, err == nil && k >= 1 && k <= 5
}

// parseStep parses a step item (base/stepText): */n, a/n, a-b/n.
func parseStep(def fieldDef, item, base, stepText string) (string, uint64, *FieldError) {
	maxStep := def.max - def.min + 1
	step, err := strconv.Atoi(stepText)
	if err != nil || !allDigits(stepText) {
		return "", 0, invalidf(def.name, item, "value %q: step %q is not a number", item, stepText)
	}
	if step < 1 || step > maxStep {
		return "", 0, invalidf(def.name, item, "value %q: step %d out of range 1-%d", item, step, maxStep)
	}
	switch {
	case base == "*":
		return "*/" + stepText, span(def.min, def.max, step), nil
	case strings.Contains(base, "-"):
		a, b, ferr := rangeValues(def, base, item)
		if ferr != nil {
			return "", 0, ferr
		}
		return fmt.Sprintf("%d-%d/%d", a, b, step), span(a, b, step), nil
	}
	a, ferr := value(def, base, item)
	if ferr != nil {
		return "", 0, ferr
	}
	return fmt.Sprintf("%d/%d", a, step), span(a, def.max, step), nil
}

func rangeValues(def fieldDef, text, item string) (int, int, *FieldError) {
	as, bs, _ := strings.Cut(text, "-")
	a, err := value(def, as, item)
	if err != nil {
		return 0, 0, err
	}
	b, err := value(def, bs, item)
	if err != nil {
		return 0, 0, err
	}
	if a > b {
		return 0, 0, invalidf(def.name, item, "range %q: start %d is after end %d", item, a, b)
	}
	return a, b, nil
}

// value parses a number or, where the field allows them, a name.
func value(def fieldDef, text, item string) (int, *FieldError) {
	if n, ok := def.names[text]; ok {
		return n, nil
	}
	if !allDigits(text) {
		if def.names != nil {
			return 0, invalidf(def.name, item, "value %q is not a number or name", text)
		}
		return 0, invalidf(def.name, item, "value %q is not a number", text)
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < def.min || n > def.max {
		return 0, invalidf(def.name, item, "value %s out of range %d-%d", text, def.min, def.max)
	}
	return n, nil
}

func isName(def fieldDef, item string) bool {
	for _, part := range strings.FieldsFunc(item, func(r rune) bool { return r == '-' || r == '/' }) {
		if _, ok := def.names[part]; ok {
			return true
		}
	}
	return false
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// span returns the mask of lo, lo+step, …, ≤ hi (values ≥ 64 are ignored;
// masks are only used for second, minute and hour).
func span(lo, hi, step int) uint64 {
	var m uint64
	for v := lo; v <= hi && v < 64; v += step {
		m |= 1 << uint(v)
	}
	return m
}

// nextWall returns the first time ≥ from (rounded up to a whole second) at
// which the expression matches, or false if there is none up to limit.
//
// from, limit and the result are wall-clock times encoded as UTC: gronx
// evaluates in the Location of the reference time, and in UTC every
// wall-clock time exists exactly once, so gronx never sees a DST
// transition. Mapping wall times to instants is done by the caller.
func (c *cronExpr) nextWall(from, limit time.Time) (time.Time, bool) {
	from = c.align(ceilSecond(from.UTC()))
	if from.After(limit) {
		return time.Time{}, false
	}
	t, err := gronx.NextTickAfter(c.gexpr, from, true)
	if err == nil && !t.Before(from) && c.due(t) {
		t = t.UTC()
		if t.After(limit) {
			return time.Time{}, false
		}
		return t, true
	}
	// gronx gave up ("tried so hard") or returned something we cannot
	// verify: fall back to a bounded search of our own.
	return c.search(from, limit)
}

// align returns the first time ≥ t (a whole second) whose second, minute
// and hour are allowed by the expression. No match can lie between t and
// the result, so it is a sound starting point for gronx, which otherwise
// advances one second, minute or hour at a time.
func (c *cronExpr) align(t time.Time) time.Time {
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	h, m, s := t.Hour(), t.Minute(), t.Second()
	for hh := nextBit(c.hour, h); hh >= 0; hh = nextBit(c.hour, hh+1) {
		m0 := 0
		if hh == h {
			m0 = m
		}
		for mm := nextBit(c.min, m0); mm >= 0; mm = nextBit(c.min, mm+1) {
			s0 := 0
			if hh == h && mm == m {
				s0 = s
			}
			if ss := nextBit(c.sec, s0); ss >= 0 {
				return day.Add(clockDuration(hh, mm, ss))
			}
		}
	}
	return day.AddDate(0, 0, 1).Add(clockDuration(nextBit(c.hour, 0), nextBit(c.min, 0), nextBit(c.sec, 0)))
}

// nextBit returns the smallest set bit of mask that is ≥ k, or -1.
func nextBit(mask uint64, k int) int {
	if k >= 64 {
		return -1
	}
	if m := mask >> uint(k) << uint(k); m != 0 {
		return bits.TrailingZeros64(m)
	}
	return -1
}

func clockDuration(h, m, s int) time.Duration {
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second
}

// due reports whether gronx's segment checker considers t due. The
// segments are already canonical, so gronx's parsing is skipped.
func (c *cronExpr) due(t time.Time) bool {
	g := gronx.New()
	g.C.SetRef(t)
	ok, err := g.SegmentsDue(c.segs[:])
	return err == nil && ok
}

// search walks forward day by day, checking the day fields with gronx's
// own segment checker (so L, W, # and the day-of-month/day-of-week union
// rule mean exactly what they mean to gronx) and the time-of-day fields
// with the masks.
func (c *cronExpr) search(from, limit time.Time) (time.Time, bool) {
	g := gronx.New()
	daySegs := []string{"*", "*", "*", c.segs[3], c.segs[4], c.segs[5]}
	day := time.Date(from.Year(), from.Month(), from.Day(), 0, 0, 0, 0, time.UTC)
	for ; !day.After(limit); day = day.AddDate(0, 0, 1) {
		g.C.SetRef(day)
		if ok, err := g.SegmentsDue(daySegs); err != nil || !ok {
			continue
		}
		for h := range bitsOf(c.hour) {
			for m := range bitsOf(c.min) {
				for s := range bitsOf(c.sec) {
					t := day.Add(clockDuration(h, m, s))
					if t.Before(from) {
						continue
					}
					if t.After(limit) {
						return time.Time{}, false
					}
					return t, true
				}
			}
		}
	}
	return time.Time{}, false
}

// bitsOf yields the set bits of m in increasing order.
func bitsOf(m uint64) func(func(int) bool) {
	return func(yield func(int) bool) {
		for m != 0 {
			b := bits.TrailingZeros64(m)
			if !yield(b) {
				return
			}
			m &^= 1 << uint(b)
		}
	}
}

func ceilSecond(t time.Time) time.Time {
	if t.Nanosecond() == 0 {
		return t
	}
	return t.Truncate(time.Second).Add(time.Second)
}
