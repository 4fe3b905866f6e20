// Package jetflowtest runs jetflow inside a test: an embedded NATS server,
// a producer, a worker and a scheduler started by one call, New, and
// stopped by t.Cleanup, on a fake clock that the test moves.
//
//	env := jetflowtest.New(t, jetflowtest.Options{Register: func(w *worker.Worker) error {
//		return worker.Register(w, PaymentCheck, checkPayment)
//	}})
//	id, _ := env.Producer.RunAfter(ctx, 30*time.Minute, PaymentCheck.With(args))
//	jetflowtest.RequireEnqueued(t, env, PaymentCheck, args)
//	env.Advance(30 * time.Minute) // in milliseconds: the check runs now
//	run, _ := env.Producer.Get(ctx, id) // success
//
// # Time
//
// Every part shares the env's Clock (the Now of worker.Config,
// scheduler.Config, producer.Config and scheduler.CronConfig). It stands
// still until the test moves it: Advance(d) moves it forward by d, stopping
// at every due time on the way (delayed runs, retries waiting for their
// backoff, cron fires) in order, firing what is due and waiting for the
// runs it started to end before it moves on. A run scheduled 30 minutes
// out, a daily cron or an hour of exponential backoff pass in
// milliseconds, and in the order they would have in real time. The
// scheduler is not started: the env drives it (Scheduler.DispatchDue and
// Crons.Tick) whenever time moves, so nothing fires behind the test's
// back. Timeouts of handlers (worker.Options.Timeout) and NATS's own
// timers (AckWait) stay on the wall clock.
//
// # Waiting and asserting
//
// Drain waits until no run is due or running: every run due by the clock
// has ended, those scheduled later wait for Advance. RequireEnqueued and
// RequireNotEnqueued assert on the runs a test's code scheduled, by
// function and arguments, as rivertest's RequireInserted does.
//
// Handlers are registered in Options.Register, before the worker starts,
// or later with Handle, which starts a worker of its own for one function
// (handy when the handler needs the env's producer).
package jetflowtest
