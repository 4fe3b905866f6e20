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
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/workflow"
)

func init() {
	register("workflows", "durable workflows: workflows get|send-event|cancel|restart|definition", runWorkflows)
}

const workflowsUsage = `usage: jetflow workflows get <id> [--json]
       jetflow workflows send-event <id> <event> <json> [--json]
       jetflow workflows cancel <id> [--json]
       jetflow workflows restart <id> [--id NEW] [--json]
       jetflow workflows definition <name> [active|paused|deprecated|deleted]
(list them with: jetflow runs list --function <workflow name>)`

func runWorkflows(ctx context.Context, args []string) error {
	if done, err := subcommandHelp(ctx, "workflows", workflowsUsage, args); done {
		return err
	}
	verb, rest := args[0], args[1:]
	want := map[string]int{"get": 1, "send-event": 3, "cancel": 1, "restart": 1, "definition": 1}
	n, ok := want[verb]
	if !ok {
		fmt.Fprintln(stderr(ctx), workflowsUsage)
		return usageErrorf("workflows: unknown subcommand %q", verb)
	}
	fs := newFlagSet(ctx, "workflows "+verb, "")
	var cf connFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print as JSON")
	newID := fs.String("id", "", "restart: the new workflow's id (default generated)")
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		return err
	}
	if len(pos) != n && !(verb == "definition" && len(pos) == 2) {
		return usageErrorf("workflows %s: want %d argument(s), got %d", verb, n, len(pos))
	}
	if verb != "restart" && *newID != "" {
		return usageErrorf("workflows %s: --id is restart's flag", verb)
	}
	var payload json.RawMessage
	if verb == "send-event" {
		if !json.Valid([]byte(pos[2])) {
			return usageErrorf("workflows send-event: the payload %q is not JSON", pos[2])
		}
		payload = json.RawMessage(pos[2])
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	out := stdout(ctx)
	id := pos[0]
	switch verb {
	case "definition":
		if len(pos) == 2 {
			if err := workflow.SetDefinitionState(ctx, c.p, id, workflow.DefinitionState(pos[1])); err != nil {
				return fmt.Errorf("workflow definition %s: %w", id, err)
			}
		}
		st, err := workflow.DefinitionStateOf(ctx, c.p, id)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(out, map[string]string{"definition": id, "state": string(st)})
		}
		fmt.Fprintf(out, "workflow definition %s is %s\n", printable(id), printable(string(st)))
		return nil
	case "get":
		st, err := workflow.Get(ctx, c.p, id)
		if err != nil {
			return fmt.Errorf("workflow %s: %w", id, err)
		}
		if *asJSON {
			return writeJSON(out, st)
		}
		printWorkflow(out, st)
		return nil
	case "send-event":
		if err := workflow.SendEvent(ctx, c.p, id, pos[1], payload); err != nil {
			return fmt.Errorf("workflow %s: event %s: %w", id, pos[1], err)
		}
		if *asJSON {
			return writeJSON(out, map[string]any{"workflow": id, "event": pos[1], "sent": true})
		}
		fmt.Fprintf(out, "event %s sent to workflow %s\n", printable(pos[1]), printable(id))
		return nil
	case "cancel":
		// A plain run is not canceled as a workflow (runs cancel does that).
		r, err := c.p.Get(ctx, id)
		if err != nil {
			return fmt.Errorf("workflow %s: %w", id, err)
		}
		if !wfwire.IsWorkflow(r) {
			return fmt.Errorf("run %s (%s): %w (cancel it with: jetflow runs cancel %s)", id, r.Name, producer.ErrNotWorkflow, id)
		}
		res, err := c.p.CancelRun(ctx, id)
		if err != nil {
			return fmt.Errorf("workflow %s: %w", id, err)
		}
		if *asJSON {
			return writeJSON(out, map[string]any{"canceled": res.Canceled, "run": res.Run})
		}
		if res.Canceled {
			fmt.Fprintf(out, "workflow %s canceled: it stops at its next step, and what it started is canceled\n", id)
		} else {
			fmt.Fprintf(out, "workflow %s had already ended (%s)\n", id, printable(string(res.Run.State)))
		}
		return nil
	default: // restart
		var opts []workflow.StartOption
		if *newID != "" {
			opts = append(opts, workflow.WithID(*newID))
		}
		nid, err := workflow.Restart(ctx, c.p, id, opts...)
		if err != nil {
			return fmt.Errorf("workflow %s: %w", id, err)
		}
		if *asJSON {
			return writeJSON(out, map[string]string{"restartOf": id, "id": nid})
		}
		fmt.Fprintf(out, "workflow %s restarted as %s (the steps that succeeded keep their results)\n", id, nid)
		return nil
	}
}

// printWorkflow prints a workflow's record and steps.
func printWorkflow(w io.Writer, st *workflow.Status) {
	r := st.Run
	fmt.Fprintf(w, "workflow  %s (%s)\nstate     %s", printable(r.ID), printable(r.Name), printable(string(r.State)))
	if st.Waiting && !r.State.Terminal() {
		fmt.Fprintf(w, ", waiting for %s", printable(strings.Join(st.Waits, ", ")))
	}
	fmt.Fprintln(w)
	if r.Error != "" {
		fmt.Fprintf(w, "error     %s\n", printableLines(r.Error))
	}
	if len(r.Result) > 0 && r.State == jetflow.Success {
		fmt.Fprintf(w, "result    %s\n", printableLines(string(r.Result)))
	}
	if len(st.Steps) == 0 {
		fmt.Fprintln(w, "no step journaled yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tNAME\tKIND\tSTATE\tATTEMPTS\tSTARTED\tCOMPLETED\tERROR")
	for _, s := range st.Steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", printable(s.Step), printable(s.Name), printable(string(s.Kind)),
			printable(string(s.State)), s.Attempts, fmtStepTime(s.Started), fmtStepTime(s.Completed), printable(s.Error))
	}
	_ = tw.Flush()
}

func fmtStepTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05.000")
}
