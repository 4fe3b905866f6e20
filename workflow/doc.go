// Package workflow runs durable workflows on jetflow: functions of several
// steps (inline code, function calls, child workflows, sleeps, events)
// whose progress is journaled, so that a workflow survives the restart of
// any process, the NATS server included, and waits for days holding no
// goroutine and no memory beyond a worker's bounded cache of waiting
// executions (sticky execution).
//
//	var Onboard = workflow.Define("users.onboard", func(wf *workflow.Context, in Signup) (string, error) {
//		acct, err := workflow.Step(wf, "create-account", func(ctx context.Context) (string, error) { ... })
//		...
//		_, err = workflow.Call[string](wf, SendEmail.With(EmailArgs{To: in.Email}))
//		wf.Sleep(72 * time.Hour)
//		act, err := workflow.AwaitEvent[Activation](wf, "activated", -1)
//		...
//	})
//
//	workflow.Register(w, Onboard)                           // on every worker, before w.Start
//	id, err := workflow.Start(ctx, p, Onboard, in, workflow.WithID("onboard-42"))
//	err = workflow.SendEvent(ctx, p, id, "activated", Activation{Via: "link"})
//	st, err := workflow.Get(ctx, p, id)                     // the record and every step
//	out, err := workflow.Result(ctx, p, Onboard, id)        // waits for the end
//	err = p.Cancel(ctx, id)                                 // stops it and what it started
//
// # Records and segments
//
// A workflow is a run: its record in the runs bucket (id = the workflow
// id, name = the workflow's name, kind retryable, args = the input) goes
// pending → inProgress → success (result = the output) or failed (error),
// or canceled, like any run's, and lists as children everything the
// workflow started. Its code runs in segments: runs of the internal
// function "<name>.segment" (ids SegmentID(id, n)) that replay the
// workflow function from the top. Start writes the record (create-only:
// the workflow id is an idempotency key), then publishes segment 1 without
// a record of its own (its message is its pending record, as for a run
// enqueued without an id); the scheduler's repair sweep publishes segment
// 1 if Start died between the two.
//
// # Replay
//
// Every step has an id from its place in the program: "1", "2", ... in
// the workflow function, "3.1", "3.2", ... in the branch started by the
// third step (Go), whatever the goroutines' scheduling. A segment loads
// the journal (bucket <prefix>_journal, key <id>.s.<step id>) and runs the
// function: a step whose entry has ended returns its journaled result (or
// error) without running; the first one that has not runs inline (Step)
// or starts what it waits for (Call, RunChild, Sleep, AwaitEvent). A
// step that must wait blocks its branch (sticky execution, below), or,
// without the cache, ends its goroutine with runtime.Goexit, so the
// workflow's deferred calls run at every suspension (keep side effects
// out of defers). When every branch waits, the segment records in the
// workflow's cursor (<id>.wf) that it waits, checks once more that what
// it waits for has not come meanwhile, and ends. Whatever it waited for
// resumes the workflow by creating segment n+1 (create-only), but only if
// the cursor says segment n ended waiting: two segments of a workflow
// never run at once, and no wake-up is lost. A child run's completion
// (its on-complete callback, "<name>.wake"), a timer (a delayed run of
// "<name>.wake") and SendEvent resume it. A workflow that sleeps is a
// journal entry and a delayed run, plus, on the worker where it parked,
// its cached execution (below).
//
// # Sticky execution
//
// A worker keeps the execution of a workflow that parked on it (its
// goroutines, blocked where they wait) in a bounded cache per definition
// (RegisterOptions.CachedExecutions, default DefaultCachedExecutions, the
// least recently parked evicted first). The next segment, when it runs on
// that worker and takes over the cursor exactly as that park wrote it
// (same revision and run), resumes the execution: each waiting branch
// checks its wait again in the new segment and goes on or waits again,
// instead of the code replaying from the top. Anything else (another
// worker, a restart, an eviction, a cursor written since, continue as
// new, a query) replays from the journal, which stays the source of
// truth: only the cost differs. Worker.Stop ends the cached executions.
//
// A replay that reaches a step whose journaled name or kind differs from
// what the code asks, or ends before a journaled step, fails the workflow
// with ErrNondeterministic, naming the steps. To change a running workflow's code, branch on Patched: true for
// executions that reach the patch after it was deployed, false for those
// whose journal already holds another step there. Workflow code must be
// deterministic: read the time with Now, not time.Now; no map-order or
// random decisions outside steps; no shared state between branches.
//
// # What is journaled, and the guarantees
//
//   - Step: the outcome, once, after fn returns (retried first up to
//     StepOptions.MaxAttempts with backoff). Retryable (default): a
//     segment that dies before journaling runs fn again on replay.
//     AtMostOnce: "started" is journaled before fn runs; a replay that
//     finds it started without an outcome fails the step with
//     jetflow.ErrWorkerLost, never running fn twice.
//   - Call: a child run of the function (id derived from the workflow id
//     and the step id, so a replay finds it), with the function's kind,
//     retries and timeout; its result is decoded into T.
//   - RunChild, StartChild: a child workflow, awaited or not.
//   - Sleep, SleepUntil: the wake time, journaled when first reached (a
//     replay sleeps only the rest).
//   - AwaitEvent: events are stored per workflow and kept until consumed
//     (one sent before its await waits for it); each is consumed by one
//     await, the journal recording which (<id>.claim.<event revision>);
//     a timeout returns ErrEventTimeout.
//   - Go, Future.Get, Wait: parallel branches; a branch that waits makes
//     its waiter wait.
//   - Patched: a marker.
//
// A result that does not fit a journal entry (the server's max payload
// less 4 KB) fails its step with ErrResultTooLarge, once; an input Start
// cannot carry is producer.ErrArgsTooLarge; a journal entry or cursor that
// cannot be read fails the workflow with jetflow.ErrBadRecord naming the
// key (docs/workflows.md, "Sizes and unreadable journals").
//
// Each step costs one journal write (two for an at-most-once step), plus
// the run it starts. A segment reads the record, writes its own run's
// record (its outcome) and, when it parks, the cursor. The first segment,
// on its first delivery (worker.Job.Fresh), knows the journal is empty and
// reads nothing else; it claims the record (inProgress) only if it runs
// for 100 ms, parks or starts a child, so a short workflow goes from
// pending to its end as a short run does. Any later segment reads the
// cursor, moves it on and claims the record at once (listing itself among
// the record's children). The end of a workflow writes its record once
// (over the revision last written, with no read, when nothing else wrote
// it meanwhile) and stores the removal of its journal in the delayed store
// (one write, no record); the first time a workflow parks it stores a
// janitor too, which removes the journal of a workflow canceled while it
// waited. A workflow of three short inline steps that
// ends in its first segment costs 8 writes: the record twice, segment 1's
// message and outcome, three journal entries and the delayed purge.
//
// Cancel (producer.Cancel on the workflow id) cancels the record and,
// through its children, the running segment (its context ends with cause
// jetflow.ErrCanceled; the workflow stops at its next step), the child
// runs and workflows, and the pending timers.
//
// Restart runs a failed or canceled workflow again under a new id, its
// journal starting with the steps that succeeded. It claims the new id's
// journal (its cursor, create-only) before it copies them: of concurrent
// Restarts into one id exactly one wins, the others return
// producer.ErrAlreadyExists having written nothing. A claim left by a
// Restart that died before the new record (a cursor at segment 1 and no
// record) holds the id for a minute, by the server's clock from its last
// write; then a Restart into that id takes it over, purging what the dead
// one wrote. Each Restart arms a janitor before its claim (a delayed run,
// two minutes later) that purges the new id's journal if the id still has
// no record and its cursor is still such an abandoned claim, so a dead
// Restart into a generated id, which nobody restarts into again, leaves
// nothing for good; once the record is written the janitor does nothing.
// Get and Watch of a run that is not a workflow return
// producer.ErrNotWorkflow.
//
// # Limits
//
// On the worker where it parks, a run that waits n times runs its code
// once (sticky execution), each await reading only the events stored
// after the last one taken; a segment elsewhere (or after a restart or an
// eviction) replays the run's code from the top once, journaled steps
// being map look-ups, and reads its journal. ContinueAsNew starts a fresh
// run and bounds what a replay reads and a cached execution holds. The
// journal is not read at all when the segment runs on the worker where
// the previous one parked and no other segment ran since (sticky
// journals, up to 1024 workflows per definition and worker). The
// record's children list holds what may still run (each segment's claim
// drops the segment before and the runs of ended steps). Results and
// inputs must fit a run record.
//
// # Talking to a workflow
//
// SendEvent stores an event; SendEventWithStart starts the workflow of
// that id first if none exists (one workflow per id, no event lost).
// Query asks a handler the code registered (SetQueryHandler), answered by
// a worker's read-only replay, also while the workflow waits. Update
// sends an update the code takes at its next AwaitUpdate: validated,
// handled, journaled, then answered. A failed workflow's error keeps its
// identity: Result and Status.Err match its sentinel with errors.Is
// (RegisterError codes a user's).
// Journal entries of an ended workflow are removed by a delayed run at the
// end of the retention period, scheduled when it ends (or, if it was
// canceled while it waited, when a child's completion or a segment finds
// it canceled; a workflow canceled during a sleep alone keeps its journal
// until removed by hand). The CLI and the dashboard view are not part of
// this package yet.
//
// # On a schedule
//
// A cron whose Call is StartCall(def, in) starts one workflow per fire
// (id TriggeredID(cron run id), its parent the cron run, so the record
// names its trigger); the scheduler's cron evaluator does the rest (time
// zones, catch-up, one fire per tick across schedulers). A cron does not
// wait for the workflow it started: use the workflow id (or the run's
// result) to follow it.
package workflow
