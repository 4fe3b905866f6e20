package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
)

func init() {
	register("functions", "the functions workers serve: functions list|pause|resume", runFunctions)
}

// functionRow is one function of `functions list`, summed over its workers.
type functionRow struct {
	Name        string    `json:"name"`
	Kind        string    `json:"kind"`
	Workers     []string  `json:"workers"`
	Concurrency int       `json:"concurrency"`
	MaxParallel int       `json:"maxParallel"`
	MaxAttempts int       `json:"maxAttempts"`
	LastSeen    time.Time `json:"lastSeen"`
	Paused      bool      `json:"paused,omitempty"`
}

func runFunctions(ctx context.Context, args []string) error {
	const functionsUsage = "usage: jetflow functions list [--json] | stats [--json] [--target N] | pause <function> | resume <function>   [--url URL] [--prefix P]"
	if done, err := subcommandHelp(ctx, "functions", functionsUsage, args); done {
		return err
	}
	if args[0] == "pause" || args[0] == "resume" {
		return runFunctionPause(ctx, args[0], args[1:])
	}
	if args[0] == "stats" {
		return runFunctionStats(ctx, args[1:]) // stats.go
	}
	if args[0] != "list" && args[0] != "ls" {
		fmt.Fprintln(stderr(ctx), functionsUsage)
		return usageErrorf("functions: unknown subcommand %q", args[0])
	}
	fs := newFlagSet(ctx, "functions list", "[--json]")
	var cf connFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print as JSON, one entry per function and worker (the dashboard's /api/functions; maxAttempts 2147483647: unlimited)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("functions list: unexpected argument %q", pos[0])
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	infos, err := c.functions(ctx, "")
	if err != nil {
		return err
	}
	out := stdout(ctx)
	if *asJSON {
		// What the dashboard's /api/functions returns: one entry per
		// function and worker.
		if infos == nil {
			infos = []kv.FunctionInfo{}
		}
		return writeJSON(out, infos)
	}
	rows := groupFunctions(infos)
	if len(rows) == 0 {
		fmt.Fprintln(out, "no worker serves any function right now (workers register theirs when they start)")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FUNCTION\tKIND\tWORKERS\tCONCURRENCY\tMAX ATTEMPTS\tLAST SEEN\tSTATE")
	for _, r := range rows {
		state := "running"
		if r.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s ago\t%s\n", printable(r.Name), printable(r.Kind), len(r.Workers), r.Concurrency,
			maxAttempts(r.MaxAttempts), humanAge(time.Since(r.LastSeen)), state)
	}
	return tw.Flush()
}

// groupFunctions sums the registry entries per function, sorted by name.
func groupFunctions(infos []kv.FunctionInfo) []functionRow {
	by := map[string]*functionRow{}
	for _, fi := range infos {
		r := by[fi.Name]
		if r == nil {
			r = &functionRow{Name: fi.Name, Kind: string(fi.Kind), MaxAttempts: fi.MaxAttempts}
			if fi.Kind == jetflow.AtMostOnce {
				r.MaxAttempts = 1 // never run twice, whatever the options say
			}
			by[fi.Name] = r
		}
		r.Workers = append(r.Workers, fi.Worker)
		r.Paused = r.Paused || fi.Paused
		r.Concurrency += fi.Concurrency
		r.MaxParallel = max(r.MaxParallel, fi.MaxParallel)
		if fi.Seen.After(r.LastSeen) {
			r.LastSeen = fi.Seen
		}
	}
	rows := make([]functionRow, 0, len(by))
	for _, r := range by {
		sort.Strings(r.Workers)
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows
}

// maxAttempts reads a function's max attempts: "unlimited" for
// kv.UnlimitedAttempts (the retrier's internal functions).
func maxAttempts(n int) string {
	if n >= kv.UnlimitedAttempts {
		return "unlimited"
	}
	return strconv.Itoa(n)
}

func humanAge(d time.Duration) string {
	if d < time.Second {
		return "<1s"
	}
	return d.Round(time.Second).String()
}

// runFunctionPause pauses or resumes a function on every worker: its runs
// wait as pending while it is paused.
func runFunctionPause(ctx context.Context, verb string, args []string) error {
	fs := newFlagSet(ctx, "functions "+verb, "<function> [--json]")
	var cf connFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print the result as JSON ({function, paused})")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("functions %s: want one function name", verb)
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	paused := verb == "pause"
	if err := kv.SetPaused(ctx, c.js, c.sc, pos[0], paused); err != nil {
		return fmt.Errorf("functions %s: %w", verb, err)
	}
	if *asJSON {
		return writeJSON(stdout(ctx), map[string]any{"function": pos[0], "paused": paused})
	}
	if paused {
		fmt.Fprintf(stdout(ctx), "%s paused: workers take none of its runs until it is resumed (they wait as pending)\n", pos[0])
	} else {
		fmt.Fprintf(stdout(ctx), "%s resumed\n", pos[0])
	}
	return nil
}
