// Package runindex keeps and reads the run index (docs/runindex.md): an
// index of runs by state and function, and counts per function and state,
// so that List pages, the dashboard's counts and the scheduler's repair
// sweep cost in proportion to what they return, not to the records kept.
//
// An Indexer runs on the scheduler's leader. It follows the runs bucket's
// stream (headers only) from its checkpoint, publishes one index entry per
// record write on <prefix>.idx.<state>.<function> (asynchronously, off the
// hot path; staged a moment, the entries of consecutive writes of one
// subject in one message, and an entry a later write of its run replaced
// while staged left out: staged.go), and checkpoints the counts about every second with the runs
// stream sequence they reflect. The record writes carry the state and
// revision they replace (Jetflow-From, Jetflow-Prev), so each write moves
// one run from one state to another. When that chain is broken (a run
// changed twice while no indexer read), it recounts every record, exactly,
// serving the last exact counts meanwhile.
//
// A Reader reads the counts (one request) and pages newest first (by last
// write): index entries read backward in windows and checked against the
// current record, the runs stream's tail not indexed yet, and the runs
// waiting in the function stream without a record. Without an up-to-date
// index it answers ErrUnavailable and callers read every record
// (ListScan, CountsScan), saying so.
package runindex
