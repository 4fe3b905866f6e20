// Command intervalcleanup is the interval cron of Convex's docs on jetflow:
// "cleanup-expired-sessions" runs every hour (first when deployed) and
// deletes the sessions that have expired from the application's sessions
// table (a KV bucket).
//
//	go run ./examples/intervalcleanup              # demo: every 1 s for 6 s, then exits
//	go run ./examples/intervalcleanup --every 1h --for 0   # the real interval, until Ctrl-C
//	go run ./examples/intervalcleanup --url nats://127.0.0.1:4222
//
// With --url, the server must have no other scheduler running (not jetflow
// dev): the scheduler's leader registers code-defined crons at the start of
// its term, so while another one leads, this program's cron is not
// registered: the program says so and exits 1 after 7 s.
//
// The demo stores six sessions expiring over the next five seconds and
// shows the cleanup removing them as they expire. Each cleanup takes
// --work (default 1.5 s, longer than the interval): a fire that comes while
// the previous cleanup still runs is skipped and counted, never run twice
// at once (set --overlap to allow it).
//
// Interval fire times are fixed offsets of absolute time from the first
// one (no drift): the next time is the previous scheduled time plus the
// interval, not the time the previous run ended.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// CleanupArgs are the static arguments of the cron's runs.
type CleanupArgs struct {
	// Batch is the most sessions one run deletes.
	Batch int `json:"batch"`
}

// CleanupExpired deletes expired sessions.
var CleanupExpired = jetflow.Define[CleanupArgs]("sessions.cleanupExpired")

// Session is a row of the sessions table.
type Session struct {
	User    string    `json:"user"`
	Expires time.Time `json:"expires"`
}

const sessionsBucket = "example_sessions"

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	every := flag.Duration("every", time.Second, "interval of the cleanup (the real one is 1h)")
	work := flag.Duration("work", 1500*time.Millisecond, "how long one cleanup takes")
	overlap := flag.Bool("overlap", false, "let a cleanup start while the previous one still runs")
	dur := flag.Duration("for", 6*time.Second, "how long to run; 0 runs until interrupted")
	verbose := flag.Bool("v", false, "log jetflow's info messages (skipped fires included) to stderr")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *every, *work, *overlap, *dur, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "intervalcleanup:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, every, work time.Duration, overlap bool, dur time.Duration, verbose bool) error {
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
	sessions, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: sessionsBucket})
	if err != nil {
		return fmt.Errorf("sessions bucket: %w", err)
	}
	now := time.Now()
	for i, user := range []string{"ada", "bob", "cy", "dee", "eve", "fay"} {
		data, _ := json.Marshal(Session{User: user, Expires: now.Add(time.Duration(i) * time.Second)})
		if _, err := sessions.Put(ctx, user, data); err != nil {
			return err
		}
	}
	fmt.Println("6 sessions stored, expiring one per second from now")

	w, err := worker.New(ctx, js, worker.Config{Logger: logger})
	if err != nil {
		return err
	}
	worker.Handle(w, CleanupExpired, func(ctx context.Context, j *worker.Job[CleanupArgs]) error {
		_, at, _ := scheduler.ParseCronRunID(j.ID())
		n, left, err := cleanup(ctx, sessions, j.Args.Batch)
		if err != nil {
			return err
		}
		fmt.Printf("cleanup of %s: %d expired sessions deleted, %d left\n", at.Format(time.TimeOnly), n, left)
		select { // the rest of a slow cleanup
		case <-time.After(work):
		case <-ctx.Done():
		}
		return nil
	})

	s, err := scheduler.New(ctx, js, scheduler.Config{Logger: logger})
	if err != nil {
		return err
	}
	crons, err := s.ConfigureCrons(scheduler.CronConfig{Crons: []scheduler.CronDef{{
		Name:     "cleanup-expired-sessions",
		Schedule: scheduler.Interval(every),
		Call:     CleanupExpired.With(CleanupArgs{Batch: 100}),
		Overlap:  overlap,
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

	ci, err := crons.Get(context.Background(), "cleanup-expired-sessions")
	if err != nil {
		return err
	}
	fmt.Printf("cleanup-expired-sessions: %s, fired %d, skipped %d (previous cleanup still running)\n",
		ci.Schedule, ci.Fired, ci.Skipped)
	return nil
}

// cleanup deletes up to batch expired sessions and returns how many it
// deleted and how many sessions are left.
func cleanup(ctx context.Context, sessions jetstream.KeyValue, batch int) (deleted, left int, err error) {
	// kv.ListKeys: the whole list or an error, never a listing that waits
	// for ever or stops short.
	keys, err := kv.ListKeys(ctx, sessions, ">")
	if err != nil {
		return 0, 0, err
	}
	now := time.Now()
	for _, k := range keys {
		e, err := sessions.Get(ctx, k)
		if err != nil {
			continue
		}
		var s Session
		if json.Unmarshal(e.Value(), &s) == nil && now.After(s.Expires) && deleted < batch {
			// Deleting by revision: a session renewed meanwhile stays.
			if err := sessions.Delete(ctx, k, jetstream.LastRevision(e.Revision())); err == nil {
				deleted++
				continue
			}
		}
		left++
	}
	return deleted, left, nil
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
