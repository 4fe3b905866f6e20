package sim

// The worker's delivery rule, copied from worker/delivery.go (classify and
// deliveryKind are unexported there): only a first delivery that cannot
// have waited anywhere starts on the fast path; every other kind reads the
// record and claims the run first. TestClassifyIsTheWorkersRule holds the
// worker's own table against this copy.

type deliveryKind int

const (
	fresh deliveryKind = iota
	incomplete
	redelivered
	replayed
	waited
)

type deliveryFacts struct {
	numDelivered uint64
	replay       bool
	held         bool
	reload       bool
	isNew        bool
	rev          uint64
	attempt      int
}

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

func carriesRecord(f deliveryFacts) bool {
	if f.rev != 0 {
		return true
	}
	return f.isNew && f.attempt <= 1
}

func (k deliveryKind) readsRecord() bool { return k != fresh }

func (k deliveryKind) claimsFirst() bool {
	return k == redelivered || k == replayed || k == waited
}

func (k deliveryKind) String() string {
	return [...]string{"fresh", "incomplete", "redelivered", "replayed", "waited"}[k]
}
