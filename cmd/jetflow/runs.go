package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
)

func init() {
	register("runs", "list, count, get, cancel or watch runs: runs list|counts|get|cancel|watch", runRuns)
}

const runsUsage = `usage: jetflow runs <subcommand> [flags]

  runs list [--state S] [--function F] [--limit N] [--after C | --before C] [--json]
  runs counts [--function F] [--json]
  runs get <id> [--json]
  runs cancel <id> [--json]
  runs watch <id> [--json]

Every subcommand takes --url (default $JETFLOW_URL or nats://127.0.0.1:4222)
and --prefix (default jetflow); --json prints what the dashboard's API
returns, with its field names (runs watch: one run record per line, at each
change). runs list prints the newest activity first, a page at a time
(--after the "next" cursor of a page, --before its "prev"); runs counts
prints the runs in each state. With a scheduler running, both read its run
index (docs/runindex.md) and cost in proportion to what they print;
without one they read every record and say so. runs watch exits with 0 when the run ends success, 3 when it ends
failed and 4 when it ends canceled (1 on an error of its own). If the server
goes away, runs watch says so on stderr and reconnects for as long as it runs.`

func runRuns(ctx context.Context, args []string) error {
	if done, err := subcommandHelp(ctx, "runs", runsUsage, args); done {
		return err
	}
	switch args[0] {
	case "list", "ls":
		return runsList(ctx, args[1:])
	case "counts", "count", "stats":
		return runsCounts(ctx, args[1:])
	case "get", "show":
		return runsGet(ctx, args[1:])
	case "cancel":
		return runsCancel(ctx, args[1:])
	case "watch":
		return runsWatch(ctx, args[1:])
	}
	fmt.Fprintln(stderr(ctx), runsUsage)
	return usageErrorf("runs: unknown subcommand %q", args[0])
}

func runsList(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "runs list", "[--state S] [--function F] [--limit N] [--after C | --before C] [--json]")
	var cf connFlags
	cf.add(fs)
	state := fs.String("state", "", "only runs in this state: pending, inProgress, success, failed or canceled")
	function := fs.String("function", "", "only runs of this function")
	limit := fs.Int("limit", 50, "page size (at most 1000)")
	after := fs.String("after", "", "cursor: the page after the one whose \"next\" this is (older runs)")
	before := fs.String("before", "", "cursor: the page before the one whose \"prev\" this is (newer runs)")
	asJSON := fs.Bool("json", false, "print the page as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("runs list: unexpected argument %q", pos[0])
	}
	st := jetflow.State(*state)
	if st != "" && !st.Valid() {
		if v, ok := stateByName(*state); ok {
			st = v
		} else {
			return fmt.Errorf("runs list: unknown state %q (pending, inProgress, success, failed, canceled)", *state)
		}
	}
	if *limit < 1 || *limit > 1000 {
		return fmt.Errorf("runs list: --limit %d: must be 1 to 1000", *limit)
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	page, err := c.p.List(ctx, producer.Filter{State: st, Function: *function, Limit: *limit, After: *after, Before: *before})
	if errors.Is(err, producer.ErrBadCursor) {
		return usageErrorf("runs list: %v", err)
	}
	if err != nil {
		return err
	}
	out := stdout(ctx)
	if *asJSON {
		runs := page.Runs
		if runs == nil {
			runs = []*jetflow.Run{}
		}
		return writeJSON(out, struct {
			Runs    []*jetflow.Run `json:"runs"`
			Next    string         `json:"next,omitempty"`
			Prev    string         `json:"prev,omitempty"`
			Indexed bool           `json:"indexed"`
		}{runs, page.Next, page.Prev, page.Indexed})
	}
	if len(page.Runs) == 0 {
		fmt.Fprintln(out, "no runs")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFUNCTION\tSTATE\tATTEMPTS\tSCHEDULED\tCOMPLETED\tERROR")
	for _, r := range page.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", printable(r.ID), printable(r.Name), printable(string(r.State)), r.Attempts,
			shortTime(r.ScheduledTime), shortTime(r.CompletedTime), oneLine(r.Error, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	again := "jetflow runs list"
	if st != "" {
		again += " --state " + string(st)
	}
	if *function != "" {
		again += " --function " + *function
	}
	if *limit != 50 {
		again += fmt.Sprintf(" --limit %d", *limit)
	}
	if page.Next != "" {
		fmt.Fprintf(out, "older: %s --after %s\n", again, page.Next)
	}
	if page.Prev != "" {
		fmt.Fprintf(out, "newer: %s --before %s\n", again, page.Prev)
	}
	if !page.Indexed {
		fmt.Fprintln(stderr(ctx), "note: no scheduler keeps the run index; every record was read")
	}
	return nil
}

// runsCounts prints the runs in each state: the run index's counts (one
// read) with a scheduler running, a scan of every record otherwise.
func runsCounts(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "runs counts", "[--function F] [--json]")
	var cf connFlags
	cf.add(fs)
	function := fs.String("function", "", "only runs of this function")
	asJSON := fs.Bool("json", false, "print the counts as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("runs counts: unexpected argument %q", pos[0])
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := c.p.Counts(ctx, *function)
	if err != nil {
		return err
	}
	out := stdout(ctx)
	if *asJSON {
		return writeJSON(out, res)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PENDING\tIN PROGRESS\tSUCCESS\tFAILED\tCANCELED\tTOTAL")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\n", res.Pending, res.InProgress, res.Success, res.Failed, res.Canceled, res.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case res.Source == "scan":
		fmt.Fprintln(out, "read every record (no scheduler keeps the run index)")
	case res.Rebuilding:
		fmt.Fprintf(out, "as of %s (the index is recounting); ended runs since %s\n", shortTime(res.AsOf), shortTime(res.TerminalSince))
	default:
		fmt.Fprintf(out, "as of %s; ended runs since %s\n", shortTime(res.AsOf), shortTime(res.TerminalSince))
	}
	return nil
}

// stateByName accepts states case-insensitively (inprogress, in_progress).
func stateByName(s string) (jetflow.State, bool) {
	norm := strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	for _, st := range []jetflow.State{jetflow.Pending, jetflow.InProgress, jetflow.Success, jetflow.Failed, jetflow.Canceled} {
		if strings.ToLower(string(st)) == norm {
			return st, true
		}
	}
	return "", false
}

// oneRunArgs parses the flags of a subcommand that takes one run id.
func oneRunArgs(ctx context.Context, name string, args []string, extra func(fs *flag.FlagSet)) (*connFlags, string, error) {
	fs := newFlagSet(ctx, name, "<id>")
	var cf connFlags
	cf.add(fs)
	if extra != nil {
		extra(fs)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, "", err
	}
	if len(pos) != 1 {
		fs.Usage()
		return nil, "", usageErrorf("%s: want one run id, got %d arguments", name, len(pos))
	}
	return &cf, pos[0], nil
}

func runsGet(ctx context.Context, args []string) error {
	var asJSON *bool
	cf, id, err := oneRunArgs(ctx, "runs get", args, func(fs *flag.FlagSet) {
		asJSON = fs.Bool("json", false, "print the record as JSON")
	})
	if err != nil {
		return err
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := c.getRun(ctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout(ctx), r)
	}
	return printRun(stdout(ctx), r)
}

// cancelJSON is the JSON of runs cancel, the dashboard's cancel answer.
type cancelJSON struct {
	Canceled bool         `json:"canceled"`
	Run      *jetflow.Run `json:"run"`
}

func runsCancel(ctx context.Context, args []string) error {
	var asJSON *bool
	cf, id, err := oneRunArgs(ctx, "runs cancel", args, func(fs *flag.FlagSet) {
		asJSON = fs.Bool("json", false, "print the result as JSON: canceled and the run record")
	})
	if err != nil {
		return err
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	before, err := c.getRun(ctx, id)
	if err != nil {
		return err
	}
	if before.State.Terminal() {
		if *asJSON {
			return writeJSON(stdout(ctx), cancelJSON{Canceled: false, Run: before})
		}
		fmt.Fprintf(stdout(ctx), "run %s already ended (%s); nothing to cancel\n", id, printable(string(before.State)))
		return nil
	}
	res, err := c.p.CancelRun(ctx, id)
	if err != nil && !res.Canceled {
		if errors.Is(err, jetflow.ErrNotFound) {
			return &notFoundError{"run", id}
		}
		return fmt.Errorf("cancel run %s: %w", id, err)
	}
	after := res.Run
	if *asJSON {
		if after == nil {
			after = before
		}
		if werr := writeJSON(stdout(ctx), cancelJSON{Canceled: res.Canceled, Run: after}); werr != nil {
			return werr
		}
		if res.Canceled {
			return err
		}
		return nil
	}
	switch {
	case res.Canceled:
		fmt.Fprintf(stdout(ctx), "run %s canceled (was %s)\n", id, printable(string(before.State)))
		if err != nil {
			// Canceled, but a part of it failed (a waiting entry left).
			return err
		}
	default:
		// It ended on its own between the read and the cancel.
		fmt.Fprintf(stdout(ctx), "run %s ended as %s before it could be canceled\n", id, printable(string(after.State)))
	}
	return nil
}

func runsWatch(ctx context.Context, args []string) error {
	var asJSON *bool
	cf, id, err := oneRunArgs(ctx, "runs watch", args, func(fs *flag.FlagSet) {
		asJSON = fs.Bool("json", false, "print each change as one run record in JSON per line")
	})
	if err != nil {
		return err
	}
	// A watch waits out a server restart, however long: it reconnects
	// for as long as it runs.
	cf.persistent = true
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.getRun(ctx, id); err != nil {
		return err
	}
	ch, err := c.p.Watch(ctx, id)
	if err != nil {
		return err
	}
	out := stdout(ctx)
	var last *jetflow.Run
	enc := json.NewEncoder(out)
	for r := range ch {
		if last == nil || notable(last, r) {
			if *asJSON {
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(out, describeChange(last, r))
			}
		}
		last = r
	}
	if last != nil && last.State.Terminal() {
		return watchOutcome(last)
	}
	if lost := connLost(ctx); lost != nil {
		return fmt.Errorf("watch of run %s ended before the run did: %w", id, lost)
	}
	if err := ctx.Err(); err != nil {
		return nil // interrupted: not an error of the run
	}
	return fmt.Errorf("watch of run %s ended before the run did", id)
}

// watchOutcome is the error of runs watch for a run that ended as r: nil
// on success, else an error whose exit code says failed (3) or canceled (4).
func watchOutcome(r *jetflow.Run) error {
	switch r.State {
	case jetflow.Failed:
		msg := "run " + r.ID + " failed"
		if r.Error != "" {
			msg += ": " + oneLine(r.Error, 200)
		}
		return &exitCodeError{code: exitRunFailed, err: errors.New(msg)}
	case jetflow.Canceled:
		return &exitCodeError{code: exitRunCanceled, err: fmt.Errorf("run %s canceled", r.ID)}
	}
	return nil
}

// describeChange is one line about record r, compared with prev (nil for
// the first record seen):
//
//	12:00:01.123  demo.hello  4bX...  pending -> success  (attempt 1, 3 ms)
func describeChange(prev, r *jetflow.Run) string {
	var b strings.Builder
	ts := time.Now()
	if prev == nil && r.State.Terminal() && !r.CompletedTime.IsZero() {
		ts = r.CompletedTime // an old record, first seen now
	}
	fmt.Fprintf(&b, "%s  %s  %s  ", ts.Local().Format("15:04:05.000"), printable(r.Name), printable(r.ID))
	from := "new"
	if prev != nil {
		from = printable(string(prev.State))
	}
	state := printable(string(r.State))
	if progressOnly(prev, r) {
		fmt.Fprintf(&b, "%s  progress %s", state, progressText(r.Progress))
		return b.String()
	}
	if prev == nil && (r.State != jetflow.Pending || r.Attempts > 0) {
		fmt.Fprintf(&b, "is %s", state) // first seen in the middle of its life
	} else {
		fmt.Fprintf(&b, "%s -> %s", from, state)
	}
	if notes := changeNotes(r); len(notes) > 0 {
		fmt.Fprintf(&b, "  (%s)", strings.Join(notes, ", "))
	}
	return b.String()
}

// changeNotes are the notes of describeChange on record r: when it is due,
// how its attempt went.
func changeNotes(r *jetflow.Run) []string {
	var notes []string
	switch {
	case r.State == jetflow.Pending && r.Attempts == 0:
		if d := time.Until(r.ScheduledTime); d > 50*time.Millisecond {
			notes = append(notes, "due in "+roundDur(d).String())
		}
	case r.State == jetflow.Pending:
		notes = append(notes, fmt.Sprintf("attempt %d failed: %s", r.Attempts, oneLine(r.Error, 80)))
		if d := time.Until(r.ScheduledTime); d > 0 {
			notes = append(notes, "retry in "+roundDur(d).String())
		} else {
			notes = append(notes, "retry now")
		}
	case r.State == jetflow.InProgress:
		notes = append(notes, fmt.Sprintf("attempt %d", r.Attempts))
		if r.Progress != nil {
			notes = append(notes, progressText(r.Progress))
		}
	case r.State.Terminal():
		if r.Attempts > 0 {
			notes = append(notes, fmt.Sprintf("attempt %d", r.Attempts))
		}
		if !r.StartedTime.IsZero() && !r.CompletedTime.IsZero() {
			notes = append(notes, humanDur(r.CompletedTime.Sub(r.StartedTime)))
		}
		if r.Error != "" {
			notes = append(notes, oneLine(r.Error, 80))
		}
	}
	return notes
}

func sameProgress(a, b *jetflow.Progress) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Updated, y.Updated = time.Time{}, time.Time{} // when is not what
	return x == y
}

// sameAttempt reports whether a and b, two records of a run, are at the
// same attempt in the same state.
func sameAttempt(a, b *jetflow.Run) bool { return a.State == b.State && a.Attempts == b.Attempts }

// progressOnly reports whether record r differs from prev (nil: none) only
// by its progress.
func progressOnly(prev, r *jetflow.Run) bool {
	if prev == nil || r.Progress == nil {
		return false
	}
	return sameAttempt(prev, r) && !sameProgress(prev.Progress, r.Progress)
}

func progressText(p *jetflow.Progress) string {
	var parts []string
	if p.Percent > 0 {
		parts = append(parts, fmt.Sprintf("%.0f%%", p.Percent))
	}
	if p.Total > 0 {
		parts = append(parts, fmt.Sprintf("%d/%d", p.Processed, p.Total))
	} else if p.Processed > 0 {
		parts = append(parts, fmt.Sprintf("%d done", p.Processed))
	}
	if p.Message != "" {
		parts = append(parts, printable(p.Message))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// runLabel is the width of the labels of printRun.
const runLabel = 14

// printRun prints every field of r that is set, one per line (the error,
// args and result may take several).
func printRun(w io.Writer, r *jetflow.Run) error {
	var b strings.Builder
	lines := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%-*s%s\n", runLabel, k+":", printableLines(v))
		}
	}
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%-*s%s\n", runLabel, k+":", printable(v))
		}
	}
	kind := string(r.Kind)
	if kind == "" {
		kind = string(jetflow.Retryable)
	}
	line("id", r.ID)
	line("function", r.Name)
	line("kind", kind)
	line("state", string(r.State))
	att := fmt.Sprint(r.Attempts)
	if r.MaxAttempts > 0 {
		att += fmt.Sprintf(" (max %d)", r.MaxAttempts)
	}
	line("attempts", att)
	line("scheduled", longTime(r.ScheduledTime))
	line("created", longTime(r.CreationTime))
	line("started", longTime(r.StartedTime))
	completed := longTime(r.CompletedTime)
	if completed != "" && !r.StartedTime.IsZero() {
		completed += "  (ran " + humanDur(r.CompletedTime.Sub(r.StartedTime)) + ")"
	}
	line("completed", completed)
	if r.Timeout > 0 {
		line("timeout", r.Timeout.String())
	}
	lines("error", r.Error)
	line("parent", r.Parent)
	line("held by", r.HeldBy)
	line("children", strings.Join(r.Children, " "))
	if r.Pool != "" {
		line("pool", fmt.Sprintf("%s (priority %d)", r.Pool, r.Priority))
	}
	if r.OnComplete != nil {
		line("on complete", r.OnComplete.Function+" "+string(r.OnComplete.Args))
	}
	if r.Progress != nil {
		pg := progressText(r.Progress)
		if !r.Progress.Updated.IsZero() {
			pg += "  (" + longTime(r.Progress.Updated) + ")"
		}
		line("progress", pg)
	}
	lines("args", prettyJSON(r.Args))
	lines("result", prettyJSON(r.Result))
	if len(r.Trace) > 0 {
		line("traceparent", r.Trace["traceparent"])
	}
	if r.Revision > 0 {
		line("revision", fmt.Sprint(r.Revision))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// prettyJSON shows raw JSON compact when short, else indented so that its
// lines line up with printRun's values.
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	if len(raw) <= 100 {
		var b bytes.Buffer
		if json.Compact(&b, raw) == nil {
			return b.String()
		}
		return string(raw)
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, strings.Repeat(" ", runLabel), "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// writeJSON writes v as indented JSON. The output is valid UTF-8: run data kept as raw JSON (args, results,
// event payloads) may hold invalid UTF-8 inside its strings, which
// encoding/json copies as it is and strict parsers refuse; each invalid
// byte sequence becomes U+FFFD, as encoding/json does for a Go string.
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	out := b.Bytes()
	if !utf8.Valid(out) {
		out = bytes.ToValidUTF8(out, []byte("\uFFFD"))
	}
	_, err := w.Write(out)
	return err
}

func shortTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	t = t.Local()
	y1, m1, d1 := t.Date()
	if y2, m2, d2 := time.Now().Date(); y1 == y2 && m1 == m2 && d1 == d2 {
		return t.Format("15:04:05.000")
	}
	return t.Format("2006-01-02 15:04:05")
}

func longTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05.000 MST")
}

// oneLine is the first line of s, at most max runes of it, printable.
func oneLine(s string, max int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	if utf8.RuneCountInString(s) > max {
		s = string([]rune(s)[:max-3]) + "..."
	}
	if s == "" {
		return "-"
	}
	return printable(s)
}

func roundDur(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}

func humanDur(d time.Duration) string {
	switch {
	case d < 0:
		return "0 ms"
	case d < 10*time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}
