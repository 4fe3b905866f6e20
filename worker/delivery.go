package worker

// A delivery is classified once, by one pure function, into the kind that
// decides whether its handler may start without reading the run's record
// and without claiming it first. The one rule: only a first delivery of
// ours that cannot have waited anywhere (not redelivered, not possibly
// replayed by a restarted server, not held here long, not received across
// a stall of this process) starts on the fast path; every other kind reads
// the record and claims the run before its handler starts.

// deliveryKind is what a delivery is.
type deliveryKind int

const (
	// fresh: a first delivery of a message that carries the whole pending
	// record, received and started by a process that did not stall.
	fresh deliveryKind = iota
	// incomplete: the message does not carry the record (another
	// producer's, a retry of a run with a record, Reload): read it, then
	// run as a first delivery.
	incomplete
	// redelivered: JetStream delivered it before (NumDelivered > 1).
	redelivered
	// replayed: it may be a server's replay after a restart, handed back
	// as a first delivery while it runs elsewhere.
	replayed
	// waited: it may have waited here long enough for JetStream to
	// redeliver it elsewhere: held past AckWait/2, or received across a
	// stall of this process (a SIGSTOP, a VM pause), which makes a stale
	// delivery look fresh.
	waited
)

// deliveryFacts is what classify looks at.
type deliveryFacts struct {
	numDelivered uint64
	replay       bool // mayBeReplay
	held         bool // heldLong, or a stall of this process just now
	reload       bool // Jetflow: the record has fields the message lacks
	isNew        bool // the message is the pending record (no record yet)
	rev          uint64
	attempt      int
}

// classify returns the kind of a delivery.
func classify(f deliveryFacts) deliveryKind {
	switch {
	case f.numDelivered > 1:
		return redelivered
	case f.replay:
		return replayed
	case f.held:
		return waited
	case f.reload || !carriesRecord(f):
		return incomplete
	}
	return fresh
}

// carriesRecord reports whether a message is the run's pending record: it
// names the record's revision, or says the run has no record yet (a first
// attempt published without one).
func carriesRecord(f deliveryFacts) bool {
	if f.rev != 0 {
		return true
	}
	return f.isNew && f.attempt <= 1
}

// readsRecord reports whether the handler waits for the stored record.
func (k deliveryKind) readsRecord() bool { return k != fresh }

// claimsFirst reports whether the run is claimed before its handler starts
// (a retryable function's own choice aside): any delivery that may repeat
// a run that ran, or runs, elsewhere.
func (k deliveryKind) claimsFirst() bool {
	return k == redelivered || k == replayed || k == waited
}

func (k deliveryKind) String() string {
	return [...]string{"fresh", "incomplete", "redelivered", "replayed", "waited"}[k]
}
