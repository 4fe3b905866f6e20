package scheduler_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/nats-io/nats.go/jetstream"
)

type DigestArgs struct {
	List string `json:"list"`
}

var SendDigest = jetflow.Define[DigestArgs]("emails.sendDailyDigest")

// Crons defined in code are passed to the scheduler; its leader registers
// them when it starts, updates the changed ones and removes the ones no
// longer defined.
func ExampleScheduler_ConfigureCrons() {
	ctx := context.Background()
	js, cleanup := cronExampleServer()
	defer cleanup()

	s, err := scheduler.New(ctx, js, scheduler.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.ConfigureCrons(scheduler.CronConfig{Crons: []scheduler.CronDef{
		{Name: "send-daily-digest", Schedule: scheduler.Daily(9, 0), Call: SendDigest.With(DigestArgs{List: "all"})},
		{Name: "weekday-report", Schedule: scheduler.Cron("0 9 * * 1-5"), TZ: "America/New_York", Call: SendDigest.With(DigestArgs{List: "team"})},
		{Name: "cleanup", Schedule: scheduler.Interval(time.Hour), Call: SendDigest.With(DigestArgs{List: "none"})},
	}})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := s.Stop(ctx); err != nil {
			log.Print(err)
		}
	}()
}

// Preview shows the fire times of a schedule exactly as the evaluator fires
// them: here 09:00 New York on weekdays, across the 2026 spring-forward.
func ExamplePreview() {
	spec := scheduler.Cron("0 9 * * 1-5").In("America/New_York")
	times, err := scheduler.Preview(spec, time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC), 3)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range times {
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// 2026-03-06T14:00:00Z
	// 2026-03-09T13:00:00Z
	// 2026-03-10T13:00:00Z
}

// Crons registered at run time are listed, paused, resumed and deleted
// through the API (or `jetflow crons`).
func ExampleCrons_Register() {
	ctx := context.Background()
	js, cleanup := cronExampleServer()
	defer cleanup()

	now := func() time.Time { return time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC) }
	crons, err := scheduler.NewCrons(ctx, js, scheduler.CronConfig{Now: now})
	if err != nil {
		log.Fatal(err)
	}
	ci, err := crons.Register(ctx, scheduler.CronDef{
		Name:     "paris-digest",
		Schedule: scheduler.Daily(9, 0),
		TZ:       "Europe/Paris",
		Call:     SendDigest.With(DigestArgs{List: "fr"}),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ci.Name, "|", ci.Schedule, "| next", ci.Next.Format(time.RFC3339))

	if err := crons.Pause(ctx, "paris-digest"); err != nil {
		log.Fatal(err)
	}
	ci, _ = crons.Get(ctx, "paris-digest")
	fmt.Println("enabled:", ci.Enabled)

	_, err = crons.Register(ctx, scheduler.CronDef{Name: "every-100ms", Schedule: scheduler.Interval(100 * time.Millisecond), Call: SendDigest.With(DigestArgs{})})
	fmt.Println(err)
	// Output:
	// paris-digest | daily 09:00 (Europe/Paris) | next 2026-07-02T07:00:00Z
	// enabled: false
	// scheduler: invalid cron: every-100ms: cronspec: invalid spec: field "every" value 100ms is not a whole number of seconds
}

func cronExampleServer() (jetstream.JetStream, func()) {
	dir, err := os.MkdirTemp("", "jetflow-cron-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Options{Dir: dir, SyncEvery: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	nc, err := srv.Connect()
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	return js, func() {
		nc.Close()
		srv.Stop()
		if err := os.RemoveAll(dir); err != nil {
			log.Print(err)
		}
	}
}
