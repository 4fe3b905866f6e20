package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StepKind says what a step does.
type StepKind string

const (
	// KindStep is an inline step (Step): code run in the segment.
	KindStep StepKind = "step"
	// KindCall is a function call (Call): a child run on the fleet.
	KindCall StepKind = "call"
	// KindChild is a child workflow (RunChild, StartChild).
	KindChild StepKind = "child"
	// KindSleep is a durable sleep (Sleep, SleepUntil).
	KindSleep StepKind = "sleep"
	// KindEvent is an await of an event (AwaitEvent).
	KindEvent StepKind = "event"
	// KindPatch is a patch marker (Patched).
	KindPatch StepKind = "patch"
	// KindUpdate is an await of an update (AwaitUpdate).
	KindUpdate StepKind = "update"
)

// StepState is a step's state in the journal.
type StepState string

const (
	// StepStarted: an at-most-once inline step has started; no outcome yet.
	StepStarted StepState = "started"
	// StepWaiting: the workflow waits for this step (a child run, a
	// time, an event).
	StepWaiting StepState = "waiting"
	// StepDone: the step succeeded; Result holds its result.
	StepDone StepState = "done"
	// StepFailed: the step failed; Error says why.
	StepFailed StepState = "failed"
)

// Error codes a journaled step error keeps, so that errors.Is works on
// replay.
const (
	codeEventTimeout = "eventTimeout"
	codeWorkerLost   = "workerLost"
	codeCanceled     = "canceled"
	codeTooLarge     = "tooLarge"
	codeArgsTooLarge = "argsTooLarge"
	codeBadArgs      = "badArgs"
	codeInvalidName  = "invalidName"
	codeInactive     = "definitionInactive"
)

// Waits is what a waiting step waits for.
type Waits struct {
	// Run is the child run (function call or child workflow).
	Run string `json:"run,omitempty"`
	// Until is the wake time of a sleep or the deadline of an await.
	Until time.Time `json:"until,omitzero"`
	// Event is the awaited event's name.
	Event string `json:"event,omitempty"`
	// Seq is the revision of the event an await consumed.
	Seq uint64 `json:"seq,omitempty"`
	// Update is the unique part of the key of the update an AwaitUpdate
	// handled: its answer's key ends in it.
	Update string `json:"update,omitempty"`
}

// Entry is one step of a workflow's journal (key <workflow id>.s.<step id>).
type Entry struct {
	Step      string          `json:"step"`
	Name      string          `json:"name"`
	Kind      StepKind        `json:"kind"`
	State     StepState       `json:"state"`
	Attempts  int             `json:"attempts,omitempty"`
	Started   time.Time       `json:"started,omitzero"`
	Completed time.Time       `json:"completed,omitzero"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     string          `json:"error,omitempty"`
	Code      string          `json:"code,omitempty"`
	Waits     *Waits          `json:"waits,omitempty"`
	// Segment is the segment that wrote the entry last.
	Segment  int    `json:"segment"`
	Revision uint64 `json:"-"`
}

func (e *Entry) ended() bool { return e.State == StepDone || e.State == StepFailed }

// cursor is the workflow's place (key <workflow id>.wf): the segment that
// runs or ran last, and whether it ended waiting. A wake creates segment
// Seg+1 only when Waiting is set, so that two segments never run at once.
type cursor struct {
	Seg     int      `json:"seg"`
	Waiting bool     `json:"waiting,omitempty"`
	Done    bool     `json:"done,omitempty"`
	Waits   []string `json:"waits,omitempty"`
	// Gen is the workflow's run (from 1; 0 is 1): ContinueAsNew starts the
	// next, whose steps' ids begin with "g<Gen>." and whose input is
	// Input (the record's args hold the first run's).
	Gen   int             `json:"gen,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	rev   uint64
}

// gen is the cursor's run, from 1.
func (c *cursor) gen() int {
	if c == nil {
		return 1
	}
	return max(c.Gen, 1)
}

// genPath is the step id prefix of run g's main branch ("" for the
// first).
func genPath(g int) string {
	if g <= 1 {
		return ""
	}
	return "g" + strconv.Itoa(g)
}

// inGen reports whether step id belongs to run g.
func inGen(id string, g int) bool {
	if g <= 1 {
		return !strings.HasPrefix(id, "g")
	}
	return strings.HasPrefix(id, genPath(g)+".")
}

// generation is steps without those of earlier runs (which a
// ContinueAsNew purges, but may not have yet).
func generation(steps map[string]*Entry, g int) map[string]*Entry {
	for id := range steps {
		if !inGen(id, g) {
			delete(steps, id)
		}
	}
	return steps
}

// event is a stored event (key <workflow id>.ev.<name>.<unique>).
type event struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Sent    time.Time       `json:"sent"`
	seq     uint64
	key     string
}

func stepKey(wf, step string) string     { return wf + ".s." + step }
func cursorKey(wf string) string         { return wf + ".wf" }
func eventPrefix(wf, name string) string { return wfwire.EventPrefix(wf, name) }
func claimKey(wf string, seq uint64) string {
	return wf + ".claim." + strconv.FormatUint(seq, 10)
}

// journal is the journal bucket.
type journal struct {
	kv     jetstream.KeyValue
	js     jetstream.JetStream
	bucket string

	mu sync.Mutex
	st jetstream.Stream // the bucket's stream, looked up once (stream)
}

// stream is the journal bucket's stream (purges, wildcard reads).
func (j *journal) stream(ctx context.Context) (jetstream.Stream, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.st != nil {
		return j.st, nil
	}
	st, err := j.js.Stream(ctx, streams.KVStream(j.bucket))
	if err != nil {
		return nil, fmt.Errorf("workflow: journal stream: %w", err)
	}
	j.st = st
	return st, nil
}

// journalSlot is a producer's journal handle, opened once (opening one
// asks the server for the bucket's stream).
type journalSlot struct {
	mu sync.Mutex
	jr *journal
}

type journalSlotKey struct{}

// openJournal returns p's journal bucket, opened on first use.
func openJournal(ctx context.Context, p *producer.Producer) (*journal, error) {
	d := engine.Of(p)
	slot := d.Value(journalSlotKey{}, func() any { return &journalSlot{} }).(*journalSlot)
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.jr != nil {
		return slot.jr, nil
	}
	b, err := d.JetStream().KeyValue(ctx, d.Streams().JournalBucket())
	if err != nil {
		return nil, fmt.Errorf("workflow: journal bucket %s: %w", d.Streams().JournalBucket(), err)
	}
	slot.jr = &journal{kv: b, js: d.JetStream(), bucket: d.Streams().JournalBucket()}
	return slot.jr, nil
}

// snapshot is what a journal holds of one workflow when it is read.
type snapshot struct {
	steps  map[string]*Entry
	claims map[uint64]string
	cur    *cursor
	end    []byte // the error code of a failed workflow (endKey)
}

// load reads everything kept under workflow id, with one watch.
func (j *journal) load(ctx context.Context, wf string) (*snapshot, error) {
	s := &snapshot{steps: map[string]*Entry{}, claims: map[uint64]string{}}
	err := j.scan(ctx, wf+".>", func(e jetstream.KeyValueEntry) error {
		k := strings.TrimPrefix(e.Key(), wf+".")
		switch {
		case strings.HasPrefix(k, "s."):
			en, err := decodeEntry(e.Key(), strings.TrimPrefix(k, "s."), e.Value())
			if err != nil {
				return err
			}
			en.Revision = e.Revision()
			s.steps[en.Step] = en
		case strings.HasPrefix(k, "claim."):
			seq, _ := strconv.ParseUint(strings.TrimPrefix(k, "claim."), 10, 64)
			s.claims[seq] = string(e.Value())
		case k == "wf":
			c, err := decodeCursor(e.Key(), e.Value())
			if err != nil {
				return err
			}
			c.rev = e.Revision()
			s.cur = c
		case k == "end":
			s.end = e.Value()
		}
		return nil
	})
	return s, err
}

// scan visits the current entries of keys matching filter, in revision order.
//
// The watch behind it is a consumer, which the server may place on a
// replica behind its leader: a journal read there would miss a step that
// ended (it would run again) or an event sent (the workflow would wait for
// it forever). So it is read until it holds the leader's last revision
// under filter (kv.ReadCaughtUp; 51 reads 20 ms apart, then the segment is
// retried). The leader's answer also ends the read: nothing is read when it
// holds nothing under filter, and the read stops once it has seen the
// leader's last revision (a watch's count of what it will deliver, taken
// when it starts, may count entries purged meanwhile: the watch would wait
// for them). A read counts only when the leader's last revision is the
// same after it as before it (movedSince): else it is read again.
func (j *journal) scan(ctx context.Context, filter string, visit func(jetstream.KeyValueEntry) error) error {
	return j.scanFrom(ctx, filter, 0, visit)
}

// scanFrom is scan of the entries written at revision from or later
// (0: all); a key deleted or purged since is left out. When the leader
// holds nothing under filter from there, it reads nothing (one request).
func (j *journal) scanFrom(ctx context.Context, filter string, from uint64, visit func(jetstream.KeyValueEntry) error) error {
	var entries []jetstream.KeyValueEntry
	err := kv.ReadCaughtUp(ctx, j.js, streams.KVStream(j.bucket), streams.KVSubject(j.bucket, filter), 51, 20*time.Millisecond,
		func(want uint64, known bool) (seen uint64, err error) {
			if known && (want == 0 || want < from) {
				entries = nil
				return want, nil
			}
			entries, seen, err = j.read(ctx, filter, want, from)
			if err == nil && known && j.movedSince(ctx, filter, want) {
				return 0, nil // a key rewritten during the read may be left out
			}
			return seen, err
		})
	if errors.Is(err, kv.ErrStaleRead) {
		return jetflow.RetryAfter(100*time.Millisecond, fmt.Errorf("%w: %w", errStaleJournal, err))
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := visit(e); err != nil {
			return err
		}
	}
	return nil
}

// movedSince reports whether the journal's leader holds a revision under
// filter other than want (or cannot say): something was written (or
// purged) since the leader named want. A watch may then have left a key
// out: a key rewritten after want comes after it, past where the read
// stops (seen: a query answered from a workflow's first run, its cursor,
// moved meanwhile, left out).
func (j *journal) movedSince(ctx context.Context, filter string, want uint64) bool {
	m, err := kv.LastFromLeader(ctx, j.js, streams.KVStream(j.bucket), streams.KVSubject(j.bucket, filter))
	return err != nil || m.Sequence != want
}

// errStaleJournal: every read of the journal came from a replica behind the
// stream's leader.
var errStaleJournal = errors.New("workflow: journal read behind its leader")

// read returns the current entries of keys matching filter, deletes left
// out, and the highest revision it saw, deletes included. It ends at the
// watch's end of its initial values, or once it has seen revision until
// (0: no such bound); a watch quiet for readStall is an error (the read is
// retried).
func (j *journal) read(ctx context.Context, filter string, until, from uint64) ([]jetstream.KeyValueEntry, uint64, error) {
	var opts []jetstream.WatchOpt
	if from > 0 {
		opts = append(opts, jetstream.ResumeFromRevision(from))
	}
	w, err := j.kv.Watch(ctx, filter, opts...)
	if err != nil {
		return nil, 0, fmt.Errorf("workflow: read journal: %w", err)
	}
	defer func() { _ = w.Stop() }() // an unsubscribe: it fails only on a connection gone
	var out []jetstream.KeyValueEntry
	seen := from - min(from, 1) // read before: below from
	// From a revision on, the watch gives every write, not each key's
	// last: a key deleted or purged since is dropped.
	gone := map[string]bool{}
	stall := time.NewTimer(readStall)
	defer stall.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-stall.C:
			return nil, 0, jetflow.RetryAfter(100*time.Millisecond, fmt.Errorf("workflow: journal read of %s: no entry for %s, %d read", filter, readStall, len(out)))
		case e, ok := <-w.Updates():
			if !ok {
				return nil, 0, errors.New("workflow: journal watch closed")
			}
			if e == nil {
				return dropGone(out, gone), seen, nil
			}
			stall.Reset(readStall)
			seen = max(seen, e.Revision())
			if e.Operation() == jetstream.KeyValuePut {
				out = append(out, e)
			} else if from > 0 {
				gone[e.Key()] = true
			}
			if until > 0 && seen >= until {
				return dropGone(out, gone), seen, nil
			}
		}
	}
}

// dropGone returns entries without those of keys deleted after them
// (gone: read from a revision on, in revision order).
func dropGone(entries []jetstream.KeyValueEntry, gone map[string]bool) []jetstream.KeyValueEntry {
	if len(gone) == 0 {
		return entries
	}
	last := map[string]uint64{}
	for _, e := range entries {
		last[e.Key()] = e.Revision()
	}
	out := entries[:0]
	for _, e := range entries {
		if !gone[e.Key()] && last[e.Key()] == e.Revision() {
			out = append(out, e)
		}
	}
	return out
}

// readStall is how long a journal read waits for the next entry of its
// watch before it gives up (and its caller is retried).
const readStall = 5 * time.Second

// events reads the events named name sent to workflow wf after revision
// after (the floor: eventFloor), oldest first.
func (j *journal) events(ctx context.Context, wf, name string, after uint64) ([]event, error) {
	return j.eventsAt(ctx, eventPrefix(wf, name), after)
}

// updates reads the updates named name sent to workflow wf after revision
// after, oldest first.
func (j *journal) updates(ctx context.Context, wf, name string, after uint64) ([]event, error) {
	return j.eventsAt(ctx, wfwire.UpdatePrefix(wf, name), after)
}

// eventsAt reads the events (or updates) under prefix stored after
// revision after, oldest first.
func (j *journal) eventsAt(ctx context.Context, prefix string, after uint64) ([]event, error) {
	var out []event
	var from uint64 // all of them
	if after > 0 {
		from = after + 1
	}
	err := j.scanFrom(ctx, prefix+"*", from, func(e jetstream.KeyValueEntry) error {
		var ev event
		if json.Unmarshal(e.Value(), &ev) != nil {
			return nil
		}
		ev.seq, ev.key = e.Revision(), e.Key()
		out = append(out, ev)
		return nil
	})
	sort.Slice(out, func(a, b int) bool { return out[a].seq < out[b].seq })
	return out, err
}

// cursorOf reads the cursor of wf (nil when there is none).
func (j *journal) cursorOf(ctx context.Context, wf string) (*cursor, error) {
	e, err := j.kv.Get(ctx, cursorKey(wf))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workflow %s: cursor: %w", wf, err)
	}
	c, err := decodeCursor(e.Key(), e.Value())
	if err != nil {
		return nil, err
	}
	c.rev = e.Revision()
	return c, nil
}

// latestCursor reads the cursor of wf from the journal stream's leader (nil
// when there is none): cursorOf's direct get may be answered by a replica
// that is behind. Without permission to ask the leader, it is the direct
// get's answer.
func (j *journal) latestCursor(ctx context.Context, wf string) (*cursor, error) {
	m, err := kv.LastFromLeader(ctx, j.js, streams.KVStream(j.bucket), streams.KVSubject(j.bucket, cursorKey(wf)))
	switch {
	case errors.Is(err, nats.ErrPermissionViolation):
		return j.cursorOf(ctx, wf)
	case errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && kv.IsMarker(m.Header):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("workflow %s: cursor: %w", wf, err)
	}
	c, err := decodeCursor(cursorKey(wf), m.Data)
	if err != nil {
		return nil, err
	}
	c.rev = m.Sequence
	return c, nil
}

// putCursor writes c over revision c.rev (0: create); false when another
// writer came first.
func (j *journal) putCursor(ctx context.Context, wf string, c *cursor) (bool, error) {
	b, _ := json.Marshal(c)
	var rev uint64
	var err error
	if c.rev == 0 {
		rev, err = j.kv.Create(ctx, cursorKey(wf), b)
	} else {
		rev, err = j.kv.Update(ctx, cursorKey(wf), b, c.rev)
	}
	if err != nil {
		if isWrongRev(err) {
			return false, nil
		}
		return false, fmt.Errorf("workflow %s: cursor: %w", wf, err)
	}
	c.rev = rev
	return true, nil
}

// putEntry writes e over revision e.Revision (0: create). When another
// writer came first it returns the stored entry instead. An entry larger
// than entryLimit is ErrResultTooLarge, never written.
func (j *journal) putEntry(ctx context.Context, wf string, e *Entry) (*Entry, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: step %s: %w", wf, e.Step, err)
	}
	if limit := entryLimit(j.js.Conn()); len(b) > limit {
		return nil, fmt.Errorf("%w: workflow %s: journal entry of step %s: %d bytes, more than an entry holds (%d)",
			ErrResultTooLarge, wf, e.Step, len(b), limit)
	}
	key := stepKey(wf, e.Step)
	ctx, cancel := context.WithTimeout(ctx, entryWriteFor)
	defer cancel()
	for delay := 25 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		rev, err := j.writeEntry(ctx, key, b, e.Revision)
		switch {
		case err == nil:
			e.Revision = rev
			return e, nil
		case !isWrongRev(err):
			return nil, fmt.Errorf("workflow %s: journal step %s: %w", wf, e.Step, err)
		}
		stored, again, err := j.settleEntry(ctx, wf, e, key, b)
		if !again {
			return stored, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("workflow %s: journal step %s: %w (%v)", wf, e.Step, kv.ErrUnconfirmed, err)
		case <-t.C:
		}
	}
}

// entryWriteFor bounds how long a journal write whose answer was lost is
// written again (a server restart, a leader election).
const entryWriteFor = 2 * time.Minute

// writeEntry writes b at key if its revision is still rev (0: create). A
// write whose answer was lost (kv.Transient) is written again, as a run's
// outcome is, until entryWriteFor or ctx ends: a step that finished is not
// recorded as lost because its result write met a server restart. A try
// that landed makes the next one refused: settleEntry finds it.
func (j *journal) writeEntry(ctx context.Context, key string, b []byte, rev uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, entryWriteFor)
	defer cancel()
	delay := 25 * time.Millisecond
	for {
		// One try waits for its answer as one request does
		// (kv.OneRequest), not for the whole entryWriteFor.
		tctx, tcancel := kv.OneRequest(ctx)
		var n uint64
		var err error
		if rev == 0 {
			n, err = j.kv.Create(tctx, key, b)
		} else {
			n, err = j.kv.Update(tctx, key, b, rev)
		}
		tcancel()
		if err == nil || !kv.Transient(err) || ctx.Err() != nil {
			return n, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, err
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// settleEntry settles a journal write of e (b, at key) refused as changed
// meanwhile, by the one rule for writes whose reply is lost (kv.Settle), on
// the word of the journal stream's leader (a replica behind must not decide
// it): the stored entry is this very write (it landed, its answer lost, and
// a try again was refused), or another writer's, which stands and is
// returned; again reports an entry to write again: as the write expected
// it (a refusal from a leader judging against an uncommitted write), or
// unread (err says why).
func (j *journal) settleEntry(ctx context.Context, wf string, e *Entry, key string, b []byte) (stored *Entry, again bool, err error) {
	data, rev, err := j.leaderGet(ctx, key)
	if err == nil {
		// What a leader cut off from its peers holds may yet be lost.
		var ok bool
		if ok, err = kv.LeaderHasQuorum(ctx, j.js, streams.KVStream(j.bucket)); err == nil && !ok {
			err = kv.ErrNoQuorum
		}
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrKeyNotFound) {
		err = fmt.Errorf("%w: %w", kv.ErrNotFound, err)
	}
	switch kv.Settle(e.Revision, kv.ReadBack{Err: err, Leader: true, Rev: rev, Same: err == nil && bytes.Equal(data, b)}) {
	case kv.Landed:
		e.Revision = rev
		return e, false, nil
	case kv.Superseded:
		if stored, err = decodeEntry(key, e.Step, data); err != nil {
			return nil, false, err
		}
		stored.Revision = rev
		return stored, false, nil
	case kv.NotLanded:
		return nil, true, fmt.Errorf("workflow %s: journal step %s: refused, the entry as the write expected it", wf, e.Step)
	case kv.Gone:
		return nil, false, fmt.Errorf("workflow %s: journal step %s: %w", wf, e.Step, err)
	}
	return nil, true, fmt.Errorf("workflow %s: journal step %s: %w", wf, e.Step, err)
}

// leaderGet reads key from the journal stream's leader, or by a direct get
// where the connection may not ask the leader.
func (j *journal) leaderGet(ctx context.Context, key string) ([]byte, uint64, error) {
	m, err := kv.LastFromLeader(ctx, j.js, streams.KVStream(j.bucket), streams.KVSubject(j.bucket, key))
	if errors.Is(err, nats.ErrPermissionViolation) {
		e, gerr := j.kv.Get(ctx, key)
		if gerr != nil {
			return nil, 0, gerr
		}
		return e.Value(), e.Revision(), nil
	}
	if err != nil {
		return nil, 0, err
	}
	return m.Data, m.Sequence, nil
}

// claim makes step the consumer of event seq; false when another await
// has it.
func (j *journal) claim(ctx context.Context, wf string, seq uint64, step string) (bool, error) {
	_, err := j.kv.Create(ctx, claimKey(wf, seq), []byte(step))
	if err == nil {
		return true, nil
	}
	if !isWrongRev(err) {
		return false, fmt.Errorf("workflow %s: claim event %d: %w", wf, seq, err)
	}
	e, gerr := j.kv.Get(ctx, claimKey(wf, seq))
	if gerr != nil {
		return false, fmt.Errorf("workflow %s: claim event %d: %w", wf, seq, gerr)
	}
	return string(e.Value()) == step, nil
}

func isWrongRev(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// stepLess orders step ids in program order: "2" < "3" < "3.1" < "10".
func stepLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, _ := strconv.Atoi(as[i])
		y, _ := strconv.Atoi(bs[i])
		if x != y {
			return x < y
		}
	}
	return len(as) < len(bs)
}

// entryLimit is the most bytes a journal entry (or an event) takes: as
// much as a run's args (kv.ArgsLimit), which leaves room for the write's
// subject and headers within the server's max payload.
func entryLimit(nc *nats.Conn) int {
	if max := nc.MaxPayload(); max > 0 {
		return kv.ArgsLimit(max)
	}
	return math.MaxInt // not known: the server decides
}

// badJournalError is a journal entry or cursor that cannot be read or
// makes no sense (not what this package wrote): retrying will not change
// it, so the workflow fails with it. It matches jetflow.ErrBadRecord.
type badJournalError struct{ err error }

func (e *badJournalError) Error() string { return e.err.Error() }
func (e *badJournalError) Unwrap() error { return e.err }

// badJournal is a badJournalError about journal key key.
func badJournal(key string, format string, args ...any) error {
	return &badJournalError{fmt.Errorf("%w: journal key %q: %s", jetflow.ErrBadRecord, key, fmt.Sprintf(format, args...))}
}

// isBadJournal reports whether err is (or wraps) a badJournalError.
func isBadJournal(err error) bool {
	var b *badJournalError
	return errors.As(err, &b)
}

// decodeEntry decodes and checks the journal entry of step stored under key.
func decodeEntry(key, step string, b []byte) (*Entry, error) {
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, badJournal(key, "%v", err)
	}
	if e.Step != step {
		return nil, badJournal(key, "entry of step %q", e.Step)
	}
	switch e.Kind {
	case KindStep, KindCall, KindChild, KindSleep, KindEvent, KindPatch, KindUpdate:
	default:
		return nil, badJournal(key, "step kind %q", e.Kind)
	}
	switch e.State {
	case StepDone, StepFailed:
	case StepStarted:
		if e.Kind != KindStep {
			return nil, badJournal(key, "%s step %s", e.Kind, e.State)
		}
	case StepWaiting:
		w := e.Waits
		switch {
		case w == nil:
			return nil, badJournal(key, "waiting step without what it waits for")
		case (e.Kind == KindCall || e.Kind == KindChild) && w.Run == "",
			e.Kind == KindSleep && w.Until.IsZero(),
			(e.Kind == KindEvent || e.Kind == KindUpdate) && w.Event == "",
			e.Kind == KindStep || e.Kind == KindPatch:
			return nil, badJournal(key, "waiting %s step, waits %+v", e.Kind, *w)
		}
	default:
		return nil, badJournal(key, "step state %q", e.State)
	}
	return &e, nil
}

// decodeCursor decodes and checks the cursor stored under key.
func decodeCursor(key string, b []byte) (*cursor, error) {
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, badJournal(key, "%v", err)
	}
	if c.Seg < 1 {
		return nil, badJournal(key, "cursor at segment %d", c.Seg)
	}
	return &c, nil
}
