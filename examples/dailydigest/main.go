// Command dailydigest is the daily digest of Convex's cron docs, on jetflow:
// a cron defined in code sends the digest every day at 09:00 UTC, with
// static typed arguments.
//
//	crons.daily('send-daily-digest', { hourUTC: 9, minuteUTC: 0 }, internal.emails.sendDailyDigest)
//
// becomes
//
//	scheduler.CronDef{Name: "send-daily-digest", Schedule: scheduler.Daily(9, 0),
//		Call: SendDailyDigest.With(DigestArgs{List: "subscribers", MaxItems: 5})}
//
// passed to the scheduler, whose leader registers it when it starts.
//
//	go run ./examples/dailydigest                   # demo: every 2 s for 5 s, then exits
//	go run ./examples/dailydigest --demo=false --for 0   # the real schedule, until Ctrl-C
//	go run ./examples/dailydigest --url nats://127.0.0.1:4222
//
// With --url, the server must have no other scheduler running (not jetflow
// dev): the scheduler's leader registers code-defined crons at the start of
// its term, so while another one leads, this program's cron is not
// registered: the program says so and exits 1 after 7 s.
//
// In demo mode the same cron fires on a 6-field seconds expression
// ("*/2 * * * * *") so that a run shows up within seconds; the program
// prints the real schedule's next fire times first.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// DigestArgs are the static arguments of the cron's runs.
type DigestArgs struct {
	List     string `json:"list"`
	MaxItems int    `json:"maxItems"`
}

// SendDailyDigest sends the digest to a mailing list.
var SendDailyDigest = jetflow.Define[DigestArgs]("emails.sendDailyDigest")

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	demo := flag.Bool("demo", true, "fire every 2 s instead of daily at 09:00 UTC")
	dur := flag.Duration("for", 5*time.Second, "how long to run; 0 runs until interrupted")
	verbose := flag.Bool("v", false, "log jetflow's info messages to stderr")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *demo, *dur, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "dailydigest:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, demo bool, dur time.Duration, verbose bool) error {
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

	daily := scheduler.Daily(9, 0)
	next, err := scheduler.Preview(daily, time.Now(), 3)
	if err != nil {
		return err
	}
	fmt.Printf("send-daily-digest: %s; next fires:\n", daily)
	for _, t := range next {
		fmt.Println("  " + t.Format(time.RFC3339))
	}
	schedule := daily
	if demo {
		schedule = scheduler.Cron("*/2 * * * * *")
		fmt.Printf("demo: firing on %q instead\n", schedule.Expr)
	}

	var sent atomic.Int64
	w, err := worker.New(ctx, js, worker.Config{Logger: logger})
	if err != nil {
		return err
	}
	worker.Handle(w, SendDailyDigest, func(ctx context.Context, j *worker.Job[DigestArgs]) error {
		n := sent.Add(1)
		fmt.Printf("%s: digest #%d of the %d top items sent to list %q (run %s, scheduled %s)\n",
			SendDailyDigest.Name(), n, j.Args.MaxItems, j.Args.List, j.ID(), j.ScheduledTime().Format(time.TimeOnly))
		return nil
	})

	s, err := scheduler.New(ctx, js, scheduler.Config{Logger: logger})
	if err != nil {
		return err
	}
	crons, err := s.ConfigureCrons(scheduler.CronConfig{Crons: []scheduler.CronDef{{
		Name:     "send-daily-digest",
		Schedule: schedule,
		Call:     SendDailyDigest.With(DigestArgs{List: "subscribers", MaxItems: 5}),
	}}})
	if err != nil {
		return err
	}
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
	if err := awaitLead(ctx, s); err != nil {
		return err
	}

	if dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dur)
		defer cancel()
	}
	<-ctx.Done()

	ci, err := crons.Get(context.Background(), "send-daily-digest")
	if err != nil {
		return err
	}
	fmt.Printf("send-daily-digest: %s, fired %d, skipped %d, next %s\n",
		ci.Schedule, ci.Fired, ci.Skipped, ci.Next.Format(time.RFC3339))
	if ci.Last != nil {
		fmt.Printf("last run %s at %s: %s\n", ci.Last.RunID, ci.Last.Time.Format(time.RFC3339), ci.Last.State)
	}
	return nil
}

// awaitLead waits until s leads the server. The leader registers
// code-defined crons (ConfigureCrons) at the start of its term: while
// another scheduler leads (jetflow dev's, say), this program's cron would
// never be registered nor fire. A lease left by a process that died
// expires within the lease TTL (5 s), so a standby waits a little longer
// than that before it gives up.
func awaitLead(ctx context.Context, s *scheduler.Scheduler) error {
	deadline := time.Now().Add(7 * time.Second)
	for !s.IsLeader() {
		if time.Now().After(deadline) {
			holder := "another scheduler"
			if li, err := s.Leader(ctx); err == nil && li.Holder != "" {
				holder = "scheduler " + li.Holder
			}
			return fmt.Errorf("%s leads this server, and only the leader registers code-defined crons: "+
				"run this program against a server where no other scheduler runs (not jetflow dev)", holder)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
