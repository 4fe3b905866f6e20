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
// every in.Every waits.
var wfWaitsDef = workflow.Define("bench.wf.waits", func(wf *workflow.Context, in wfWaitsIn) (int, error) {
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
})

// wfWaitsFigures is what one waits workflow cost.
type wfWaitsFigures struct {
	waits, every  int
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
func wfWaits(ctx context.Context, p *producer.Producer, js jetstream.JetStream, scfg streams.Config, n, every int) (wfWaitsFigures, error) {
	f := wfWaitsFigures{waits: n, every: every}
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
	if _, err := workflow.Start(ctx, p, wfWaitsDef, wfWaitsIn{Left: n, Every: every}, workflow.WithID(id)); err != nil {
		return f, err
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Minute)
	defer rcancel()
	done := make(chan error, 1)
	go func() { _, err := workflow.Result(rctx, p, wfWaitsDef, id); done <- err }()
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

// wfWaitsCosts prints the cost of one workflow that waits n times, for n
// in sizes, never continuing as new and continuing every `every` waits.
// Without continuing it runs up to maxPlain waits: each wait's replay
// grows with the waits before it, so a larger one is extrapolated from the
// last two measured (a wait's time linear in the waits before it: the
// whole quadratic).
func wfWaitsCosts(ctx context.Context, out io.Writer, p *producer.Producer, js jetstream.JetStream, scfg streams.Config, sizes []int, every, maxPlain int) error {
	var plain []wfWaitsFigures
	for _, n := range sizes {
		for _, e := range []int{0, every} {
			if e == 0 && n > maxPlain {
				fmt.Fprintln(out, "workflow "+wfWaitsExtrapolated(plain, n))
				continue
			}
			f, err := wfWaits(ctx, p, js, scfg, n, e)
			if err != nil {
				return err
			}
			if e == 0 {
				plain = append(plain, f)
			}
			fmt.Fprintln(out, "workflow "+f.String())
		}
	}
	return nil
}

// wfWaitsExtrapolated is the line of n waits never continuing, not run:
// the time a wait takes, linear in the waits before it, fitted to the last
// two of measured.
func wfWaitsExtrapolated(measured []wfWaitsFigures, n int) string {
	skip := fmt.Sprintf("%6d waits, never continuing: not run (quadratic)", n)
	if len(measured) < 2 {
		return skip
	}
	a, b := measured[len(measured)-2], measured[len(measured)-1]
	perA, perB := per(a.took, a.waits), per(b.took, b.waits)
	slope := float64(perB-perA) / float64(b.waits-a.waits)
	perN := time.Duration(float64(perB) + slope*float64(n-b.waits))
	return fmt.Sprintf("%s: a wait took %s at %d waits and %s at %d; so about %s a wait, %s in all, at %d",
		skip, fmtDur(perA), a.waits, fmtDur(perB), b.waits, fmtDur(perN), (perN * time.Duration(n)).Round(time.Second), n)
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
