// Package kv owns jetflow's buckets: their key layout, the codec of their
// records and the compare-and-swap writes every state change goes through.
// Roles use it through a Store; applications read run status with the
// producer instead.
//
// # Runs bucket
//
// <prefix>_runs holds one record per run, key = run id, value = the JSON of
// a jetflow.Run. Every write carries Nats-Expected-Last-Subject-Sequence:
// 0 to create (ErrExists when the id is taken), the revision read to update
// (ErrConflict when someone wrote first: the newer state stands). Headers
// mirror record fields (Jetflow-State, Jetflow-Function, Jetflow-Due) so
// that scans read headers only, and say what the write replaced
// (Jetflow-From, the state; Jetflow-Prev, the revision) for the run index
// (docs/runindex.md). Terminal records carry a Nats-TTL of the
// retention period, so JetStream itself removes them; a pending record never
// expires.
//
// # Reads
//
// A run's record is read one of two ways, and the kind of call chooses:
//
//   - Show, for display (status pages, the CLI, the dashboard, a producer's
//     Get): a direct get, which any replica of the bucket may answer. On a
//     cluster a replica may be behind its leader (a moment, or up to 10% of
//     the stream after a restart), so a display may be a moment stale.
//   - Decide, for a decision: the word of the runs stream's leader
//     (LastFromLeader, $JS.API.STREAM.MSG.GET), which holds every
//     acknowledged write. Where the connection may not ask the leader (the
//     permission is optional, docs/permissions.md) a direct get stands in,
//     as before leader reads existed, and Decide says so (leader false);
//     where the leader cannot answer now (an election, a timeout) Decide
//     returns the error and the decision waits.
//
// The rule: whatever may drop, skip, forget or give up work, or settle a
// write whose reply was refused or lost, is decided on Decide's answer. A
// change written by compare-and-swap may start from Show's answer (the
// write itself is checked on the leader, and a replica never shows a state
// that was not written), but an answer that would end it without a write
// (no record, an older revision than expected, nothing to change) is asked
// again with Decide: Transition reads this way, and Lookup is that read for
// a step that needs the record to go on (a retrier's check after scheduling
// an attempt failed on a replica's "not found" before it). A create refused
// as already there is settled by CreateConfirmed, whose finds add one check
// to Decide: the leader must hear from a quorum of its replicas
// (LeaderHasQuorum), since a leader cut off from its peers may hold a write
// it will lose.
//
// A read through a consumer, which the server may place on a replica, is
// made again until it holds the leader's last revision (ReadCaughtUp; the
// delayed seconds the scheduler reads). A second read while the leader
// cannot answer is visited and reported stale (StaleSeconds), to be read
// again until the leader vouches for it.
//
// One request waits at most 5 s for its answer (OneRequest), whatever the
// caller's ctx: a request sent just before its server died is never
// answered, and a longer ctx bounds the caller's retries, not one request.
//
// # Listing keys
//
// ListKeys lists a bucket's keys whole or returns an error (ErrListStalled
// when no try ended): nats.go's key lister can wait for ever on a stalled
// watcher, and closes its channel alike when a deadline cuts it short.
// FetchPending reads what a short-lived consumer has pending the same way,
// whole or with an error (ErrFetchStalled): nats.go ends a no-wait fetch
// after a second without a message, which looks like the end of the
// stream; it is made again while the consumer still has messages pending.
// Scan, which the repair sweep and the readers' full reads use, is held to
// the same rule: a consumer that goes quiet with records pending is
// ErrFetchStalled, not the end of the bucket.
//
// # Delayed bucket
//
// <prefix>_delayed holds the runs due later under <due unix second>.<run
// id>, so the scheduler reads one second's entries with a key filter. Each
// value is a Delayed: the envelope that starts the run and its due time.
//
// # Functions bucket
//
// <prefix>_functions holds, under <worker id>.<function>, a FunctionInfo
// that each worker writes with a Nats-TTL of FunctionTTL and renews while
// it runs. ReadFunctions reads it (the CLI, the dashboard). Keys that
// begin with '=' are not a worker's: =paused.<function> marks a paused
// function (SetPaused), =trigger.<name> holds a trigger's definition
// (TriggerDef) and =tstat.<name>.<runner> a trigger runner's counters
// (TriggerStats, with a TTL); ReadTriggers reads those.
//
// # Crons bucket
//
// <prefix>_crons holds each cron under def.<name> (a CronRecord, written by
// the scheduler package) and the evaluator's index and bookkeeping under
// due.* and meta.*. Store.Crons reads the crons as CronInfo, without the
// scheduler.
//
// # Raw writes
//
// A write the KV API cannot make (a compare-and-swap with headers, a TTL
// per key, a pipelined or batched write) is built by PutMsg, with PutExpect
// and PutTTL: one builder for every bucket.
//
// The layout is also written down, for other languages, in
// docs/wire-format.md.
package kv
