package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
)

func init() {
	register("enqueue", "schedule a run: enqueue <function> <json> [--after 5s] [--at RFC3339] [--id ID]", runEnqueue)
}

func runEnqueue(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "enqueue", "<function> [<json args>] [--after 5s | --at RFC3339] [--id ID] [--max-attempts N] [--json]")
	var cf connFlags
	cf.add(fs)
	after := fs.Duration("after", 0, "start the run after this delay (e.g. 5s, 10m)")
	at := fs.String("at", "", "start the run at this time, RFC 3339 (e.g. 2026-12-25T09:00:00Z)")
	id := fs.String("id", "", "run id, an idempotency key (default: generated)")
	maxAttempts := fs.Int("max-attempts", 0, "attempts of this run, first included (default: the function's)")
	asJSON := fs.Bool("json", false, "print the run's record as JSON (the dashboard's run), not its id")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		fs.Usage()
		return usageErrorf("enqueue: want a function name and its JSON arguments, got %d arguments", len(pos))
	}
	fn, raw := pos[0], "{}"
	if len(pos) == 2 {
		raw = pos[1]
	}
	if err := jetflow.ValidateName(fn); err != nil {
		return fmt.Errorf("enqueue: function %q: dot-separated tokens of letters, digits, '_' and '-' (e.g. emails.send): %w", fn, err)
	}
	if err := checkJSON(raw); err != nil {
		return fmt.Errorf("enqueue: arguments %s: %w", raw, err)
	}
	opts, err := enqueueOptions(*id, *maxAttempts)
	if err != nil {
		return err
	}
	when, err := runTime(*at, *after)
	if err != nil {
		return err
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	runID, err := c.p.RunAt(ctx, when, jetflow.RawCall(fn, json.RawMessage(raw)), opts...)
	if errors.Is(err, producer.ErrAlreadyExists) {
		return fmt.Errorf("run %s already exists; not scheduled again (see jetflow runs get %s)", runID, runID)
	}
	if err != nil {
		return fmt.Errorf("enqueue %s: %w", fn, err)
	}
	if err := printEnqueued(ctx, c, fn, runID, *asJSON); err != nil {
		return err
	}
	warnUnserved(ctx, c, fn, runID)
	return nil
}

// enqueueOptions checks --id and --max-attempts, and returns their options.
func enqueueOptions(id string, maxAttempts int) ([]producer.Option, error) {
	var opts []producer.Option
	if id != "" {
		if err := jetflow.ValidateRunID(id); err != nil {
			return nil, fmt.Errorf("enqueue: --id %q: 1-200 letters, digits, '_' or '-': %w", id, err)
		}
		opts = append(opts, producer.WithID(id))
	}
	if maxAttempts < 0 {
		return nil, fmt.Errorf("enqueue: --max-attempts %d: must be positive", maxAttempts)
	}
	if maxAttempts > 0 {
		opts = append(opts, producer.WithMaxAttempts(maxAttempts))
	}
	return opts, nil
}

// runTime is when --at or --after start the run: the zero time for now.
func runTime(at string, after time.Duration) (time.Time, error) {
	switch {
	case at != "" && after != 0:
		return time.Time{}, errors.New("enqueue: give --after or --at, not both")
	case at != "":
		when, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return time.Time{}, fmt.Errorf("enqueue: --at %q: not an RFC 3339 time such as 2026-12-25T09:00:00Z", at)
		}
		return when, nil
	case after < 0:
		return time.Time{}, fmt.Errorf("enqueue: --after %s: must not be negative", after)
	case after > 0:
		return time.Now().Add(after), nil
	}
	return time.Time{}, nil
}

// printEnqueued prints the run's id, or its record as JSON.
func printEnqueued(ctx context.Context, c *client, fn, runID string, asJSON bool) error {
	if !asJSON {
		_, err := fmt.Fprintln(stdout(ctx), runID)
		return err
	}
	r, err := c.getRun(ctx, runID)
	if err != nil {
		return fmt.Errorf("enqueue %s: run %s scheduled, but reading it back: %w", fn, runID, err)
	}
	return writeJSON(stdout(ctx), r)
}

// warnUnserved warns on stderr when no worker serves function fn.
func warnUnserved(ctx context.Context, c *client, fn, runID string) {
	served, err := c.functions(ctx, fn)
	switch {
	case err != nil:
		fmt.Fprintf(stderr(ctx), "warning: could not read which workers serve %s: %v\n", fn, err)
	case len(served) == 0:
		fmt.Fprintf(stderr(ctx), "warning: no worker serves %s right now; run %s waits as pending until one does\n", fn, runID)
	}
}

// checkJSON says where JSON text is broken, with a hint about shell quoting.
func checkJSON(raw string) error {
	var v any
	err := json.Unmarshal([]byte(raw), &v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("not valid JSON at byte %d: %v (quote the arguments for the shell: '{\"name\":\"x\"}')", se.Offset, se)
	}
	return fmt.Errorf("not valid JSON: %v", err)
}
