package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jetflow-dev/jetflow/internal/backlog"
)

// runFunctionStats runs `jetflow functions stats`: the backlog of every
// function, the figures of the scheduler's scaling endpoint.
func runFunctionStats(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "functions stats", "[--json] [--target N]")
	var cf connFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print as JSON: what the scaling endpoint (scheduler.ScalingHandler) answers")
	target := fs.Int("target", backlog.DefaultTarget, "runs per worker the desired worker counts divide by")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("functions stats: unexpected argument %q", pos[0])
	}
	if *target < 1 {
		return usageErrorf("functions stats: --target must be at least 1")
	}
	nc, js, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	f, err := backlog.New(js, cf.streams()).Read(ctx)
	if f == nil {
		return err
	}
	if err != nil {
		fmt.Fprintln(stderr(ctx), "jetflow: warning:", err)
	}
	g := f.WithTarget(*target)
	out := stdout(ctx)
	if *asJSON {
		return writeJSON(out, g)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FUNCTION\tREADY\tIN FLIGHT\tOLDEST READY\tFAILED\tDESIRED WORKERS\tCONSUMER")
	for _, fn := range g.Functions {
		failed := "-"
		if fn.Failed >= 0 {
			failed = fmt.Sprint(fn.Failed)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%s\n", printable(fn.Name), fn.Ready, fn.InFlight,
			(time.Duration(fn.OldestReadyAge * float64(time.Second))).Round(time.Second), failed, fn.DesiredWorkers, printable(fn.Consumer))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\ndue within 1 min: %d, within 10 min: %d; unserved: %d; desired workers (target %d): %d\n",
		g.Due1m, g.Due10m, g.Unserved, g.Target, g.DesiredWorkers)
	return nil
}
