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

// workflowsCall is a workflows subcommand as its flags and arguments say.
type workflowsCall struct {
	verb    string
	pos     []string
	id      string // pos[0]
	asJSON  bool
	newID   string          // restart's --id
	payload json.RawMessage // send-event's
	out     io.Writer
	c       *client
}

func runWorkflows(ctx context.Context, args []string) error {
	if done, err := subcommandHelp(ctx, "workflows", workflowsUsage, args); done {
		return err
	}
	w, cf, err := parseWorkflowsArgs(ctx, args)
	if err != nil {
		return err
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	w.c, w.out = c, stdout(ctx)
	switch w.verb {
	case "definition":
		return w.definition(ctx)
	case "get":
		return w.get(ctx)
	case "send-event":
		return w.sendEvent(ctx)
	case "cancel":
		return w.cancel(ctx)
	}
	return w.restart(ctx)
}

// parseWorkflowsArgs reads and checks a workflows subcommand's flags and
// arguments.
func parseWorkflowsArgs(ctx context.Context, args []string) (*workflowsCall, *connFlags, error) {
	verb, rest := args[0], args[1:]
	want := map[string]int{"get": 1, "send-event": 3, "cancel": 1, "restart": 1, "definition": 1}
	n, ok := want[verb]
	if !ok {
		fmt.Fprintln(stderr(ctx), workflowsUsage)
		return nil, nil, usageErrorf("workflows: unknown subcommand %q", verb)
	}
	fs := newFlagSet(ctx, "workflows "+verb, "")
	cf := &connFlags{}
	cf.add(fs)
	w := &workflowsCall{verb: verb}
	fs.BoolVar(&w.asJSON, "json", false, "print as JSON")
	fs.StringVar(&w.newID, "id", "", "restart: the new workflow's id (default generated)")
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		return nil, nil, err
	}
	argsOK := len(pos) == n || verb == "definition" && len(pos) == 2
	if !argsOK {
		return nil, nil, usageErrorf("workflows %s: want %d argument(s), got %d", verb, n, len(pos))
	}
	if verb != "restart" && w.newID != "" {
		return nil, nil, usageErrorf("workflows %s: --id is restart's flag", verb)
	}
	if verb == "send-event" {
		if !json.Valid([]byte(pos[2])) {
			return nil, nil, usageErrorf("workflows send-event: the payload %q is not JSON", pos[2])
		}
		w.payload = json.RawMessage(pos[2])
	}
	w.pos, w.id = pos, pos[0]
	return w, cf, nil
}

// definition sets the state of a workflow definition (when given), and
// prints it.
func (w *workflowsCall) definition(ctx context.Context) error {
	if len(w.pos) == 2 {
		if err := workflow.SetDefinitionState(ctx, w.c.p, w.id, workflow.DefinitionState(w.pos[1])); err != nil {
			return fmt.Errorf("workflow definition %s: %w", w.id, err)
		}
	}
	st, err := workflow.DefinitionStateOf(ctx, w.c.p, w.id)
	if err != nil {
		return err
	}
	if w.asJSON {
		return writeJSON(w.out, map[string]string{"definition": w.id, "state": string(st)})
	}
	_, err = fmt.Fprintf(w.out, "workflow definition %s is %s\n", printable(w.id), printable(string(st)))
	return err
}

func (w *workflowsCall) get(ctx context.Context) error {
	st, err := workflow.Get(ctx, w.c.p, w.id)
	if err != nil {
		return fmt.Errorf("workflow %s: %w", w.id, err)
	}
	if w.asJSON {
		return writeJSON(w.out, st)
	}
	return printWorkflow(w.out, st)
}

func (w *workflowsCall) sendEvent(ctx context.Context) error {
	event := w.pos[1]
	if err := workflow.SendEvent(ctx, w.c.p, w.id, event, w.payload); err != nil {
		return fmt.Errorf("workflow %s: event %s: %w", w.id, event, err)
	}
	if w.asJSON {
		return writeJSON(w.out, map[string]any{"workflow": w.id, "event": event, "sent": true})
	}
	_, err := fmt.Fprintf(w.out, "event %s sent to workflow %s\n", printable(event), printable(w.id))
	return err
}

// cancel cancels a workflow; a plain run is not canceled as a workflow
// (runs cancel does that).
func (w *workflowsCall) cancel(ctx context.Context) error {
	id := w.id
	r, err := w.c.p.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("workflow %s: %w", id, err)
	}
	if !wfwire.IsWorkflow(r) {
		return fmt.Errorf("run %s (%s): %w (cancel it with: jetflow runs cancel %s)", id, r.Name, producer.ErrNotWorkflow, id)
	}
	res, err := w.c.p.CancelRun(ctx, id)
	if err != nil {
		return fmt.Errorf("workflow %s: %w", id, err)
	}
	if w.asJSON {
		return writeJSON(w.out, map[string]any{"canceled": res.Canceled, "run": res.Run})
	}
	if res.Canceled {
		_, err = fmt.Fprintf(w.out, "workflow %s canceled: it stops at its next step, and what it started is canceled\n", id)
	} else {
		_, err = fmt.Fprintf(w.out, "workflow %s had already ended (%s)\n", id, printable(string(res.Run.State)))
	}
	return err
}

func (w *workflowsCall) restart(ctx context.Context) error {
	var opts []workflow.StartOption
	if w.newID != "" {
		opts = append(opts, workflow.WithID(w.newID))
	}
	nid, err := workflow.Restart(ctx, w.c.p, w.id, opts...)
	if err != nil {
		return fmt.Errorf("workflow %s: %w", w.id, err)
	}
	if w.asJSON {
		return writeJSON(w.out, map[string]string{"restartOf": w.id, "id": nid})
	}
	_, err = fmt.Fprintf(w.out, "workflow %s restarted as %s (the steps that succeeded keep their results)\n", w.id, nid)
	return err
}

// printWorkflow prints a workflow's record and steps.
func printWorkflow(w io.Writer, st *workflow.Status) error {
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
		_, err := fmt.Fprintln(w, "no step journaled yet")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tNAME\tKIND\tSTATE\tATTEMPTS\tSTARTED\tCOMPLETED\tERROR")
	for _, s := range st.Steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", printable(s.Step), printable(s.Name), printable(string(s.Kind)),
			printable(string(s.State)), s.Attempts, fmtStepTime(s.Started), fmtStepTime(s.Completed), printable(s.Error))
	}
	return tw.Flush()
}

func fmtStepTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05.000")
}
