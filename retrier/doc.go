// Package retrier runs an unreliable function until it succeeds, with
// automatic retries and exponential backoff: Convex's action-retrier
// component (@convex-dev/action-retrier) on jetflow.
//
// An at-most-once function (jetflow.AtMostOnce) is never re-run by a worker:
// a failure or a lost worker ends its run as failed. Many such functions are
// nevertheless safe to try again (a call to an API that is down, a flaky
// network). The retrier tries again for you, with growing delays, until the
// call succeeds, MaxFailures failures have happened, or it is canceled, and
// then runs an on-complete callback exactly once with the outcome.
//
//	var Charge = jetflow.Define[ChargeArgs]("payments.charge", jetflow.WithKind(jetflow.AtMostOnce))
//	var Charged = jetflow.Define[jetflow.Completion]("payments.charged")
//
//	r := retrier.New(p, retrier.Options{})           // 250 ms, base 2, 4 failures, jitter
//	_ = r.Register(w)                                // before w.Start
//	id, err := r.Run(ctx, Charge.With(args),
//		retrier.WithOnComplete(jetflow.Call{Name: Charged.Name(), Args: myContext}))
//	st, err := r.Status(ctx, id)                     // pending, inProgress, success, failed, canceled
//	err = r.Cancel(ctx, id)
//
// # Backoff
//
// After the k-th failure (k = 1 .. MaxFailures) the next attempt starts after
//
//	InitialBackoff * Base^k, times a random factor in [0.5, 1.5) with jitter
//
// exactly as Convex computes it (initialBackoffMs * base^(numFailures+1)).
// So with the defaults the first retry waits about 500 ms, not 250 ms
// (Convex's README says "initial delay", its code waits initialBackoffMs *
// base; jetflow follows the code): 500 ms, 1 s, 2 s, 4 s, then the run fails
// after 5 attempts. MaxBackoff, when set, caps a delay.
//
// MaxFailures 0 takes the default, 4. MaxFailures NoRetries (-1) makes one
// attempt and retries nothing (the retrier still records the outcome and
// runs the callback). MaxFailures is at most MaxFailuresLimit (1000): the
// retrier's record lists the id of every attempt, so it grows with them.
// Run refuses any other value with ErrInvalidOptions (errors.Is), and with
// producer.ErrArgsTooLarge a MaxFailures whose attempt ids, beside the
// args, would not fit the record in the server's max payload.
//
// # How it is kept
//
// Everything lives in run records; nothing is held in memory, so retries
// survive a restart of every process, the NATS server included:
//
//   - Run schedules a start run (internal function jetflow.retrier.start,
//     retryable, id <retrier id>-start) whose arguments hold the call, the
//     policy and the callback. It is the only write Run makes, so the
//     retrier is durable once Run returns its id. The start run's own
//     on-complete callback (jetflow.retrier.started) ends the retrier if
//     the start run is canceled or fails (see below); after a start run
//     that succeeded it does nothing.
//   - The start run writes the retrier's own record, under the retrier id,
//     with name jetflow.retrier.run and state inProgress, and enqueues the
//     first attempt.
//   - Every attempt is a run of the target function with the deterministic
//     id <retrier id>-a<n>, max attempts 1, and an on-complete callback to
//     the internal function jetflow.retrier.step. The step reads the
//     attempt's outcome and either ends the retrier's record (success with
//     the attempt's result, failed with its error, canceled) or schedules
//     attempt n+1 after the backoff and lists it among the record's
//     children.
//   - The user's on-complete callback is the on-complete callback of the
//     retrier's record, so the core runs it exactly once: its run id is
//     jetflow.CompletionID(retrier id), and the scheduler's repair sweep
//     schedules it if a process dies between the terminal write and the
//     callback.
//
// Every step is idempotent (deterministic ids, compare-and-swap writes), so a
// redelivered or re-run step changes nothing twice.
//
// # Never in progress for good
//
// The internal runs (start, step) are retried by the worker without limit,
// with a delay capped at 30 s, so a NATS outage of any length is ridden
// out: the retrier goes on when writes work again. What a failed attempt
// of an internal run means is decided by one function: a permanent error
// or a panic (a retry would fail alike) ends the retrier failed at once,
// and so does any failure from the internal run's 25th attempt on (about
// 10 minutes of retries); the retrier's Error then names the internal run
// ("retrier: internal run <id> (jetflow.retrier.step) failed 25 attempts:
// ...") and its callback runs. An attempt whose work fails while NATS still
// refuses that write too is tried again, work first. A start run canceled
// directly (producer.Cancel or the CLI on <retrier id>-start) ends the
// retrier canceled, as Cancel does, and its callback runs. The callback receives a
// jetflow.Completion whose Run is the retrier's record; FromCompletion turns
// it into a Status.
//
// Cancel ends the retrier as canceled: a pending attempt never starts, a
// running one has its context canceled (best effort, as in Convex: an
// at-most-once handler that ignores its context may still finish its side
// effect, but its result is discarded), and the callback runs once with
// canceled. The retrier's record can also be canceled with the producer's
// Cancel, with the same effect. Cancel the retrier, not its internal step
// runs (<attempt id>-done): a step run canceled directly while it waits
// leaves the retrier in progress until Cancel is called on it (handling it
// would take one more internal run per attempt).
//
// The internal functions (jetflow.retrier.start, .step and .started) must
// be served: call Register on at least one worker (any number may serve
// them).
package retrier
