// Package jetflow is a durable job and workflow framework for Go on NATS
// JetStream, after Convex's scheduler: run a function now, after a delay or
// at a time; retry it with backoff; cancel it; watch its status change. The
// state lives in JetStream, in an embedded server on local disk or in a NATS
// cluster, so nothing accepted is lost when a process or the server
// restarts.
//
// # Define
//
// A function is a name and an argument type, defined once and shared by the
// code that schedules it and the code that runs it, so the compiler pairs
// the two sides:
//
//	type EmailArgs struct {
//		To string `json:"to"`
//	}
//
//	var SendEmail = jetflow.Define[EmailArgs]("emails.send")
//
// Names are dot-separated tokens of letters, digits, '_' and '-' (see
// ValidateName); they become NATS subjects. Define panics on an invalid name,
// like regexp.MustCompile; NewFunction returns the error instead.
//
// # Kinds
//
// A function is Retryable (the default; Convex's mutations) or AtMostOnce
// (Convex's actions), chosen with WithKind:
//
//   - Retryable: delivered at least once, retried with exponential backoff
//     and full jitter (see Backoff) up to a maximum number of attempts, with
//     exactly one recorded outcome. Runs its handler schedules are committed
//     only if the attempt succeeds, and a retry does not schedule them twice.
//   - AtMostOnce: never run twice. The run is claimed before the handler
//     starts; a worker lost mid-run leaves it failed with ErrWorkerLost. Runs
//     it schedules are published at once, whatever its outcome.
//
// # Produce
//
// The producer package schedules runs. Function.With pairs a function with
// its arguments into a Call:
//
//	p, err := producer.New(ctx, js, producer.Config{})
//	id, err := p.Enqueue(ctx, SendEmail.With(EmailArgs{To: "a@b.c"}))
//	id, err = p.RunAfter(ctx, 5*time.Second, SendEmail.With(args))
//	id, err = p.RunAt(ctx, time.Date(2026, 12, 25, 9, 0, 0, 0, time.UTC), SendEmail.With(args))
//
// Once a call returns an id, the run reaches a terminal state. The id is
// generated, or given with producer.WithID as an idempotency key: scheduling
// an id that exists returns producer.ErrAlreadyExists, never a second run.
// Services in other languages enqueue with any NATS client by publishing to
// the function's subject (docs/wire-format.md).
//
// # Work
//
// The worker package runs handlers. A handler receives a typed *worker.Job
// and returns an error that steers retries:
//
//	w, err := worker.New(ctx, js, worker.Config{})
//	worker.Handle(w, SendEmail, func(ctx context.Context, j *worker.Job[EmailArgs]) error {
//		return send(ctx, j.Args.To)
//	})
//	err = w.Start(ctx)
//	defer w.Stop(ctx)
//
// nil is success; Permanent(err) fails the run without more attempts;
// RetryAfter(d, err) retries after d; any other error retries with backoff
// until the attempts are spent; a panic is recovered and recorded as a
// failure (ErrPanic) with its stack. Inside a handler, j.Enqueue, j.RunAfter
// and j.RunAt schedule child runs, which Cancel reaches too.
//
// # Schedule
//
// The scheduler package publishes delayed runs when they are due, repairs a
// run whose message was never published (a crash between the two writes of
// scheduling), and evaluates crons. Any number of schedulers may run; one
// leader, elected with a lease in a KV bucket, does the work.
//
// # Status
//
// Every run has a Run record in a KV bucket, keyed by run id, with its name,
// args, times, attempts, last error, progress and result. Its State is one
// of Pending, InProgress, Success, Failed and Canceled; the last three are
// Terminal, and a terminal record is removed by JetStream itself after the
// retention period (default 7 days). Every state change is a
// compare-and-swap on the record's revision, so a late or duplicate worker
// cannot overwrite a newer outcome. The producer reads records with Get,
// List, Watch (live updates) and Wait; Cancel stops a pending run before it
// starts and cancels a running one's context with cause ErrCanceled,
// recursively through the runs it scheduled.
//
// # Errors
//
// Errors are sentinels matched with errors.Is, wrapped with %w so that
// JetStream's own errors still match underneath: this package's are shared
// by every role (ErrInvalidName, ErrInvalidRunID, ErrBadArgs, ErrBadMessage,
// ErrCanceled, ErrTimeout, ErrWorkerLost, ErrPanic, ErrNotFound); each role
// package adds its own with its prefix (producer.ErrAlreadyExists,
// producer.ErrArgsTooLarge, ...).
//
// # Servers
//
// The embedded package runs nats-server with JetStream inside the process,
// on local disk, for a service that does not want to run NATS; the same code
// connects to a NATS cluster by URL when it outgrows one machine. jetflow
// never closes a connection it did not open.
package jetflow
