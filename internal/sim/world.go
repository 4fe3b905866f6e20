package sim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Result is what one simulated run found.
type Result struct {
	Seed      uint64
	Steps     int
	Violation string   // empty: every invariant held
	Trace     []string // the last steps before the violation (or the end)
	Runs      int      // runs accepted
	Ended     int      // of them, ended
}

func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d steps, %d runs accepted, %d ended", r.Seed, r.Steps, r.Runs, r.Ended)
	if r.Violation != "" {
		fmt.Fprintf(&b, "\nVIOLATION: %s\nlast steps:\n  %s\nreplay: go test ./internal/sim -run TestReplay -sim.seed=%d -v",
			r.Violation, strings.Join(r.Trace, "\n  "), r.Seed)
	}
	return b.String()
}

// World is one simulated cluster.
type World struct {
	cfg       Config
	rng       *rand.Rand
	now       time.Duration // true time
	step      int
	faults    bool
	bucket    *bucket
	stream    *stream
	producers []*producer
	workers   []*worker
	sweep     *sweeper
	check     *checker
	trace     []string
	violation string
	crashedAt time.Duration // the last server crash (-1: none)
	nextToken uint64
}

// Run simulates cfg and reports the first violation, if any.
func Run(cfg Config) Result {
	cfg = cfg.withDefaults()
	w := &World{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), faults: true, crashedAt: -ackWait * 100}
	w.bucket, w.stream, w.check = newBucket(w), newStream(w), newChecker(w)
	w.sweep = &sweeper{w: w, index: map[string]bool{}}
	for i := range cfg.Producers {
		w.producers = append(w.producers, &producer{w: w, name: fmt.Sprintf("p%d", i)})
	}
	for i := range cfg.Workers {
		w.workers = append(w.workers, newWorker(w, i))
	}
	for w.step = 0; w.step < cfg.Steps && w.violation == ""; w.step++ {
		w.tick(true)
	}
	w.drain()
	return w.result()
}

// drain ends the faults and lets the runs finish.
func (w *World) drain() {
	if w.violation != "" {
		return
	}
	w.faults = false
	w.tracef("drain: faults end")
	if w.bucket.cutOff {
		w.bucket.heal()
	}
	for _, k := range w.workers {
		if k.paused {
			k.resume()
		}
	}
	for i := range drainSteps {
		if w.violation != "" {
			return
		}
		if i%100 == 0 && w.quiet() {
			break
		}
		w.step++
		w.tick(false)
	}
	w.check.final()
}

// quiet: nothing left to do (no message, no handler, no write on its way).
func (w *World) quiet() bool {
	if len(w.stream.msgs) > 0 || len(w.bucket.late) > 0 {
		return false
	}
	for _, p := range w.producers {
		if p.cur != nil {
			return false
		}
	}
	for _, k := range w.workers {
		if len(k.jobs) > 0 || len(k.socket) > 0 {
			return false
		}
	}
	return true
}

func (w *World) result() Result {
	r := Result{Seed: w.cfg.Seed, Steps: w.step, Violation: w.violation, Trace: w.trace}
	for _, id := range sortedKeys(w.check.accepted) {
		r.Runs++
		if v, ok := w.bucket.latest(id); ok && v.rec.State.Terminal() {
			r.Ended++
		}
	}
	return r
}

// tick is one step: time passes, the server expires deliveries, one actor
// acts, the invariants are checked.
func (w *World) tick(enqueue bool) {
	w.now += time.Duration(w.rng.Int64N(int64(20 * time.Millisecond)))
	for _, k := range w.workers {
		k.tick()
	}
	w.stream.expire()
	w.act(enqueue)
	w.check.step()
}

func (w *World) act(enqueue bool) {
	switch n := w.rng.IntN(20); {
	case n < 3:
		w.producers[w.rng.IntN(len(w.producers))].act(enqueue)
	case n < 5:
		w.deliver()
	case n < 15:
		w.workers[w.rng.IntN(len(w.workers))].act()
	case n < 16:
		w.sweep.act()
	case n < 17:
		w.bucket.landLate()
	default:
		if w.faults {
			w.fault()
		}
	}
}

// deliver: the server sends a message to a worker with room in its socket.
func (w *World) deliver() {
	k := w.workers[w.rng.IntN(len(w.workers))]
	if len(k.socket) >= 3 {
		return
	}
	if m, ok := w.stream.deliver(k.idx); ok {
		k.receive(m)
	}
}

// fault injects one fault.
func (w *World) fault() {
	switch n := w.rng.IntN(100); {
	case n < 4:
		w.partition()
	case n < 6:
		w.crash()
	case n < 14:
		w.workers[w.rng.IntN(len(w.workers))].pauseOrResume()
	case n < 16:
		w.workers[w.rng.IntN(len(w.workers))].jump()
	}
}

// partition cuts the runs bucket's leader off, or heals the cut; not
// within ReplayGrace of a server crash (a known limit: a worker that
// cannot claim its runs within ReplayGrace of a crash may run one twice).
func (w *World) partition() {
	if w.bucket.cutOff {
		w.tracef("FAULT: partition heals")
		w.bucket.heal()
		return
	}
	if w.now-w.crashedAt < 2*replayGrace {
		return
	}
	w.tracef("FAULT: the runs leader is cut off")
	w.bucket.cut()
}

// crash restarts the server: deliveries in flight come back as first ones,
// and every worker's connection breaks.
func (w *World) crash() {
	if w.bucket.cutOff {
		return // see partition
	}
	w.tracef("FAULT: server crash")
	w.crashedAt = w.now
	w.stream.crash()
	for _, k := range w.workers {
		k.reconnect()
	}
}

func (w *World) token() uint64 {
	w.nextToken++
	return w.nextToken
}

func (w *World) tracef(format string, args ...any) {
	line := fmt.Sprintf("%5d %8.3fs ", w.step, w.now.Seconds()) + fmt.Sprintf(format, args...)
	if len(w.trace) == w.cfg.TraceLen {
		w.trace = w.trace[1:]
	}
	w.trace = append(w.trace, line)
}

func (w *World) fail(format string, args ...any) {
	if w.violation != "" {
		return
	}
	w.violation = fmt.Sprintf(format, args...)
	w.tracef("VIOLATION: %s", w.violation)
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
