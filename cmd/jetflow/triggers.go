package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/jetflow-dev/jetflow/workflow"
)

func init() {
	register("triggers", "messages of a stream or subject as runs: triggers list|add|pause|resume|delete", runTriggers)
}

const triggersUsage = `usage: jetflow triggers <subcommand> [flags]

  triggers list [--json]
  triggers add <name> <function> (--stream S [--subject F]... | --subject F...)
               [--id-header H] [--window N] [--new] [--workflow] [--json]
  triggers pause <name> [--json]     messages wait in the stream until resume
  triggers resume <name> [--json]
  triggers delete <name> [--json]    removes its consumer (and capture stream)

A trigger turns each message into one run of <function>, the message's JSON
as its args: --stream reads an existing stream (through a durable consumer
jetflow_trigger_<name>), filtered by --subject; without --stream the
--subject subjects are captured into a stream jetflow manages. The run id
derives from the stream and sequence, or from the header --id-header names.
--window (default 1000) holds the trigger off while the function has that
many runs waiting or running; --new starts with new messages only;
--workflow makes <function> a workflow's name (each message starts one).
Triggers run in every trigger runner (trigger.New in a worker process, or
jetflow dev). Every subcommand takes --url (default $JETFLOW_URL or
nats://127.0.0.1:4222) and --prefix (default jetflow); --json prints the
trigger as the dashboard's API does (delete: {"name", "deleted"}).`

func runTriggers(ctx context.Context, args []string) error {
	if done, err := subcommandHelp(ctx, "triggers", triggersUsage, args); done {
		return err
	}
	switch args[0] {
	case "list", "ls":
		return triggersList(ctx, args[1:])
	case "add":
		return triggersAdd(ctx, args[1:])
	case "pause", "resume", "delete":
		return triggersChange(ctx, args[0], args[1:])
	case "rm":
		return triggersChange(ctx, "delete", args[1:])
	}
	fmt.Fprintln(stderr(ctx), triggersUsage)
	return usageErrorf("triggers: unknown subcommand %q", args[0])
}

func triggersList(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "triggers list", "[--json]")
	var cf connFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print the triggers as JSON (the dashboard's /api/triggers)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("triggers list: unexpected argument %q", pos[0])
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	list, err := trigger.List(ctx, c.p)
	if err != nil {
		return err
	}
	out := stdout(ctx)
	if *asJSON {
		return writeJSON(out, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(out, "no triggers")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tTARGET\tSTATE\tRUNNERS\tWAITING\tMESSAGES\tRUNS\tEXISTING\tSKIPPED\tFAILED\tORIGIN")
	for _, ti := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", printable(ti.Name), printable(sourceText(ti.TriggerDef)),
			printable(targetText(ti.TriggerDef)), printable(triggerState(ti)), len(ti.Runners), waitingText(ti), ti.Totals.Messages,
			ti.Totals.Runs, ti.Totals.Existing, ti.Totals.Skipped, ti.Totals.Failed, printable(string(ti.Origin)))
	}
	return tw.Flush()
}

func sourceText(d trigger.Def) string {
	subj := strings.Join(d.Subjects, ",")
	if d.Stream == "" {
		return "subjects " + subj
	}
	if subj == "" {
		return "stream " + d.Stream
	}
	return "stream " + d.Stream + " " + subj
}

func targetText(d trigger.Def) string {
	if d.Workflow != "" {
		return "workflow " + d.Workflow
	}
	return d.Function
}

func triggerState(ti trigger.Info) string {
	if st := ti.State(); st != "held" {
		return st
	}
	return "held (window full)"
}

func waitingText(ti trigger.Info) string {
	if ti.Waiting < 0 {
		return "?"
	}
	return fmt.Sprint(ti.Waiting)
}

// stringsFlag is a repeatable flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func triggersAdd(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "triggers add", "<name> <function> (--stream S [--subject F]... | --subject F...) [--id-header H] [--window N] [--new] [--workflow] [--json]")
	var cf connFlags
	cf.add(fs)
	var subjects stringsFlag
	stream := fs.String("stream", "", "an existing stream to read (default: capture --subject into a stream jetflow manages)")
	fs.Var(&subjects, "subject", "a subject filter on --stream, or a subject to capture (repeatable)")
	idHeader := fs.String("id-header", "", "the header whose value makes the run id (default: stream and sequence)")
	window := fs.Int("window", trigger.DefaultWindow, "the most runs of the function waiting or running before the trigger holds off")
	deliverNew := fs.Bool("new", false, "only messages stored from now on (default: every message the stream holds)")
	isWorkflow := fs.Bool("workflow", false, "<function> names a workflow: each message starts one")
	asJSON := fs.Bool("json", false, "print the trigger as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return usageErrorf("triggers add: want a name and a function, got %d arguments", len(pos))
	}
	if *stream == "" && len(subjects) == 0 {
		return usageErrorf("triggers add: --stream or --subject")
	}
	def := trigger.Def{Name: pos[0], Function: pos[1], Stream: *stream, Subjects: subjects,
		IDHeader: *idHeader, Window: *window, DeliverNew: *deliverNew}
	if *isWorkflow {
		def.Workflow, def.Function = pos[1], workflow.StartFunction(pos[1])
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	d, err := trigger.Add(ctx, c.p, def)
	if err != nil {
		return fmt.Errorf("triggers add: %w", err)
	}
	if *asJSON {
		return writeJSON(stdout(ctx), d)
	}
	fmt.Fprintf(stdout(ctx), "trigger %s added: %s -> %s (window %d); trigger runners start it now\n", printable(d.Name), printable(sourceText(*d)), printable(targetText(*d)), d.Window)
	return nil
}

func triggersChange(ctx context.Context, verb string, args []string) error {
	fs := newFlagSet(ctx, "triggers "+verb, "<name> [--json]")
	var cf connFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErrorf("triggers %s: want one trigger name, got %d arguments", verb, len(pos))
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	name := pos[0]
	out := stdout(ctx)
	if verb == "delete" {
		if err := trigger.Delete(ctx, c.p, name); err != nil {
			return fmt.Errorf("triggers delete: %w", err)
		}
		if *asJSON {
			return writeJSON(out, map[string]any{"name": name, "deleted": true})
		}
		fmt.Fprintf(out, "trigger %s deleted (its runs are kept)\n", name)
		return nil
	}
	var d *trigger.Def
	if verb == "pause" {
		d, err = trigger.Pause(ctx, c.p, name)
	} else {
		d, err = trigger.Resume(ctx, c.p, name)
	}
	if err != nil {
		return fmt.Errorf("triggers %s: %w", verb, err)
	}
	if *asJSON {
		return writeJSON(out, d)
	}
	if d.Paused {
		fmt.Fprintf(out, "trigger %s paused: its messages wait in the stream until it is resumed\n", name)
	} else {
		fmt.Fprintf(out, "trigger %s resumed\n", name)
	}
	return nil
}
