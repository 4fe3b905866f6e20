package engine

// A delivery is classified once, by one pure function, into the kind that
// decides whether its handler may start without reading the run's record
// and without claiming it first. The one rule: only a first delivery of
// ours that cannot have waited anywhere (not redelivered, not possibly
// replayed by a restarted server, not stored long ago, not received across
// a stall of the worker's process) starts on the fast path; every other
// kind reads the record and claims the run before its handler starts. The
// worker applies it (worker/process.go); the simulation (internal/sim)
// drives the same function.

// DeliveryKind is what a delivery is.
type DeliveryKind int

const (
	// Fresh: a first delivery of a message that carries the whole pending
	// record, received and started by a process that did not stall.
	Fresh DeliveryKind = iota
	// Incomplete: the message does not carry the record (another
	// producer's, a retry of a run with a record, Reload): read it, then
	// run as a first delivery.
	Incomplete
	// Redelivered: JetStream delivered it before (NumDelivered > 1).
	Redelivered
	// Replayed: it may be a server's replay after a restart, handed back
	// as a first delivery while it runs elsewhere.
	Replayed
	// Waited: it may have waited long enough for JetStream to redeliver
	// it elsewhere: its message stored AckWait/2 ago or more (by the
	// server's clock), or received across a stall of this process (a
	// SIGSTOP, a VM pause), which makes a stale delivery look fresh.
	Waited
)

// DeliveryFacts is what Classify looks at.
type DeliveryFacts struct {
	NumDelivered uint64
	Replay       bool // a possible replay after a reconnect (the worker's mayBeReplay)
	Held         bool // its message stored AckWait/2 ago, or received across a stall of the process
	Reload       bool // the record has fields the message lacks (Envelope.Reload)
	IsNew        bool // the message is the pending record (no record yet)
	Rev          uint64
	Attempt      int
}

// Classify returns the kind of a delivery.
func Classify(f DeliveryFacts) DeliveryKind {
	switch {
	case f.NumDelivered > 1:
		return Redelivered
	case f.Replay:
		return Replayed
	case f.Held:
		return Waited
	case f.Reload || !carriesRecord(f):
		return Incomplete
	}
	return Fresh
}

// carriesRecord reports whether a message is the run's pending record: it
// names the record's revision, or says the run has no record yet (a first
// attempt published without one).
func carriesRecord(f DeliveryFacts) bool {
	if f.Rev != 0 {
		return true
	}
	return f.IsNew && f.Attempt <= 1
}

// ReadsRecord reports whether the handler waits for the stored record.
func (k DeliveryKind) ReadsRecord() bool { return k != Fresh }

// ClaimsFirst reports whether the run is claimed before its handler starts
// (a retryable function's own choice aside): any delivery that may repeat
// a run that ran, or runs, elsewhere.
func (k DeliveryKind) ClaimsFirst() bool {
	return k == Redelivered || k == Replayed || k == Waited
}

func (k DeliveryKind) String() string {
	return [...]string{"Fresh", "Incomplete", "Redelivered", "Replayed", "Waited"}[k]
}
