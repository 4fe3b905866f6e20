// Command nightlyny runs a workflow on a schedule: a nightly report, every
// day at 02:00 in New York (daylight saving handled by the schedule's IANA
// zone), whose target is a durable workflow of three steps. Each fire
// starts exactly one workflow (its id derives from the cron's fire), whose
// record names the fire as its trigger.
//
//	go run ./examples/nightlyny
//	go run ./examples/nightlyny --url nats://127.0.0.1:4222
//
// The program registers the nightly schedule and prints its next fire
// times, then, so that something runs now, fires a second schedule every
// 2 s for a few seconds, pauses the workflow's definition (its fires are
// skipped, the schedule advances) and resumes it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

const zone = "America/New_York"

// ReportArgs is the report's input.
type ReportArgs struct {
	Region string `json:"region"`
}

// Report is the nightly workflow: gather, render, publish, each step
// journaled once.
var Report = workflow.Define("reports.nightly", func(wf *workflow.Context, in ReportArgs) (string, error) {
	rows, err := workflow.Step(wf, "gather", func(ctx context.Context) (int, error) { return 1200, nil })
	if err != nil {
		return "", err
	}
	pdf, err := workflow.Step(wf, "render", func(ctx context.Context) (string, error) {
		return fmt.Sprintf("report-%s.pdf (%d rows)", in.Region, rows), nil
	})
	if err != nil {
		return "", err
	}
	if _, err := workflow.Step(wf, "publish", func(ctx context.Context) (bool, error) { return true, nil }); err != nil {
		return "", err
	}
	return pdf, nil
})

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url); err != nil {
		fmt.Fprintln(os.Stderr, "nightlyny:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string) error {
	ny, err := time.LoadLocation(zone)
	if err != nil {
		return err
	}
	nightly := scheduler.Daily(2, 0).In(zone)
	// The next fires across the autumn change of 2027-11-07: 02:00 every
	// night, in New York's time whatever its UTC offset.
	times, err := scheduler.Preview(nightly, time.Date(2027, 11, 5, 12, 0, 0, 0, time.UTC), 4)
	if err != nil {
		return err
	}
	fmt.Printf("%s, next fires:\n", nightly)
	for _, t := range times {
		fmt.Printf("  %s  %s\n", t.Format(time.RFC3339), t.In(ny).Format("Mon 15:04 MST"))
	}

	nc, closeAll, err := embedded.Dial(url, embedded.Options{})
	if err != nil {
		return err
	}
	defer closeAll()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	p, err := producer.New(ctx, js, producer.Config{Logger: logger})
	if err != nil {
		return err
	}
	w, err := worker.New(ctx, js, worker.Config{Logger: logger})
	if err != nil {
		return err
	}
	if err := workflow.Register(w, Report); err != nil {
		return err
	}
	s, err := scheduler.New(ctx, js, scheduler.Config{Logger: logger})
	if err != nil {
		return err
	}
	crons := s.Crons()
	run := fmt.Sprint(time.Now().UnixNano() % 1_000_000) // fresh cron names against a shared server
	defs := []scheduler.CronDef{
		{Name: "nightly-report-" + run, Schedule: nightly, Call: workflow.StartCall(Report, ReportArgs{Region: "us-east"})},
		// What fires during the demo: the same workflow every 2 s.
		{Name: "demo-report-" + run, Schedule: scheduler.Cron("*/2 * * * * *").In(zone), Call: workflow.StartCall(Report, ReportArgs{Region: "demo"})},
	}
	for _, d := range defs {
		if _, err := crons.Register(ctx, d); err != nil && !errors.Is(err, scheduler.ErrCronExists) {
			return err
		}
	}
	defer func() {
		for _, d := range defs { // a real deployment keeps its crons
			if err := crons.Delete(context.Background(), d.Name); err != nil {
				fmt.Fprintln(os.Stderr, "nightlyny: delete cron", d.Name+":", err)
			}
		}
	}()
	if err := w.Start(ctx); err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(sctx)
		_ = w.Stop(sctx)
	}()

	// The first demo fire's workflow, by its trigger.
	first, err := waitWorkflow(ctx, p, "demo-report-"+run, 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("scheduled workflow %s (trigger %s): %s, result %s\n", first.ID, first.Parent, first.State, first.Result)

	// Paused, the definition's fires are skipped; the schedule advances.
	if err := workflow.SetDefinitionState(ctx, p, Report.Name(), workflow.DefinitionPaused); err != nil {
		return err
	}
	skipped, err := waitSkipped(ctx, p, "demo-report-"+run, 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("definition paused: fire %s skipped (%s)\n", skipped.ID, skipped.Result)
	if err := workflow.SetDefinitionState(ctx, p, Report.Name(), workflow.DefinitionActive); err != nil {
		return err
	}
	st, err := workflow.DefinitionStateOf(ctx, p, Report.Name())
	if err != nil {
		return err
	}
	fmt.Printf("definition %s again\n", st)
	return nil
}

// waitWorkflow returns the first workflow a fire of cron name started and
// that has ended.
func waitWorkflow(ctx context.Context, p *producer.Producer, name string, within time.Duration) (*jetflow.Run, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		page, err := p.List(ctx, producer.Filter{Function: Report.Name(), State: jetflow.Success})
		if err != nil {
			return nil, err
		}
		for _, r := range page.Runs {
			if cron, _, ok := scheduler.ParseCronRunID(r.Parent); ok && cron == name {
				return p.Get(ctx, r.ID) // the whole record (a list page has no results)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("no workflow of %s ended within %s", name, within)
}

// waitSkipped returns a fire of cron name that was skipped.
func waitSkipped(ctx context.Context, p *producer.Producer, name string, within time.Duration) (*jetflow.Run, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		page, err := p.List(ctx, producer.Filter{Function: workflow.StartFunction(Report.Name()), State: jetflow.Success})
		if err != nil {
			return nil, err
		}
		for _, r := range page.Runs {
			if cron, _, ok := scheduler.ParseCronRunID(r.ID); ok && cron == name {
				if full, err := p.Get(ctx, r.ID); err == nil && string(full.Result) == `{"skipped":"definition paused"}` {
					return full, nil
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("no skipped fire of %s within %s", name, within)
}
