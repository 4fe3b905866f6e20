package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// wfWaitsIn is the input of the waits workflow: the waits left, and how
// many waits each run makes before it continues as new (0: never).
type wfWaitsIn struct {
	Left  int `json:"left"`
	Every int `json:"every"`
}

// The waits workflow's own-code executions (one bench at a time): the
// times its function was entered (one per segment) and the awaits its code
// asked for, replayed ones included.
var (
	wfWaitsRuns  atomic.Int64
	wfWaitsSteps atomic.Int64
	wfWaitsSeq   atomic.Int64 // numbers the waits workflows' ids
)

// wfWaitsDef waits for event "tick" in.Left times, continuing as new
// every in.Every waits; the worker keeps its executions (sticky
// execution). wfWaitsUncachedDef is the same workflow, registered with no
// cache: every segment replays it from the top.
var (
	wfWaitsDef         = workflow.Define("bench.wf.waits", wfWaitsCode)
	wfWaitsUncachedDef = workflow.Define("bench.wf.waits.uncached", wfWaitsCode)
)

func wfWaitsCode(wf *workflow.Context, in wfWaitsIn) (int, error) {
	wfWaitsRuns.Add(1)
	for i := 0; in.Left > 0; i++ {
		if in.Every > 0 && i == in.Every {
			return 0, workflow.ContinueAsNew(wf, in)
		}
		wfWaitsSteps.Add(1)
		if _, err := workflow.AwaitEvent[int](wf, "tick", 0); err != nil {
			return 0, err
		}
		in.Left--
	}
	return 0, nil
}

// wfWaitsFigures is what one waits workflow cost.
type wfWaitsFigures struct {
	waits, every  int
	cached        bool // the worker kept the workflow's execution
	took          time.Duration
	runs, steps   int64 // code executions: function entries, awaits asked (replays included)
	recordWrites  int   // writes of the workflow's record
	recordBytes   int64 // their values' bytes
	journalWrites int   // writes of the workflow's journal keys
	journalBytes  int64
}

func (f wfWaitsFigures) String() string {
	mode := "never continuing"
	if f.every > 0 {
		mode = fmt.Sprintf("continuing as new every %d", f.every)
	}
	if f.cached {
		mode += ", cache on"
	} else {
		mode += ", cache off"
	}
	return fmt.Sprintf("%6d waits, %s: %s (%s a wait); record %d writes %s; journal %d writes %s; code runs %d, awaits executed %d (%.1f a wait)",
		f.waits, mode, fmtDur(f.took), fmtDur(per(f.took, f.waits)), f.recordWrites, fmtBytes(f.recordBytes),
		f.journalWrites, fmtBytes(f.journalBytes), f.runs, f.steps, float64(f.steps)/float64(max(f.waits, 1)))
}

func fmtBytes(b int64) string {
	switch {
	case b >= 10<<20:
		return fmt.Sprintf("%.0f MB", float64(b)/(1<<20))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// wfWaits runs one waits workflow of n waits (continuing every `every`)
// to its end: each time its cursor says it parked on the await, the bench
// sends it one event. It counts the writes of the workflow's record and
// journal keys as they go by (a core subscription on their subjects: what
// the roles publish into those buckets).
func wfWaits(ctx context.Context, p *producer.Producer, js jetstream.JetStream, scfg streams.Config, n, every int, cached bool) (wfWaitsFigures, error) {
	f := wfWaitsFigures{waits: n, every: every, cached: cached}
	def := wfWaitsUncachedDef
	if cached {
		def = wfWaitsDef
	}
	c := scfg.WithDefaults()
	id := fmt.Sprintf("bench-waits-%d-%d-%d", n, every, wfWaitsSeq.Add(1))
	nc := js.Conn()
	var recW, jrW atomic.Int64
	var recB, jrB atomic.Int64
	var last atomic.Int64 // when the journal was last written (unix ns)
	last.Store(time.Now().UnixNano())
	var ringMu sync.Mutex
	var ring []string // the last writes, for a stall's report
	count := func(w, b *atomic.Int64) nats.MsgHandler {
		return func(m *nats.Msg) {
			w.Add(1)
			b.Add(int64(len(m.Data)))
			last.Store(time.Now().UnixNano())
			ringMu.Lock()
			ring = append(ring, fmt.Sprintf("%s %s %.120s", time.Now().Format("15:04:05.000"), m.Subject, m.Data))
			if len(ring) > 40 {
				ring = ring[1:]
			}
			ringMu.Unlock()
		}
	}
	subRec, err := nc.Subscribe(streams.KVSubject(c.RunsBucket(), id), count(&recW, &recB))
	if err != nil {
		return f, err
	}
	defer subRec.Unsubscribe() //nolint:errcheck // the bench ends either way
	subJr, err := nc.Subscribe(streams.KVSubject(c.JournalBucket(), id+".>"), count(&jrW, &jrB))
	if err != nil {
		return f, err
	}
	defer subJr.Unsubscribe() //nolint:errcheck // the bench ends either way
	if err := nc.Flush(); err != nil {
		return f, err
	}
	jkv, err := js.KeyValue(ctx, c.JournalBucket())
	if err != nil {
		return f, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch, err := jkv.Watch(wctx, id+".wf")
	if err != nil {
		return f, err
	}
	sendErr := make(chan error, 1)
	var seen atomic.Value // the sender's last cursor, for a stall's report
	seen.Store("")
	go func() { sendErr <- wfWaitsSend(wctx, p, id, watch, &seen) }()

	wfWaitsRuns.Store(0)
	wfWaitsSteps.Store(0)
	start := time.Now()
	if _, err := workflow.Start(ctx, p, def, wfWaitsIn{Left: n, Every: every}, workflow.WithID(id)); err != nil {
		return f, err
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Minute)
	defer rcancel()
	done := make(chan error, 1)
	go func() { _, err := workflow.Result(rctx, p, def, id); done <- err }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case err = <-sendErr:
			if err == nil {
				err = fmt.Errorf("waits %s: the event sender stopped", id)
			}
			waiting = false
		case <-tick.C:
			if quiet := time.Since(time.Unix(0, last.Load())); quiet > wfWaitsStall {
				sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
				ringMu.Lock()
				err = fmt.Errorf("stalled: no journal write for %s; the sender saw %s; %s; last writes:\n%s", quiet.Round(time.Second), seen.Load(), wfWaitsState(sctx, p, jkv, id), strings.Join(ring, "\n"))
				ringMu.Unlock()
				scancel()
				waiting = false
			}
		}
	}
	if err != nil {
		return f, fmt.Errorf("waits %s: %w", id, err)
	}
	f.took = time.Since(start)
	f.runs, f.steps = wfWaitsRuns.Load(), wfWaitsSteps.Load()
	if err := nc.Flush(); err != nil {
		return f, err
	}
	f.recordWrites, f.recordBytes = int(recW.Load()), recB.Load()
	f.journalWrites, f.journalBytes = int(jrW.Load()), jrB.Load()
	return f, nil
}

// wfWaitsStall is how long a waits workflow may go without a journal
// write before the bench gives up on it, saying where it stands.
const wfWaitsStall = time.Minute

// wfWaitsState says where workflow id stands: its status and the keys of
// its journal.
func wfWaitsState(ctx context.Context, p *producer.Producer, jkv jetstream.KeyValue, id string) string {
	var b strings.Builder
	if st, err := workflow.Get(ctx, p, id); err != nil {
		fmt.Fprintf(&b, "status: %v", err)
	} else {
		fmt.Fprintf(&b, "record %s, segment %d, waiting %t for %v, generation %d, %d steps", st.Run.State, st.Segment, st.Waiting, st.Waits, st.Generation, len(st.Steps))
	}
	keys, err := jkv.ListKeys(ctx, jetstream.MetaOnly())
	if err != nil {
		fmt.Fprintf(&b, "; journal keys: %v", err)
		return b.String()
	}
	var events, claims []string
	for k := range keys.Keys() {
		switch {
		case strings.HasPrefix(k, id+".ev."):
			events = append(events, strings.TrimPrefix(k, id+"."))
		case strings.HasPrefix(k, id+".claim."):
			claims = append(claims, strings.TrimPrefix(k, id+"."))
		}
	}
	fmt.Fprintf(&b, "; %d events stored (last %v), %d claims (last %v)", len(events), events[max(len(events)-3, 0):], len(claims), claims[max(len(claims)-3, 0):])
	return b.String()
}

// wfWaitsSend sends event "tick" to workflow id once for each await it
// parks on (its cursor, as the journal's watch shows it, waiting for an
// event, each await named by its step), until ctx ends. Not once per
// segment: a segment delivered twice parks twice, the second time on the
// next await (the first consumed the event sent for it).
func wfWaitsSend(ctx context.Context, p *producer.Producer, id string, watch jetstream.KeyWatcher, seen *atomic.Value) error {
	defer watch.Stop()        //nolint:errcheck // the bench ends either way
	sent := map[string]bool{} // the awaits sent an event
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil
		case e = <-watch.Updates():
		}
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var cur struct {
			Seg     int      `json:"seg"`
			Waiting bool     `json:"waiting"`
			Waits   []string `json:"waits"`
		}
		if err := json.Unmarshal(e.Value(), &cur); err != nil {
			return fmt.Errorf("cursor of %s: %w", id, err)
		}
		seen.Store(fmt.Sprintf("cursor rev %d %s", e.Revision(), e.Value()))
		i := slices.IndexFunc(cur.Waits, func(w string) bool { return strings.Contains(w, "(event)") })
		if !cur.Waiting || i < 0 || sent[cur.Waits[i]] {
			continue
		}
		sent[cur.Waits[i]] = true
		t0 := time.Now()
		err := workflow.SendEvent(ctx, p, id, "tick", cur.Seg)
		seen.Store(fmt.Sprintf("cursor rev %d %s (sent in %s: %v)", e.Revision(), e.Value(), time.Since(t0), err))
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// wfWaitsCosts prints, for each n of sizes, the costs of one workflow of
// n waits with the worker's cache of executions on and off (sticky
// execution), never continuing and continuing as new every `every`, and
// a wait's time with the cache beside without. Never continuing, a size
// above maxPlain is not run when the sizes measured before say it would
// take more than wfWaitsBudget (wfWaitsGuess).
func wfWaitsCosts(ctx context.Context, out io.Writer, p *producer.Producer, js jetstream.JetStream, scfg streams.Config, sizes []int, every, maxPlain int) error {
	never := map[bool][]wfWaitsFigures{} // never continuing, by cache
	for _, n := range sizes {
		for _, m := range []struct {
			every  int
			cached bool
		}{{0, true}, {0, false}, {every, true}, {every, false}} {
			if m.every == 0 && n > maxPlain {
				if skip := wfWaitsGuess(never[m.cached], n, m.cached); skip != "" {
					fmt.Fprintln(out, "workflow "+skip)
					continue
				}
			}
			f, err := wfWaits(ctx, p, js, scfg, n, m.every, m.cached)
			if err != nil {
				return err
			}
			if m.every == 0 {
				never[m.cached] = append(never[m.cached], f)
			}
			fmt.Fprintln(out, "workflow "+f.String())
		}
		if on, off := last(never[true]), last(never[false]); on != nil && off != nil && on.waits == n && off.waits == n {
			fmt.Fprintf(out, "workflow %6d waits, never continuing: a wait %s with the cache, %s without (%.1fx); code entered %d against %d times, awaits executed %d against %d\n",
				n, fmtDur(per(on.took, n)), fmtDur(per(off.took, n)), float64(off.took)/float64(max(on.took, 1)), on.runs, off.runs, on.steps, off.steps)
		}
	}
	return nil
}

// wfWaitsBudget bounds the time of a run of waits never continuing that
// is larger than wfWaitsPlainMax.
const wfWaitsBudget = time.Minute

// wfWaitsGuess is the line of n waits never continuing not run, because
// measured (the sizes before, never continuing, cache on or off) say it
// would take more than wfWaitsBudget, or "" to run it. A wait's time is
// taken as linear in the waits before it, fitted to the last two measured
// (flat when it did not grow: the replay's and the event read's share
// gone).
func wfWaitsGuess(measured []wfWaitsFigures, n int, cached bool) string {
	if len(measured) == 0 {
		return ""
	}
	b := measured[len(measured)-1]
	perB, perN := per(b.took, b.waits), per(b.took, b.waits)
	how := fmt.Sprintf("a wait took %s at %d waits", fmtDur(perB), b.waits)
	if len(measured) > 1 {
		a := measured[len(measured)-2]
		perA := per(a.took, a.waits)
		if slope := float64(perB-perA) / float64(b.waits-a.waits); slope > 0 {
			perN = time.Duration(float64(perB) + slope*float64(n-b.waits))
		}
		how = fmt.Sprintf("a wait took %s at %d waits and %s at %d", fmtDur(perA), a.waits, fmtDur(perB), b.waits)
	}
	total := perN * time.Duration(n)
	if total <= wfWaitsBudget {
		return ""
	}
	mode := "cache off"
	if cached {
		mode = "cache on"
	}
	return fmt.Sprintf("%6d waits, never continuing, %s: not run: %s; so about %s a wait, %s in all (more than %s)",
		n, mode, how, fmtDur(perN), total.Round(time.Second), wfWaitsBudget)
}

// last is the last of fs, or nil.
func last(fs []wfWaitsFigures) *wfWaitsFigures {
	if len(fs) == 0 {
		return nil
	}
	return &fs[len(fs)-1]
}

// wfWaitsEvery is how often the waits bench continues as new (see
// docs/workflows.md, "When to continue as new"), and wfWaitsPlainMax the
// most waits it makes without.
const (
	wfWaitsEvery    = 100
	wfWaitsPlainMax = 1_000
)

// wfWaitsQuick are the waits measured with quick (10,000 skipped).
var wfWaitsQuick = []int{10, 100, 1_000}
