// Package sim is a deterministic simulation of jetflow's run protocol, in
// the spirit of FoundationDB's simulation and TigerBeetle's VOPR: producers,
// workers and the scheduler's repair sweep run against an in-memory model of
// the runs bucket (revisions, compare-and-swap, a leader with replicas that
// lag, a cut-off leader's uncommitted log) and of the function stream
// (delivery counts, AckWait, nak with delay, a server crash that hands the
// messages in flight back as first deliveries), with lost and late replies,
// process pauses, clock skew and jumps. Everything runs in one goroutine on
// a virtual clock; one seeded PCG makes every choice, so a seed replays a
// run exactly.
//
// The model calls jetflow's own pure decisions where it can:
// kv.CreateConfirmed (every create), engine.Check (every record write),
// kv.Settle (every write whose reply was lost, or refused), liveness.Watch and liveness.Lost (takeovers), stall.Stalled (a worker's
// stop), and engine.Classify, the worker's one rule for which delivery may
// start unclaimed.
//
// Invariants are checked as each write commits and after every step:
// at most one recorded outcome per attempt, an at-most-once run never
// started twice, a handler never started twice for one attempt, a terminal
// record never overwritten, no live owner taken over, every write a
// transition the engine allows, and no accepted run lost. See
// docs/design/simulation.md.
package sim
