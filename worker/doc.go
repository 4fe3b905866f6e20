// Package worker runs the handlers of jetflow functions.
//
//	w, err := worker.New(ctx, js, worker.Config{})
//	worker.Handle(w, SendEmail, func(ctx context.Context, j *worker.Job[EmailArgs]) error {
//		return send(ctx, j.Args.To)
//	}, worker.Options{MaxAttempts: 5, Timeout: time.Minute})
//	if err := w.Start(ctx); err != nil { ... }
//	defer w.Stop(ctx)
//
// Each function gets one durable JetStream pull consumer, shared by every
// worker that serves it; Options.Concurrency bounds the runs one process
// runs at once and Options.MaxParallel those in flight across all workers.
// A consumer deleted while the worker runs (nats consumer rm, the function
// stream deleted and provisioned again) is created again, and the messages
// stored before then are handled as after a reconnect. A pull that stops
// while runs wait (nats.go's Consume can stall so, until two heartbeats go
// missing) is renewed when the deliveries stop after a busy spell and the
// consumer shows runs pending with no pull waiting.
// Handle registers a handler and panics on a registration error (for program
// start-up, like http.Handle); Register returns the error instead.
//
// # Outcomes
//
// The handler's return value decides what happens next:
//
//   - nil: the run succeeds; a value given to j.SetResult is stored on its
//     record.
//   - jetflow.Permanent(err): the run fails now, without more attempts.
//   - jetflow.RetryAfter(d, err): the next attempt starts after d.
//   - any other error: the next attempt starts after the function's Backoff
//     (exponential with full jitter), until Options.MaxAttempts are spent.
//   - a panic is recovered and the run fails with jetflow.ErrPanic and the
//     stack; undecodable arguments fail it with jetflow.ErrBadArgs; a
//     timeout (Options.Timeout) fails it with jetflow.ErrTimeout.
//
// AtMostOnce functions are never retried: their run is claimed (written
// inProgress) before the handler starts, and a worker lost mid-run leaves it
// failed with jetflow.ErrWorkerLost. A retryable run is claimed once its
// handler has run Options.ClaimAfter (default 100 ms on a single server;
// first, before it starts, when the function stream is replicated), and a
// redelivered one before it starts; a shorter run goes from pending straight
// to its outcome, one write less. ClaimAfter < 0 claims every run first.
// After its connection broke (a server crash redelivers the messages in
// flight at once, as first deliveries), a worker claims the runs it has in
// flight as soon as it reconnects, and claims first every delivery of a
// message stored before the reconnect, waiting up to Config.ReplayGrace for
// an unclaimed one, so that a run is never started twice for one attempt
// ("before" by the function stream's last sequence, read at the reconnect,
// on a single server; by the stored time on a cluster). On
// a cluster a consumer leader change redelivers the messages in flight at
// once, with a delivery count of 2 (the server sends a message only once its
// delivery is replicated): a second delivery that finds its run unclaimed
// waits ClaimAfter plus ReplayGrace for the worker that may be running it to
// claim it, when a cluster's functions are given a ClaimAfter (they are
// claimed first by default there).
//
// The outcome is written with a compare-and-swap on the record's revision
// (a success without waiting: the message is acknowledged when the server
// confirms the write, and the handler's slot takes the next run meanwhile):
// a duplicate delivery, or a worker that comes back after its run was handed
// to another, cannot overwrite a newer outcome; its result is discarded.
//
// # Inside a handler
//
// A Job carries the decoded Args and the run's id, attempt and times.
// j.Progress reports progress (coalesced writes, watched live with
// producer.Watch); j.Enqueue, j.RunAfter and j.RunAt schedule child runs,
// which are committed only if a retryable attempt succeeds and are canceled
// with their parent. The handler's context ends with cause
// jetflow.ErrCanceled when the run is canceled and jetflow.ErrTimeout when it
// times out.
//
// # Bad input
//
// A message the worker cannot use (no usable run id, an unreadable header)
// never crashes it and is never dropped: it becomes a failed record whose
// error names jetflow.ErrBadMessage and the reason. Messages published by
// other producers, in any language, are welcome: the worker creates their
// record (docs/wire-format.md). A body too large for a record, binary or
// not, is recorded with a summary of its args (size, SHA-256, its first
// bytes). Every ack, nak and term goes through one place, which logs and
// counts (jetflow.deliveries.settle_failed) those the server did not take.
//
// # Middleware
//
// Config.Middleware wraps every handler of the worker, the first outermost,
// as River's worker middleware does: logging, metrics, auth context, rate
// limits. A middleware receives the Run (id, name, attempt, times) and calls
// next; an error it returns is the run's outcome, a panic in it is recovered
// like a handler's. jetflow's own span (OpenTelemetry's messaging
// conventions: a child of the producer's span, linked to the run's earlier
// attempts), started counter, queue-wait and handler-duration histograms
// are a middleware too, outside the application's.
//
// # Lifecycle
//
// Start returns at once, and the worker runs until Stop, StopAndCancel or
// the end of Start's ctx (which stops it as Stop does). Stop stops taking
// runs, waits for running handlers and returns the others to the stream
// unharmed; StopAndCancel first cancels the running handlers' contexts
// (cause ErrStopping), and a retryable run so interrupted goes back to the
// stream to be retried, not failed: its claim is given back and the attempt
// does not count (an at-most-once run keeps its claim and fails as lost). Stopped is closed when the worker has
// stopped. The scheduler and the pool dispatcher have the same lifecycle.
// The worker does not own the connection it is given and installs no
// signal handlers.
package worker
