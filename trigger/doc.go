// Package trigger turns messages into runs: each message of an existing
// stream (through a subject filter), or of plain NATS subjects that
// jetflow captures into a stream of its own, becomes exactly one run of a
// function or one workflow, without a glue service that re-publishes them.
//
//	var ShipOrder = jetflow.Define[Order]("orders.ship")
//
//	r := trigger.New(w.Producer(), trigger.Config{})   // in the worker process
//	err := trigger.Bind(r, trigger.Func(ShipOrder), trigger.Spec[Order]{
//		Name:     "ship-created",
//		Stream:   "ORDERS",                     // the user's stream
//		Subjects: []string{"orders.created"},   // its messages on these subjects
//		IDHeader: "Order-Id",                   // optional: one run per order id
//	})
//	err = r.Start(ctx)
//	defer r.Stop(ctx)
//
// Without Stream, Subjects are plain subjects: jetflow creates the stream
// <PREFIX>_TRIGGER_<name> (work-queue retention) capturing them, so a
// message published with core NATS after Start returns is the trigger's.
// trigger.Workflow(def) targets a workflow instead of a function: each
// message starts one (id workflow.TriggeredID(<run id>)).
//
// # Exactly one run per message
//
// A trigger reads through a durable consumer, <prefix>_trigger_<name>, on
// the source stream: it resumes where it was after a restart, and several
// runners (several worker processes) share it, each message going to one.
// A message's run id derives from the message: StreamRunID (trigger name,
// stream, the stream's creation time, stream sequence) by default, or
// HeaderRunID (trigger name, the value of the header Spec.IDHeader names)
// so that the same event published twice is one run. The run is scheduled
// with that id as its idempotency key (producer.WithID: a create-only
// record), and the message is acked only once the run is accepted; a
// redelivery, however late (a crash before the ack, a consumer made again),
// finds the record and makes no second run, for as long as the run's
// record is kept (terminal records: the retention, 7 days by default).
// Messages fetched together are scheduled in one atomic batch of records
// (producer.Batch); when that fails (a run exists: a redelivery) each is
// scheduled alone.
//
// # Args, filters, bad messages
//
// The args are the message's JSON decoded into the target's type (an
// empty body is JSON null), or what Spec.Map returns. Spec.Filter skips
// messages: acked, counted (Stats.Skipped), no run. A message that cannot
// become a run is never dropped: a mapping error (ErrMapping, wrapping the
// mapping's error), a panic in Map or Filter, JSON that is not the args'
// type (jetflow.ErrBadArgs), a missing id header (ErrNoID) or args too
// large are recorded through the engine as a failed run under the
// message's run id, with the reason (the trigger, the stream and sequence,
// the subject), and the trigger goes on with the next message.
//
// # Backpressure
//
// A trigger never makes more runs than its window (Spec.Window, default
// DefaultWindow) beyond what its function has waiting or running: before
// each fetch it reads the function's queue (its worker consumer's pending
// and unacknowledged messages, or the function's messages in the stream
// before any worker served it) and fetches at most window - queue
// messages; at the window it holds off (Stats.Held) and looks again after
// 10 ms, backing off to 160 ms while the queue stays full. The trigger's
// consumer also has MaxAckPending = window. The queue counts every run of
// the function, whoever scheduled it. With k
// runners of one trigger, each reads the queue before its fetch, so the
// queue can pass the window by at most (k-1) x Config.Batch.
//
// # Declared in code and at run time
//
// Bind declares a trigger in code: Start stores its definition in the
// functions bucket (key =trigger.<name>; a pause set at run time is kept)
// and runs it with its mapping and filter. Add (and `jetflow triggers
// add`) defines one at run time, with the message's JSON as the args:
// every runner not configured CodeOnly runs it, and Pause, Resume and
// Delete take effect in running runners without a restart (they watch the
// definitions). Delete removes the definition, the durable consumer and a
// capture stream; a code trigger is defined again when its program starts.
// List (and `jetflow triggers list`, the dashboard's Triggers page) shows
// each trigger with its state, the counters of the runners running it
// (messages, runs made, runs found existing, skipped, failed) and its
// consumer's backlog.
//
// A trigger never reads what its runs write: Validate refuses (ErrInvalid)
// jetflow's own streams and capture subjects overlapping _INBOX.>,
// <prefix>.> or the server's ($KV, $JS, $SYS, $O, ...). A definition
// written by hand that cannot be read, or names another trigger, is listed
// as unreadable, Get says so (ErrUnreadable), and Delete removes it.
//
// docs/triggers.md has the design, the guarantees and the permissions a
// trigger needs on a user's stream.
package trigger
