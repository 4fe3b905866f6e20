package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jetflow-dev/jetflow/cmd/jetflow/internal/doctor"
)

func init() {
	register("doctor", "check a deployment for settings that lose acknowledged writes or break guarantees", runDoctor)
}

// exitDoctorFailed: jetflow doctor found a failing check.
const exitDoctorFailed = 5

// runDoctor runs `jetflow doctor`: every check, a line each with its fix;
// exit 0 when none fails (warnings included), 5 when one fails, 1 when it
// could not connect.
func runDoctor(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "doctor", "[--role producer|worker|scheduler|dashboard|admin] [--monitor URL] [--json]")
	var cf connFlags
	cf.add(fs)
	role := fs.String("role", "", "the role of the connecting user (docs/permissions.md): its permissions are checked against it")
	monitor := fs.String("monitor", "", "the server's monitoring URL (http://host:8222), to check its fsync settings")
	asJSON := fs.Bool("json", false, "print the findings as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("doctor: unexpected argument %q", pos[0])
	}
	switch *role {
	case "", "producer", "worker", "scheduler", "dashboard", "admin":
	default:
		return usageErrorf("doctor: --role %q: producer, worker, scheduler, dashboard or admin", *role)
	}
	nc, js, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	found := doctor.Run(cctx, nc, js, doctor.Options{Streams: cf.streams(), Role: *role, Monitor: *monitor})
	out := stdout(ctx)
	if *asJSON {
		if err := writeJSON(out, struct {
			Result   doctor.Level     `json:"result"`
			Findings []doctor.Finding `json:"findings"`
		}{doctor.Worst(found), found}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		for _, f := range found {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Level, printable(f.Check), printable(f.Message))
			if f.Fix != "" {
				fmt.Fprintf(tw, "\t\t  fix: %s\n", printable(f.Fix))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if doctor.Worst(found) == doctor.Fail {
		return &exitCodeError{code: exitDoctorFailed, err: errors.New("doctor: some checks failed")}
	}
	return nil
}
