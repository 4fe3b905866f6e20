package sim

import "time"

// Bugs puts back bugs fixed in the last weeks, one switch each, to show that
// the simulation finds them.
type Bugs struct {
	// RefusedIsLanded: a refused create is taken as proof that an earlier
	// try landed (issue 26, item 1) instead of kv.CreateConfirmed.
	RefusedIsLanded bool
	// StaleFastPath: a delivery read after a stall of the worker counts as
	// fresh (issue 26, item 2): the stall detector is not asked.
	StaleFastPath bool
	// WallClockLiveness: a run's owner is lost when the heartbeat time it
	// wrote is LostAfter behind the checker's wall clock (issue 26, item 3).
	WallClockLiveness bool
	// BlindOutcome: an outcome is written without compare-and-swap.
	BlindOutcome bool
	// StaleForget: the repair sweep forgets a run that a replica read does
	// not find, without asking the leader.
	StaleForget bool
}

// Config is one simulated run.
type Config struct {
	Seed      uint64
	Steps     int // steps with faults; a quiet drain follows
	Producers int
	Workers   int
	Bugs      Bugs
	TraceLen  int // the last steps kept for a report (default 60)
}

// The protocol's timings (virtual time).
const (
	ackWait     = 2 * time.Second
	claimAfter  = 100 * time.Millisecond
	lostAfter   = 2 * ackWait
	staleAfter  = 2 * lostAfter // the repair sweep's
	replayGrace = ackWait
	beatEvery   = ackWait / 3
	stallTick   = ackWait / 4 // the stall detector's threshold
	stallWindow = ackWait
	maxAttempts = 3
	maxLag      = 1500 * time.Millisecond // a replica's delay behind the leader
	skewBig     = 30 * time.Second
	drainSteps  = 6000
)

// Fault odds, per write or per step.
const (
	pDrop      = 0.03 // a write never arrives
	pLostReply = 0.05 // a write lands, its reply is lost
	pLate      = 0.03 // a write lands later, after its client timed out
	pStale     = 0.35 // a replica read is behind
)

func (c Config) withDefaults() Config {
	if c.Steps == 0 {
		c.Steps = 1500
	}
	if c.Producers == 0 {
		c.Producers = 2
	}
	if c.TraceLen == 0 {
		c.TraceLen = 60
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	return c
}
