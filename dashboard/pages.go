package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
)

// pages are the parsed page templates of one handler (links carry its
// base path).
type pages struct {
	index, run, functions, crons, triggers, errorPage *template.Template
}

func (h *handler) parsePages() (*pages, error) {
	funcs := template.FuncMap{
		"fmtTime":     fmtTime,
		"isoTime":     isoTime,
		"attempts":    attempts,
		"maxAttempts": maxAttempts,
		"short":       short,
		"path":        h.path,
		"runPath":     func(id string) string { return h.path("/runs/" + url.PathEscape(id)) },
		"apiRun":      func(id string) string { return h.path("/api/runs/" + url.PathEscape(id)) },
		"fnPath":      func(fn string) string { return h.path("/?" + url.Values{"function": {fn}}.Encode()) },
		// a button's endpoint: /api/<kind>/<name, one path segment>/<action>
		"apiAction": func(kind, name, action string) string {
			return h.path("/api/" + kind + "/" + url.PathEscape(name) + "/" + action)
		},
		"dur":      func(d time.Duration) string { return d.String() },
		"span":     fmtSpan,
		"sub1":     func(n int) int { return n - 1 },
		"wait":     queueWait,
		"runDur":   func(r *jetflow.Run) time.Duration { return runDuration(r, time.Now()) },
		"utcTitle": utcTitle,
		"ms":       func(t time.Time) int64 { return t.UnixMilli() },
		"rerunnable": func(r *jetflow.Run) bool {
			return r.State == jetflow.Failed || r.State == jetflow.Canceled
		},
		"ctl": func() bool { _, ok := h.cfg.Crons.(CronController); return ok },
	}
	parse := func(name string) (*template.Template, error) {
		return template.New(name).Funcs(funcs).ParseFS(assetsFS, "assets/templates/layout.html", "assets/templates/"+name)
	}
	var ps pages
	var err error
	for name, dst := range map[string]**template.Template{
		"index.html": &ps.index, "run.html": &ps.run, "functions.html": &ps.functions,
		"crons.html": &ps.crons, "triggers.html": &ps.triggers, "error.html": &ps.errorPage,
	} {
		if *dst, err = parse(name); err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", name, err)
		}
	}
	return &ps, nil
}

// common is what the layout needs on every page.
type common struct {
	Base     string
	Page     string // runs, run, functions, crons, triggers or error: the nav entry
	Title    string
	HasCrons bool
}

func (h *handler) common(page, title string) common {
	return common{Base: h.cfg.BasePath, Page: page, Title: title, HasCrons: h.cfg.Crons != nil}
}

// render executes a page into a buffer first, so that a template error
// becomes a clean 500 rather than half a page.
func (h *handler) render(w http.ResponseWriter, r *http.Request, t *template.Template, status int, data any) {
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", data); err != nil {
		h.log.ErrorContext(r.Context(), "dashboard: render", "page", t.Name(), "error", err)
		http.Error(w, "dashboard: rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type errorData struct {
	common
	Status  int
	Message string
}

func (h *handler) errorPage(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if status >= 500 && r.Context().Err() == nil {
		h.log.WarnContext(r.Context(), "dashboard page failed", "path", r.URL.Path, "error", msg)
	}
	h.render(w, r, h.pages.errorPage, status, errorData{
		common: h.common("error", http.StatusText(status)), Status: status, Message: msg,
	})
}

func (h *handler) pageError(w http.ResponseWriter, r *http.Request, err error) {
	h.errorPage(w, r, statusOf(err), err.Error())
}

// stateTab is one state count above the runs table; it links to the runs
// in that state.
type stateTab struct {
	Key    string // the counts field: a state, or "total"
	Label  string
	State  jetflow.State
	Count  int64
	Active bool
	Href   string
}

var stateLabels = map[jetflow.State]string{
	jetflow.Pending: "Pending", jetflow.InProgress: "In progress", jetflow.Success: "Success",
	jetflow.Failed: "Failed", jetflow.Canceled: "Canceled",
}

type indexData struct {
	common
	Filter       listQuery
	Runs         []*jetflow.Run
	Tabs         []stateTab
	StateOptions []jetflow.State
	Limits       []int
	Functions    []string // known function names, for the filter's suggestions
	Sorts        map[string]sortLink
	NextHref     string
	PrevHref     string
	FirstHref    string
	Next, Prev   string // the cursors
	Filtered     bool
}

// sortLink is a sortable column's header link.
type sortLink struct {
	Href   string
	Active bool
	Arrow  string // ↓ or ↑ on the active column
}

// href is the index page's link for query v ("./" when empty).
func href(v url.Values) string {
	if len(v) == 0 {
		return "./"
	}
	return "?" + v.Encode()
}

const pageLimit = 50

func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	lq, err := parseList(r.URL.Query(), pageLimit)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	// One header scan gives the page and the counts.
	page, err := h.page(ctx, lq)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	c := page.Counts
	var names []string
	if fns, err := h.functions(ctx); err == nil {
		seen := map[string]bool{}
		for _, fi := range fns {
			if !seen[fi.Name] {
				seen[fi.Name] = true
				names = append(names, fi.Name)
			}
		}
	}
	d := indexData{
		common: h.common("runs", "Runs"), Filter: lq, Runs: page.Runs, Next: page.Next, Prev: page.Prev,
		StateOptions: states, Limits: []int{20, 50, 100, 200, 500}, Functions: names,
		Filtered: lq.State != "" || lq.Function != "", Sorts: map[string]sortLink{},
	}
	if lq.Function != "" {
		d.Title = "Runs of " + lq.Function
	}
	tab := func(key, label string, st jetflow.State) stateTab {
		tq := lq
		tq.State = st
		return stateTab{Key: key, Label: label, State: st, Count: c.Of(st), Active: lq.State == st, Href: href(tq.values(pageLimit))}
	}
	d.Tabs = append(d.Tabs, tab("total", "All", ""))
	for _, st := range states {
		d.Tabs = append(d.Tabs, tab(string(st), stateLabels[st], st))
	}
	for _, key := range sortKeys {
		sq := lq
		sq.Sort, sq.Asc = key, key == sortState || key == sortID
		l := sortLink{Active: lq.Sort == key}
		if l.Active {
			l.Arrow = "↓"
			if lq.Asc {
				l.Arrow = "↑"
			}
			if key != sortCreated {
				sq.Asc = !lq.Asc // a second click reverses the order
			}
		}
		l.Href = href(sq.values(pageLimit))
		d.Sorts[key] = l
	}
	if page.Next != "" {
		v := lq.values(pageLimit)
		v.Set("after", page.Next)
		d.NextHref = href(v)
	}
	if page.Prev != "" {
		v := lq.values(pageLimit)
		v.Set("before", page.Prev)
		d.PrevHref = href(v)
	}
	if lq.After != nil || lq.Before != nil {
		d.FirstHref = href(lq.values(pageLimit))
	}
	h.render(w, r, h.pages.index, http.StatusOK, d)
}

// childRow is one child run on a run's page.
type childRow struct {
	ID    string
	State jetflow.State
}

// maxChildStates bounds the child records read to show their states.
const maxChildStates = 50

type runData struct {
	common
	Run            *jetflow.Run
	Args           string
	Result         string
	OnCompleteArgs string
	Progress       float64 // 0-100
	ProgressText   string
	Children       []childRow
	Trace          []string
	RetryOf        string
	Reruns         []*jetflow.Run
	Attempts       []attemptRow
	Earlier        int // attempts before the ones listed, not recorded
	QueueWait      time.Duration
	Duration       time.Duration
	// CanAct: the NATS user may write run records (mayWrite writeRuns):
	// Cancel and Re-run are on the page (each shown while the run's state
	// allows it).
	CanAct bool
}

func (h *handler) runPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	run, err := h.get(ctx, r.PathValue("id"))
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	d := runData{
		common: h.common("run", "Run "+run.ID), Run: run,
		Args: prettyJSON(run.Args), Result: prettyJSON(run.Result),
	}
	d.Progress, d.ProgressText = progress(run.Progress)
	d.CanAct = h.mayWrite(ctx, writeRuns)
	d.RetryOf = retryOf(run)
	if d.Reruns, err = h.reruns(ctx, run.ID); err != nil {
		h.pageError(w, r, err)
		return
	}
	d.QueueWait, d.Duration = queueWait(run), runDuration(run, time.Now())
	d.Attempts, d.Earlier = attemptRows(run, d.Duration)
	if run.OnComplete != nil {
		d.OnCompleteArgs = prettyJSON(run.OnComplete.Args)
	}
	for i, id := range run.Children {
		c := childRow{ID: id}
		if i < maxChildStates {
			if cr, err := h.p.Get(ctx, id); err == nil {
				c.State = cr.State
			} else if errors.Is(err, jetflow.ErrNotFound) {
				c.State = "expired"
			}
		}
		d.Children = append(d.Children, c)
	}
	for k, v := range run.Trace {
		d.Trace = append(d.Trace, k+": "+v)
	}
	sort.Strings(d.Trace)
	h.render(w, r, h.pages.run, http.StatusOK, d)
}

// attemptRow is one attempt on a run's page.
type attemptRow struct {
	N              int
	Worker         string
	Started, Ended time.Time
	Duration       time.Duration
	Outcome, Error string
}

// attemptRows lists a run's attempts: those of its history (kept once a
// run has had more than one), then the attempt running or waiting now;
// without a history, the record's own (last) attempt. earlier counts the
// attempts before the first listed (a history keeps the latest
// jetflow.MaxHistory).
func attemptRows(r *jetflow.Run, current time.Duration) (rows []attemptRow, earlier int) {
	for _, a := range r.History {
		d := time.Duration(-1)
		if !a.StartedTime.IsZero() && !a.CompletedTime.IsZero() {
			d = max(0, a.CompletedTime.Sub(a.StartedTime))
		}
		rows = append(rows, attemptRow{N: a.Attempt, Worker: a.Worker, Started: a.StartedTime, Ended: a.CompletedTime, Duration: d, Outcome: a.Outcome, Error: a.Error})
	}
	if r.Attempts > 0 && (len(rows) == 0 || r.Attempts > rows[len(rows)-1].N) {
		row := attemptRow{N: r.Attempts, Worker: r.Owner, Started: r.StartedTime, Ended: r.CompletedTime, Duration: current, Outcome: string(r.State)}
		if len(rows) == 0 || r.State.Terminal() {
			row.Error = r.Error
		}
		rows = append(rows, row)
	}
	if len(rows) > 0 {
		earlier = rows[0].N - 1
	}
	return rows, earlier
}

type functionsData struct {
	common
	Functions []kv.FunctionInfo
	// CanPause: the NATS user may write the functions' pause marks
	// (mayWrite writePaused): the Pause and Resume buttons are shown.
	CanPause bool
}

func (h *handler) functionsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	fns, err := h.functions(ctx)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	d := functionsData{common: h.common("functions", "Functions"), Functions: fns}
	// No function, no button: no probe.
	d.CanPause = len(fns) > 0 && h.mayWrite(ctx, writePaused)
	h.render(w, r, h.pages.functions, http.StatusOK, d)
}

type cronsData struct {
	common
	Crons []*kv.CronInfo
	// CanPause: Config.Crons is a CronController and the NATS user may
	// write the crons bucket (mayWrite writeCrons): the Pause and Resume
	// buttons are shown.
	CanPause bool
	// CanTrigger: the NATS user may write run records (mayWrite
	// writeRuns): the Trigger now buttons are shown.
	CanTrigger bool
}

func (h *handler) cronsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	list, err := h.crons(ctx)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	_, ctl := h.cfg.Crons.(CronController)
	d := cronsData{common: h.common("crons", "Crons"), Crons: list,
		CanPause: ctl && h.mayWrite(ctx, writeCrons), CanTrigger: h.mayWrite(ctx, writeRuns)}
	h.render(w, r, h.pages.crons, http.StatusOK, d)
}

// fmtTime shows a UTC instant to the second, "" for the zero time.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// utcTitle is the exact UTC time of a time element's tooltip.
func utcTitle(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000") + " UTC"
}

// fmtSpan shows a duration rounded for reading ("" when negative: not
// known).
func fmtSpan(d time.Duration) string {
	switch {
	case d < 0:
		return ""
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(math.Round(d.Seconds()*10)/10, 'f', -1, 64) + " s"
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

func isoTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// attempts reads "2 / 5", or "2" when the run has no maximum of its own.
func attempts(r *jetflow.Run) string {
	if r.MaxAttempts > 0 {
		return fmt.Sprintf("%d / %d", r.Attempts, r.MaxAttempts)
	}
	return strconv.Itoa(r.Attempts)
}

// maxAttempts reads a function's max attempts: "unlimited" for
// kv.UnlimitedAttempts (the retrier's internal functions).
func maxAttempts(n int) string {
	if n >= kv.UnlimitedAttempts {
		return "unlimited"
	}
	return strconv.Itoa(n)
}

// short cuts s to n runes on one line.
func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if rs := []rune(s); len(rs) > n {
		return string(rs[:n-1]) + "…"
	}
	return s
}

// prettyJSON indents a JSON document; anything else is shown as is.
// Go's encoder writes <, > and & as \u003c, \u003e and \u0026; they are
// shown as the characters (the template escapes them for HTML).
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return unescapeHTMLChars(b.Bytes())
}

func unescapeHTMLChars(in []byte) string {
	var out strings.Builder
	out.Grow(len(in))
	for i := 0; i < len(in); i++ {
		c := in[i]
		if c != '\\' || i+1 >= len(in) {
			out.WriteByte(c)
			continue
		}
		if in[i+1] == 'u' && i+6 <= len(in) {
			switch string(in[i+2 : i+6]) {
			case "003c", "003C":
				out.WriteByte('<')
				i += 5
				continue
			case "003e", "003E":
				out.WriteByte('>')
				i += 5
				continue
			case "0026":
				out.WriteByte('&')
				i += 5
				continue
			}
		}
		// Any other escape (an escaped backslash too) is kept whole.
		out.WriteByte(c)
		out.WriteByte(in[i+1])
		i++
	}
	return out.String()
}

// progress is the bar's value (0-100) and its caption.
func progress(p *jetflow.Progress) (float64, string) {
	if p == nil {
		return 0, ""
	}
	pct := p.Percent
	if pct == 0 && p.Total > 0 {
		pct = float64(p.Processed) / float64(p.Total) * 100
	}
	pct = min(max(pct, 0), 100)
	parts := []string{strconv.FormatFloat(math.Round(pct*10)/10, 'f', -1, 64) + "%"}
	if p.Total > 0 {
		parts = append(parts, fmt.Sprintf("%d / %d", p.Processed, p.Total))
	} else if p.Processed > 0 {
		parts = append(parts, fmt.Sprintf("%d processed", p.Processed))
	}
	if p.Message != "" {
		parts = append(parts, p.Message)
	}
	return pct, strings.Join(parts, " · ")
}
