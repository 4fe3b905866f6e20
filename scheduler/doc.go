// Package scheduler does what must happen once in a jetflow deployment:
// it publishes delayed runs when they are due, repairs runs whose message
// was never published, and evaluates crons.
//
//	s, err := scheduler.New(ctx, js, scheduler.Config{})
//	if err := s.Start(ctx); err != nil { ... }
//	defer s.Stop(ctx)
//
// Any number of schedulers may run, in any processes: one leader, elected
// with a lease in a KV bucket (a key with a TTL, renewed by
// compare-and-swap), does the work and the others stand by. When the leader
// stops, it gives the lease up; when it dies, a standby takes over after
// Config.LeaseTTL. Correctness never depends on a single leader: publishes
// are deduplicated by run id and every state change is a compare-and-swap,
// so two leaders at once cost work, not correctness. A leader publishes a
// due run only while its lease certainly holds (3/4 of LeaseTTL after its
// last renewal was sent, on the monotonic clock): one paused past that
// (SIGSTOP, a VM's pause) publishes nothing on what it read before.
//
// # Delayed runs
//
// A run due later waits in the delayed bucket under <due unix second>.<run
// id>. The leader keeps the entries due within Config.Horizon in memory and
// reads each later second when it comes within the horizon (one consumer
// filtered on that second: the server finds its keys in its subject index),
// so a tick costs in proportion to the runs due, not to every run waiting:
// a million runs due next week do not slow down the one due now. A new
// term starts the same way: every 2 s the leader stores a checkpoint (a
// second before which nothing waits) in the leases bucket, and the next
// leader reads the seconds from it to now, fires them, and reads the rest
// of the horizon at its first tick. A term with no checkpoint (the first,
// or one after a long outage) reads the last minute at once and, in the
// background, the keys of the whole bucket (paced, values only for the
// entries due before that minute), so its first run fires at once whatever
// the bucket holds. DispatchDue and NextDue, the hooks of tests with a
// fake clock, read every key.
//
// # Repair
//
// Every Config.RepairInterval the leader looks for pending runs that are
// past due by Config.RepairGrace and have neither a delayed entry nor a
// queued message (a producer crashed between writing the record and
// publishing it) and publishes them. Repair can also be called directly.
// The leader reads every record for it at the start of its term (once the
// dispatcher has read what is due) and hourly, 5,000 records a second so
// that the runs coming due meanwhile keep the machine; in between it looks
// only at the runs the run index names (below), so a sweep costs in
// proportion to the runs not ended.
//
// # Run index
//
// The leader also runs the run indexer (docs/runindex.md): it follows the
// runs bucket and keeps an index of runs by state and function and the
// counts per state, checkpointed every second. producer.List, the
// producer's Counts, the dashboard and `jetflow runs list|counts` read it:
// a page or the counts cost in proportion to what they show, not to the
// records kept. Without a scheduler running they read every record.
//
// # Crons
//
// Crons are named schedules (Interval, Hourly, Daily, Weekly, Monthly or a
// cron expression, in an IANA time zone) that start a run each time they
// fire. The next fire time is computed from the previous scheduled time,
// never from now, so crons do not drift. Code-defined crons (Convex's
// crons.ts) and the evaluator's settings are configured in one place,
// before Start:
//
//	crons, err := s.ConfigureCrons(scheduler.CronConfig{Crons: []scheduler.CronDef{{
//		Name: "send-daily-digest", Schedule: scheduler.Daily(9, 0), TZ: "Europe/Paris",
//		Call: SendDigest.With(DigestArgs{List: "all"}),
//	}}})
//
// The leader syncs them at the start of each term. A scheduler that stands
// by compares its own code-defined crons with the stored ones when it
// starts and every RepairInterval while it does not lead, and logs a
// warning (through Config.Logger, attributes cron and difference) for each
// one missing from the store or stored with another schedule, function,
// arguments or policy, once per difference: a rolling deploy whose new
// crons are not in force yet says so.
//
// Crons registered at run time go through the Crons API (Scheduler.Crons,
// or NewCrons in any process): Register, Get, List, Pause, Resume, Delete,
// and Trigger, which starts a cron's call now (`jetflow crons trigger`,
// the dashboard's Trigger now). A stored record that cannot be used (one
// written by hand: not JSON, another cron's name, a schedule that does not
// validate, ...) is ErrBadCronRecord, matching jetflow.ErrBadRecord, for
// Get, Pause, Resume and Trigger, and is listed with
// CronInfo.Unreadable saying why; Delete removes it. See CronDef and Crons.
package scheduler
