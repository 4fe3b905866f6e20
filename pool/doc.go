// Package pool runs work through named pools, after Convex's workpool: a
// pool bounds how many of its items run at once across every worker of the
// cluster, starts higher-priority items first, can limit starts per period,
// retries failed items with backoff, and calls an on-complete function once
// per item.
//
//	pl, err := pool.New(ctx, p, pool.Config{
//		Name:           "emails",
//		MaxParallelism: 5,
//		RateLimit:      pool.RateLimit{N: 100, Per: time.Minute},
//		Retry:          pool.Retry{MaxAttempts: 3},
//	})
//	pl.Start(ctx) // the dispatcher: any number of processes, one active
//	id, err := pl.Enqueue(ctx, SendEmail.With(args),
//		pool.WithPriority(pool.High),
//		pool.WithOnComplete(jetflow.Call{Name: EmailSent.Name(), Args: ctxArgs}))
//	item, err := pl.Status(ctx, id) // pending, running (InProgress), or the outcome
//
// and on every worker that runs the pool's functions:
//
//	worker.Handle(w, SendEmail, handler)
//	pool.Register(w) // the pool's done function, before w.Start
//
// # How it works
//
// Everything is in JetStream, in the bucket <prefix>_pools; a process that
// dies loses nothing.
//
//   - Enqueue writes the item's queue entry (one write, refused if the item
//     exists); EnqueueBatch writes up to 1000 in one atomic batch.
//   - The dispatcher (Start; one active per pool through a KV lease with a
//     TTL, renewed by compare-and-swap) reads the queue into memory and
//     follows it with a KV watch. When the pool has free slots and the rate
//     limit allows, it takes them in one compare-and-swap on the pool's
//     state record (the running items and the recent start times), writes
//     each item's record as InProgress (a compare-and-swap that a concurrent
//     Cancel wins or loses cleanly), creates the attempt's run (run id
//     <pool>-<item>-<attempt>, one attempt) and removes the queue entry. Any
//     worker serving the function runs it.
//   - Each attempt run has the pool's done function (jetflow.pool.done,
//     served by Register) as its on-complete callback. It settles the item:
//     records the outcome, or makes it pending again and queues the retry
//     after the backoff; once the item is finished it enqueues the item's own
//     callback with a fixed run id, so that it runs exactly once.
//   - The dispatcher also watches the item records: an item that finished,
//     or whose retry was queued, gives its slot back in the dispatcher's next
//     write of the state, with the starts of that pass.
//   - Every ReconcileInterval the dispatcher checks the running slots, so a
//     crash between two of those steps never leaks a slot nor strands an
//     item; a new dispatcher does the same when it takes over.
//
// # Guarantees
//
// Max parallelism: the running set lives in one record and every start and
// every release is a compare-and-swap on it, so no two dispatchers (a split
// brain, a slow old leader) can together exceed the limit. A slot is held
// from the start of an attempt until the attempt's outcome is recorded on
// the item (after the handler has returned). A canceled running item gives
// its slot back as soon as it is canceled; its handler, told through its
// context, may still be finishing then. Lowering the limit stops no running
// item: new ones start when fewer than the new limit run.
//
// Rate limit (N per Per): a start is granted at time t only if fewer than N
// starts were granted in [t-Per, t]; so any window of length Per holds at
// most N grants, retries included. Items over the limit wait in the queue;
// nothing is dropped or failed. Grant times are taken on the active
// dispatcher's clock and never go backwards. The handler starts a delivery
// latency after its grant.
//
// Priority and aging: when the pool is saturated, the dispatcher starts the
// pending item with the smallest rank = ready time - priority x Aging (ready
// time: when it was enqueued, or when its retry backoff ended). Put
// differently, an item's priority rises one level per Aging waited, and
// items are compared on priority + wait/Aging, older first on a tie. With
// the default Aging of one minute a Low item that has waited two minutes
// goes before a High item enqueued now. Low priority is never starved: an
// item ready at t starts before every item of priority q that became ready
// after t + (q - p) x Aging.
//
// Retries are the pool's, not the worker's: each attempt is a run with one
// attempt, so a retry waits for a slot and a token like any start, and an
// item backing off holds no slot. Permanent errors (jetflow.Permanent, a
// timeout, a panic) are not retried.
//
// Cancel stops a pending item from starting and cancels a running one's
// run; CancelAll does so for every item pending or running when it is
// called. Canceled items get their on-complete callback with Canceled.
//
// Status reads the item record: Pending (waiting, or backing off),
// InProgress (holding a slot), or the outcome Success, Failed or Canceled
// with the result or error. Finished records are kept for the retention
// period of streams.Config.
//
// A function is rate limited or bounded cluster-wide by sending all its runs
// through one pool.
package pool
