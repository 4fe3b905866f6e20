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
// dies loses nothing. streams.Provision (jetflow provision) creates the
// bucket with the others; New creates it only when it is missing, which
// needs stream-create rights. The NATS permissions of the worker and the
// producer are docs/permissions.md's "work pools" block.
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
//     item; a new dispatcher does the same when it takes over. A slot
//     whose item has not started after ReconcileGrace is given back once
//     the check has marked it revoked on the item's record (creating the
//     record, pending, for a new item): a grant still under way meets the
//     mark when it writes the record, and starts nothing.
//   - Records another client wrote into the bucket are repaired or
//     reported: an unreadable, deleted or out-of-range state is rebuilt
//     from the configuration and the items in progress, or held within the
//     limits; a slot whose item is missing or unreadable is given back once
//     its attempt's run is not running; queue entries and item records that
//     the pool cannot have written start nothing, and Status reports them
//     with jetflow.ErrBadRecord. Cancel and CancelAll resolve such a queue
//     entry once: recorded as a failed run, the engine's dead letter
//     (dlq-<pools stream>-<revision>, the entry's value as its args, the
//     reason as its error), then removed from the queue; the call reports
//     it with jetflow.ErrBadRecord naming that run, and the next call does
//     not meet it.
//
// # Guarantees
//
// Max parallelism: the running set lives in one record and every start and
// every release is a compare-and-swap on it, so no two dispatchers (a split
// brain, a slow old leader) can together exceed the limit. A slot is held
// from the start of an attempt until the attempt's outcome is recorded on
// the item (after the handler has returned). An item never starts without
// its slot, however late its grant: a grant delayed past ReconcileGrace (a
// pause, a slow server) loses the slot to the periodic check, meets the
// check's mark on the item's record in the write that would start the
// item, and gives the item back to the queue, to wait for a slot again.
// (Every dispatcher of a pool must run a version with this mark, jetflow
// after 2026-11-27: an older one's grant takes a marked pending record for
// a canceled item, and the item then waits until it is canceled.) A
// canceled running item gives its slot back as soon as it is canceled;
// its handler, told through its context, may still be finishing then.
// Lowering the limit stops no running item: new ones start when fewer than
// the new limit run.
//
// These limits hold against the pool's own writers, not against a client
// that writes well-formed records into the bucket: an item record saying
// an item finished (or was canceled) gives its slot back, and a state
// record without the running slots frees them all, while their handlers
// run on. A forged "canceled" record cannot be told from Cancel's, which
// gives the slot back before the run has ended, and a forged state names
// no item at all; so the bucket's write rights ($KV.<prefix>_pools.>) are
// the guard: give them to the pool's roles only (docs/permissions.md).
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
//
// # Keys: per-key limits, fairness, throttle, debounce
//
// An item may have a key, e.g. the customer it works for: Config.Key
// derives it from the args (pool.KeyOf for typed args), WithKey sets it per
// item (at most MaxKeyLen bytes of UTF-8; a failing Config.Key fails the
// Enqueue with ErrInvalidKey). Items without a key are in the key "".
//
//	pl, err := pool.New(ctx, p, pool.Config{
//		Name:           "reports",
//		MaxParallelism: 50,
//		Key:            pool.KeyOf(func(a ReportArgs) string { return a.Customer }),
//		KeyLimit:       2,                                     // per customer, cluster-wide
//		KeyStrategy:    pool.Queue,                            // or CancelInProgress, DropNewest
//		KeyRate:        pool.RateLimit{N: 10, Per: time.Minute}, // starts per customer
//	})
//	pl.Enqueue(ctx, Rebuild.With(args), pool.WithDebounce(5*time.Second, time.Minute))
//
// Per-key limit (KeyLimit N): at most N items of one key hold a slot at
// once. A slot is the one of max parallelism (held from the grant of an
// attempt until its outcome is recorded); each slot in the state record
// names its key, and a start is granted only if the compare-and-swap on
// that record shows fewer than N slots of the key, so no two dispatchers
// together exceed it. The key "" has no per-key limit nor throttle. What
// happens to a new item of a key at its limit is the key strategy, applied
// by the active dispatcher when the item becomes ready (after its debounce),
// to new items in order of arrival (retries always wait, as Queue):
//
//   - Queue (default): it waits until the key has a free place.
//   - CancelInProgress, the newest wins: when a key has more than N items
//     running (and not being canceled) or waiting, the oldest waiting ones
//     beyond the N newest are canceled, then the running ones granted
//     longest ago. Each goes through Cancel (a running one's run is
//     canceled, its handler's context ends with jetflow.ErrCanceled, its
//     on-complete runs) and its record says "jetflow: run canceled:
//     superseded by newer item <id> of key <k> (cancel-in-progress)", with
//     SupersededBy set to the newest item waiting at that moment.
//   - DropNewest: a key admits an item only while it has fewer than N items
//     running or admitted and waiting; any other new item is recorded as
//     canceled, "dropped: key <k> has N items running or waiting, its limit
//     (drop-newest)", and its on-complete runs. It never starts (if that
//     record cannot be written, the item runs rather than being lost).
//
// Info.RunningByKey counts the slots held per key; DispatcherStats counts
// the items dropped, superseded and debounced.
//
// Fairness: the dispatcher keeps one queue per key and serves the keys in
// turn (stride scheduling): each key has a pass, the key with the smallest
// goes next and its pass grows by 1/weight (Config.KeyWeight, default 1).
// While keys A and B both have items ready, B gets weight(B) starts for
// every weight(A) of A's, whatever the length of A's queue; a key at its
// limit or throttle steps aside and takes its turn again when it may start.
// A key that becomes ready after a pause may go first for its turn and up
// to KeyBurst x weight more starts (default 10): so with tenant A holding
// 100,000 queued items and saturating the pool, tenant B's 10 new items
// take the next 10 slots freed, and start after about the time those slots
// take to free. (No running item is preempted: with every slot busy, that
// wait is the floor.)
// A key served all along banks nothing; an idle key no more than KeyBurst
// turns. The credit is shared: the keys served on credit together get at
// most KeyBurst turns ahead of the keys served all along (one given back
// per turn of theirs), so a flood of new keys, one item each, takes turns
// with a key served all along rather than starving it.
//
// Priorities order the items of one key (by rank, as above); across keys,
// the turns decide, so a tenant cannot jump ahead of the others by raising
// its items' priority. Give a key more weight to give it a larger share.
//
// Cost: a start takes O(log K + log n) (K keys with items ready, n items of
// the key) whatever the number of keys; each pass also counts the running
// slots per key (at most MaxParallelismLimit) to release the keys set aside
// at their limit. A key costs a small record in the dispatcher's memory
// while it has items waiting, and none once it has none.
//
// Throttle (KeyRate N per Per): a start of key k is granted at t only if
// fewer than N starts of k were granted in [t-Per, t], the definition of
// RateLimit applied to each key alone, on the same grant times. Items over
// it wait; nothing is dropped. The state record keeps the grant times of the
// keys that started within the last Per (at most N each), so that every
// dispatcher enforces the same window; mind its size with many keys, a large
// N and a long Per.
//
// Debounce (Config.Debounce or WithDebounce(window, maxWait)): debounced
// items of one key that arrive within window of each other collapse into
// one run: the last one to arrive (in queue order), with its own args,
// started once the key has had no new debounced item for window, and at
// most maxWait after the first item of the burst was enqueued (0: no
// maximum). Before the last item starts, each earlier one is recorded as
// canceled, "debounced into <id>", with SupersededBy <id> and its
// on-complete called; until then their queue entries stay, so a dispatcher
// taking over meets the whole burst again and collapses it the same way. An
// item arriving after the run has started begins a new burst. Canceling the
// waiting last item cancels its burst. The winner then waits for its key's
// limit, throttle and turn like any item.
package pool
