package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/scheduler"
)

func init() {
	register("crons", "list, inspect, pause, resume, trigger, delete, add crons; preview a schedule: crons list|get|pause|resume|trigger|delete|add|next", runCrons)
}

const cronsUsage = `usage: jetflow crons <subcommand> [flags]

  crons list [--json]
  crons get <name> [--json]
  crons pause <name> [--json]
  crons resume <name> [--json]     next fire computed from now; nothing missed is replayed
  crons trigger <name> [--json]    start the cron's run now (id trigger-<name>-<unix second>)
  crons delete <name> [--json]
  crons add <name> '<schedule>' <function> ['<json args>'] [--tz Z] [--overlap] [--catch-up N] [--json]
  crons next '<schedule>' [--tz Z] [--from RFC3339] [-n 10] [--json]

A schedule is "every 30s", "hourly 15", "daily 9:30", "weekly mon 9:00",
"monthly 31 9:00", a cron expression ("0 9 * * 1-5", 6 fields with seconds
first, or @hourly, @daily, @weekly, @monthly, @yearly), optionally followed by
a zone in parentheses: "daily 9:30 (America/New_York)", or given with --tz.

Every subcommand but next takes --url (default $JETFLOW_URL or
nats://127.0.0.1:4222) and --prefix (default jetflow); --json prints the
cron as the dashboard's API does (delete: {"name", "deleted"}; trigger:
{"cron", "run"}; next:
{"schedule", "from", "times"}).`

func runCrons(ctx context.Context, args []string) error {
	if done, err := subcommandHelp(ctx, "crons", cronsUsage, args); done {
		return err
	}
	switch args[0] {
	case "list", "ls":
		return cronsList(ctx, args[1:])
	case "get", "show":
		return cronsGet(ctx, args[1:])
	case "pause", "disable":
		return cronsChange(ctx, "pause", args[1:])
	case "resume", "enable":
		return cronsChange(ctx, "resume", args[1:])
	case "trigger":
		return cronsChange(ctx, "trigger", args[1:])
	case "delete", "rm":
		return cronsChange(ctx, "delete", args[1:])
	case "add", "register":
		return cronsAdd(ctx, args[1:])
	case "next", "preview":
		return cronsNext(ctx, args[1:])
	}
	fmt.Fprintln(stderr(ctx), cronsUsage)
	return usageErrorf("crons: unknown subcommand %q", args[0])
}

// cronsClient connects and returns the crons API on the server's buckets.
func cronsClient(ctx context.Context, cf *connFlags) (*client, *scheduler.Crons, error) {
	c, err := cf.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	crons, err := scheduler.NewCrons(ctx, c.js, scheduler.CronConfig{Streams: c.sc})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, crons, nil
}

func cronsList(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "crons list", "[--json]")
	var cf connFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print the crons as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("crons list: unexpected argument %q", pos[0])
	}
	c, crons, err := cronsClient(ctx, &cf)
	if err != nil {
		return err
	}
	defer c.Close()
	list, err := crons.List(ctx)
	if err != nil {
		return err
	}
	out := stdout(ctx)
	if *asJSON {
		if list == nil {
			list = []*scheduler.CronInfo{}
		}
		return writeJSON(out, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(out, "no crons")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tSCHEDULE\tTZ\tSTATUS\tNEXT (UTC)\tLAST RUN\tOUTCOME\tSKIPPED\tMISSED\tFUNCTION\tORIGIN")
	for _, ci := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", printable(ci.Name), printable(string(ci.Schedule.Kind)),
			printable(scheduleText(ci.Schedule)), printable(zoneText(ci.Schedule)), status(ci), utcTime(ci.Next),
			printable(lastRunText(ci.Last)), printable(outcomeText(ci.Last)), ci.Skipped, ci.Missed, printable(ci.Function), printable(string(ci.Origin)))
	}
	return tw.Flush()
}

func cronsGet(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "crons get", "<name> [--json]")
	var cf connFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print the cron as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErrorf("crons get: want one cron name, got %d arguments", len(pos))
	}
	c, crons, err := cronsClient(ctx, &cf)
	if err != nil {
		return err
	}
	defer c.Close()
	ci, err := crons.Get(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout(ctx), ci)
	}
	return printCron(stdout(ctx), ci)
}

func printCron(w io.Writer, ci *scheduler.CronInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, printable(v)) }
	row("name", ci.Name)
	row("origin", string(ci.Origin))
	row("type", string(ci.Schedule.Kind))
	row("schedule", scheduleText(ci.Schedule))
	row("time zone", zoneText(ci.Schedule))
	row("status", status(ci))
	row("function", fmt.Sprintf("%s (%s)", ci.Function, ci.Kind))
	row("args", string(ci.Args))
	row("overlap", fmt.Sprint(ci.Overlap))
	row("catch up", fmt.Sprint(ci.CatchUp))
	row("next", fireTime(ci.Next, ci.Schedule.TZ))
	if ci.Last != nil {
		row("last run", fmt.Sprintf("%s  %s  %s", fireTime(ci.Last.Time, ci.Schedule.TZ), ci.Last.RunID, outcomeText(ci.Last)))
		if ci.Last.Error != "" {
			row("last error", oneLine(ci.Last.Error, 120))
		}
	} else {
		row("last run", "-")
	}
	row("fired", fmt.Sprint(ci.Fired))
	row("skipped", fmt.Sprintf("%d (previous run still active)", ci.Skipped))
	row("missed", fmt.Sprintf("%d (scheduler down, not replayed)", ci.Missed))
	row("created", utcTime(ci.Created))
	row("updated", utcTime(ci.Updated))
	return tw.Flush()
}

func cronsChange(ctx context.Context, verb string, args []string) error {
	fs := newFlagSet(ctx, "crons "+verb, "<name> [--json]")
	var cf connFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print the cron after the change as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErrorf("crons %s: want one cron name, got %d arguments", verb, len(pos))
	}
	c, crons, err := cronsClient(ctx, &cf)
	if err != nil {
		return err
	}
	defer c.Close()
	name := pos[0]
	var run *jetflow.Run
	switch verb {
	case "trigger":
		// A record that cannot be used (its schedule does not validate,
		// ...) is refused with the reason: scheduler.ErrBadCronRecord.
		run, err = crons.Trigger(ctx, name)
	case "pause":
		err = crons.Pause(ctx, name)
	case "resume":
		err = crons.Resume(ctx, name)
	case "delete":
		var ci *scheduler.CronInfo
		if ci, err = crons.Get(ctx, name); err == nil {
			if err = crons.Delete(ctx, name); err == nil && ci.Origin == scheduler.OriginCode {
				fmt.Fprintf(stderr(ctx), "note: %s is defined in code; it comes back when a scheduler defining it becomes leader\n", name)
			}
		}
	}
	if err != nil {
		return err
	}
	out := stdout(ctx)
	if *asJSON {
		if verb == "delete" {
			return writeJSON(out, struct {
				Name    string `json:"name"`
				Deleted bool   `json:"deleted"`
			}{name, true})
		}
		ci, err := crons.Get(ctx, name)
		if err != nil {
			return err
		}
		if verb == "trigger" {
			return writeJSON(out, struct {
				Cron *scheduler.CronInfo `json:"cron"`
				Run  *jetflow.Run        `json:"run"`
			}{ci, run})
		}
		return writeJSON(out, ci)
	}
	switch verb {
	case "trigger":
		fmt.Fprintf(out, "cron %s triggered: run %s\n", name, run.ID)
	case "pause":
		fmt.Fprintf(out, "cron %s paused\n", name)
	case "resume":
		ci, err := crons.Get(ctx, name)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "cron %s resumed; next fire %s\n", name, fireTime(ci.Next, ci.Schedule.TZ))
	case "delete":
		fmt.Fprintf(out, "cron %s deleted\n", name)
	}
	return nil
}

func cronsAdd(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "crons add", "<name> '<schedule>' <function> ['<json args>'] [--tz Z] [--overlap] [--catch-up N] [--json]")
	var cf connFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print the registered cron as JSON")
	tz := fs.String("tz", "", "IANA time zone of the schedule (default UTC)")
	overlap := fs.Bool("overlap", false, "let a fire start while the previous run is still pending or running")
	catchUp := fs.Int("catch-up", 0, "replay at most this many fires missed while no scheduler ran")
	atMostOnce := fs.Bool("at-most-once", false, "the function is at-most-once (default retryable)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 3 || len(pos) > 4 {
		fs.Usage()
		return usageErrorf("crons add: want <name> <schedule> <function> [<json args>], got %d arguments", len(pos))
	}
	spec, err := parseSpec(pos[1], *tz)
	if err != nil {
		return err
	}
	args0 := "{}"
	if len(pos) == 4 {
		args0 = pos[3]
	}
	if !json.Valid([]byte(args0)) {
		return fmt.Errorf("crons add: args %q are not valid JSON", args0)
	}
	call := jetflow.RawCall(pos[2], json.RawMessage(args0))
	if *atMostOnce {
		call.Kind = jetflow.AtMostOnce
	}
	c, crons, err := cronsClient(ctx, &cf)
	if err != nil {
		return err
	}
	defer c.Close()
	ci, err := crons.Register(ctx, scheduler.CronDef{Name: pos[0], Schedule: spec, Call: call, Overlap: *overlap, CatchUp: *catchUp})
	if err != nil {
		return err
	}
	if fns, err := c.functions(ctx, ci.Function); err == nil && len(fns) == 0 {
		fmt.Fprintf(stderr(ctx), "warning: no worker serves %s yet; its runs will wait as pending\n", ci.Function)
	}
	if *asJSON {
		return writeJSON(stdout(ctx), ci)
	}
	fmt.Fprintf(stdout(ctx), "cron %s registered: %s; next fire %s\n", printable(ci.Name), printable(ci.Schedule.String()), fireTime(ci.Next, ci.Schedule.TZ))
	return nil
}

func cronsNext(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "crons next", "'<schedule>' [--tz Z] [--from RFC3339] [-n 10] [--json]")
	asJSON := fs.Bool("json", false, "print the schedule and its fire times as JSON")
	tz := fs.String("tz", "", "IANA time zone of the schedule (default UTC)")
	from := fs.String("from", "", "registration time, RFC 3339 (default now)")
	n := fs.Int("n", 10, "how many fire times")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return usageErrorf("crons next: want a schedule")
	}
	spec, err := parseSpec(strings.Join(pos, " "), *tz)
	if err != nil {
		return err
	}
	at := time.Now()
	if *from != "" {
		if at, err = time.Parse(time.RFC3339, *from); err != nil {
			return fmt.Errorf("crons next: --from %q: want RFC 3339, e.g. 2026-03-07T12:00:00Z", *from)
		}
	}
	if *n < 1 || *n > 10000 {
		return fmt.Errorf("crons next: -n %d: must be 1 to 10000", *n)
	}
	times, err := scheduler.Preview(spec, at, *n)
	if err != nil {
		return err
	}
	out := stdout(ctx)
	if *asJSON {
		return writeJSON(out, struct {
			Schedule string      `json:"schedule"`
			From     time.Time   `json:"from"`
			Times    []time.Time `json:"times"`
		}{spec.String(), at.UTC(), times})
	}
	fmt.Fprintf(out, "%s, registered at %s:\n", spec, at.UTC().Format(time.RFC3339))
	zone := spec.TZ
	if zone == "" {
		zone = *tz
	}
	for _, t := range times {
		fmt.Fprintf(out, "  %s\n", fireTime(t, zone))
	}
	return nil
}

// parseSpec reads a schedule; tz, if set, is its zone.
func parseSpec(text, tz string) (scheduler.Schedule, error) {
	spec, err := scheduler.ParseSchedule(text)
	if err != nil {
		return spec, err
	}
	if tz != "" && tz != "UTC" {
		if spec.TZ != "" && spec.TZ != tz {
			return spec, fmt.Errorf("schedule %q is in %s but --tz says %s", text, spec.TZ, tz)
		}
		if spec.Kind != "interval" {
			spec = spec.In(tz)
		}
		if err := spec.Validate(0); err != nil {
			return spec, err
		}
	}
	return spec, nil
}

// scheduleText is the schedule without its zone.
func scheduleText(s scheduler.Schedule) string {
	str := s.String()
	if i := strings.LastIndex(str, " ("); i > 0 && strings.HasSuffix(str, ")") {
		str = str[:i]
	}
	return str
}

func zoneText(s scheduler.Schedule) string {
	switch {
	case s.Kind == "interval":
		return "-"
	case s.TZ == "":
		return "UTC"
	}
	return s.TZ
}

func status(ci *scheduler.CronInfo) string {
	if ci.Enabled {
		return "enabled"
	}
	return "paused"
}

func utcTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// fireTime prints t in UTC and, for a zone, on its wall clock.
func fireTime(t time.Time, zone string) string {
	if t.IsZero() {
		return "-"
	}
	s := t.UTC().Format(time.RFC3339)
	if zone != "" && zone != "UTC" {
		if loc, err := time.LoadLocation(zone); err == nil {
			s += "  " + t.In(loc).Format("Mon 2006-01-02 15:04:05 MST")
		}
	} else {
		s += "  " + t.UTC().Format("Mon")
	}
	return s
}

func lastRunText(r *scheduler.CronRun) string {
	if r == nil {
		return "-"
	}
	return utcTime(r.Time) + " " + r.RunID
}

func outcomeText(r *scheduler.CronRun) string {
	switch {
	case r == nil:
		return "-"
	case r.State == "":
		return "expired"
	case r.State == jetflow.Failed && r.Error != "":
		return "failed: " + oneLine(r.Error, 40)
	}
	return string(r.State)
}
