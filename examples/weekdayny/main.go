// Command weekdayny is a weekday 09:00 New York job on jetflow: a cron
// registered at run time (the way a service lets its users add schedules)
// with the expression "0 9 * * 1-5" in the time zone America/New_York. It
// fires at 09:00 Eastern on weekdays, in winter (EST, 14:00 UTC) and in
// summer (EDT, 13:00 UTC), with no double fire in the repeated autumn hour
// and no lost fire in the spring gap.
//
//	go run ./examples/weekdayny                # preview, register, demo fires for 5 s, exit
//	go run ./examples/weekdayny --for 0        # keep the scheduler running until Ctrl-C
//	go run ./examples/weekdayny --url nats://127.0.0.1:4222
//
// The program first previews the schedule across the March 2027
// daylight-saving change (the same code path the evaluator fires with),
// then registers it with the Go API (the CLI equivalent is
// `jetflow crons add standup-reminder '0 9 * * 1-5' team.standupReminder --tz America/New_York`),
// lists it, pauses and resumes it, and, so that something fires within
// seconds, registers a second cron on a 6-field seconds expression.
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
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// ReminderArgs are the static arguments of the reminder runs.
type ReminderArgs struct {
	Team    string `json:"team"`
	Message string `json:"message"`
}

// StandupReminder reminds a team of its standup.
var StandupReminder = jetflow.Define[ReminderArgs]("team.standupReminder")

const zone = "America/New_York"

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	dur := flag.Duration("for", 5*time.Second, "how long to run the scheduler; 0 runs until interrupted")
	verbose := flag.Bool("v", false, "log jetflow's info messages to stderr")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *dur, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "weekdayny:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, dur time.Duration, verbose bool) error {
	ny, err := time.LoadLocation(zone)
	if err != nil {
		return err
	}
	weekdays := scheduler.Cron("0 9 * * 1-5").In(zone)

	// Preview across the spring-forward change of 2027-03-14.
	from := time.Date(2027, 3, 11, 12, 0, 0, 0, time.UTC)
	times, err := scheduler.Preview(weekdays, from, 4)
	if err != nil {
		return err
	}
	fmt.Printf("%s from %s:\n", weekdays, from.Format(time.DateOnly))
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
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	s, err := scheduler.New(ctx, js, scheduler.Config{Logger: logger})
	if err != nil {
		return err
	}
	crons := s.Crons()

	// Register at run time. Registering a name twice is refused.
	def := scheduler.CronDef{
		Name:     "standup-reminder",
		Schedule: weekdays,
		Call:     StandupReminder.With(ReminderArgs{Team: "platform", Message: "standup in 5 minutes"}),
	}
	ci, err := crons.Register(ctx, def)
	if errors.Is(err, scheduler.ErrCronExists) {
		ci, err = crons.Get(ctx, def.Name)
	}
	if err != nil {
		return err
	}
	fmt.Printf("registered %s: %s, next %s (%s)\n", ci.Name, ci.Schedule, ci.Next.Format(time.RFC3339), ci.Next.In(ny).Format("Mon 15:04 MST"))
	_, err = crons.Register(ctx, def)
	fmt.Printf("register again: errors.Is ErrCronExists: %t\n", errors.Is(err, scheduler.ErrCronExists))

	if err := crons.Pause(ctx, def.Name); err != nil {
		return err
	}
	if ci, err = crons.Get(ctx, def.Name); err != nil {
		return err
	}
	fmt.Printf("paused: enabled %t\n", ci.Enabled)
	if err := crons.Resume(ctx, def.Name); err != nil {
		return err
	}
	if ci, err = crons.Get(ctx, def.Name); err != nil {
		return err
	}
	fmt.Printf("resumed: enabled %t, next %s\n", ci.Enabled, ci.Next.In(ny).Format("Mon 2006-01-02 15:04 MST"))

	// Something that fires now: every 2 s, same function.
	demo := scheduler.CronDef{
		Name:     "standup-reminder-demo",
		Schedule: scheduler.Cron("*/2 * * * * *").In(zone),
		Call:     StandupReminder.With(ReminderArgs{Team: "demo", Message: "this one fires every 2 s"}),
	}
	if _, err := crons.Register(ctx, demo); err != nil && !errors.Is(err, scheduler.ErrCronExists) {
		return err
	}

	w, err := worker.New(ctx, js, worker.Config{Logger: logger})
	if err != nil {
		return err
	}
	worker.Handle(w, StandupReminder, func(ctx context.Context, j *worker.Job[ReminderArgs]) error {
		_, at, _ := scheduler.ParseCronRunID(j.ID())
		fmt.Printf("%s: %q to %s (fire time %s New York)\n", StandupReminder.Name(), j.Args.Message, j.Args.Team, at.In(ny).Format("15:04:05"))
		return nil
	})
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
	if dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dur)
		defer cancel()
	}
	<-ctx.Done()

	list, err := crons.List(context.Background())
	if err != nil {
		return err
	}
	fmt.Println("crons:")
	for _, c := range list {
		last := "-"
		if c.Last != nil {
			last = fmt.Sprintf("%s %s", c.Last.RunID, c.Last.State)
		}
		fmt.Printf("  %-22s %-36s enabled %-5t next %s  last %s  fired %d skipped %d\n",
			c.Name, c.Schedule, c.Enabled, c.Next.Format(time.RFC3339), last, c.Fired, c.Skipped)
	}
	// A real deployment keeps its crons; the demo removes its own.
	return crons.Delete(context.Background(), demo.Name)
}
