// Package producer schedules runs and reads their status. A service that
// only enqueues work imports this package alone: it never pulls in the
// worker or the scheduler.
//
//	p, err := producer.New(ctx, js, producer.Config{})
//	id, err := p.Enqueue(ctx, SendEmail.With(EmailArgs{To: "a@b.c"}))
//	id, err = p.RunAfter(ctx, 30*time.Minute, CheckPayment.With(args),
//		producer.WithID("order-42-payment-check"))
//	run, err := p.Wait(ctx, id) // or Get, Watch, List
//	err = p.Cancel(ctx, id)    // or CancelRun: canceled, or had it ended?
//
// New looks jetflow's streams and buckets up and provisions only what is
// missing or differs (Config.Provision: ProvisionAuto; ProvisionOff never
// writes), so a NATS user without stream-admin rights can run a producer
// on a provisioned server (docs/permissions.md). A Producer is safe for
// concurrent use and does not own the connection it is given.
//
// # Scheduling
//
// Enqueue, RunAfter and RunAt write the run's record (state pending) and
// then make it startable: a run due now is published to its function's
// subject, a run due later is stored for the scheduler. They return the run
// id once the record is durable; a crash before the publish is repaired by
// the scheduler's sweep, so an id returned is a run that will end. A run due
// now with a generated id (no WithID, parent, hold, pool or callback) skips
// the record: its message is its pending record until a worker writes one,
// and Get, List, Watch and Cancel read it there. Concurrent Enqueues of
// such runs share their connection's pipelined publishes (one window per
// connection): each caller waits for its own message's acknowledgement
// and gets its own error, and a try that failed goes on alone, looking
// for its run before it publishes again. EnqueueAsync publishes such runs
// pipelined without waiting for each (Pending.Wait tells when one is
// durable): the way to enqueue at JetStream's publish rate from one
// goroutine.
//
// Options tune one run: WithID gives it an idempotency key (an id that
// exists returns ErrAlreadyExists with that id, never a second run),
// WithMaxAttempts and WithTimeout override the function's settings.
//
// Batch schedules up to MaxBatch runs all or none, in one atomic JetStream
// batch. Limits are checked before anything is written: ErrTooManyRuns,
// ErrArgsTooLarge (MaxBatchArgs in one call, or one run's args above 32
// MiB). Args above a quarter of the server's max payload go to the
// payloads bucket, the record and message keeping a reference
// (docs/wire-format.md, "Large payloads"); the handler, Get and Wait see
// the args themselves.
//
// # Status
//
// Get reads a run's record; List pages through runs by state and function,
// newest activity first, and Counts counts them per state: with a scheduler
// running both read its run index and cost in proportion to what they
// return (docs/runindex.md), otherwise they read every record; Watch
// pushes each change of one run (state, attempts, progress) and closes after a terminal state; Wait blocks until then. Cancel stops a
// pending run before it starts and cancels a running one (its handler's
// context ends with cause jetflow.ErrCanceled), recursively through the runs
// it scheduled; canceling a run that has ended is a no-op.
//
// # Workflow events
//
// SendEvent sends an event to a durable workflow (package workflow) from a
// producer that does not import that package: the event is stored in the
// workflow's journal, kept until an await consumes it, and a run of the
// workflow's wake function resumes the workflow if it waits.
package producer
