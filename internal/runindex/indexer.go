package runindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/internal/pace"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Header names of an index entry (its body is empty).
const (
	// HeaderRun is the run id.
	HeaderRun = "Jetflow-Run"
	// HeaderRev is the runs stream sequence (the record's revision) of the
	// write the entry stands for.
	HeaderRev = "Jetflow-Rev"
)

// Indexer follows the runs stream and keeps the run index: an entry per
// record write (but those a later write of their run replaced before they
// were sent) on <prefix>.idx.<state>.<function>, and the counts per
// function and state, checkpointed with the runs stream sequence they
// reflect. One runs per deployment (the scheduler runs it on its leader).
type Indexer struct {
	// Every is the checkpoint period. Default 1 s.
	Every time.Duration
	// Log. Default: discard.
	Log *slog.Logger
	// Name says who indexes, in the checkpoint.
	Name string
	// RecountRate bounds a recount (a first term, or one whose checkpoint
	// cannot be carried on), in records read a second, so that it takes
	// a small share of the machine beside the work that is due. Default:
	// no limit.
	RecountRate int

	js  jetstream.JetStream
	cfg streams.Config
	// shape is cfg as given: its Replicas and Storage, zero to keep those
	// of an existing index stream (ProvisionIndex).
	shape streams.Config
	pfx   string
	runs  string // runs stream

	mu      sync.Mutex
	live    map[string]Live      // non-terminal runs whose writes this term processed
	seeded  map[string]Live      // non-terminal runs seen by a full scan, not processed since
	notify  map[string]kv.Header // terminal runs with an on-complete callback, for the repair sweep
	names   map[string]string    // states and functions, shared (intern)
	stats   Stats
	ackWait time.Duration
}

// Live is what the indexer knows of a run that has not ended.
type Live struct {
	ID       string
	State    jetflow.State
	Function string
	Due      time.Time
}

// Stats counts what the indexer did.
type Stats struct {
	// Seq is the runs stream sequence processed last.
	Seq uint64
	// Checkpoints stored, Rebuilds started (recounts of every record).
	Checkpoints, Rebuilds int64
	// CaughtUp is true once the indexer has read to the end of the runs
	// stream in this term (and the counts are not being rebuilt), until
	// the term ends.
	CaughtUp bool
}

// New returns an indexer of the runs bucket of cfg. cfg.Replicas zero keeps
// the replicas and storage of an existing index stream: a scheduler started
// with the zero Config never scales a cluster's R3 index down to R1.
func New(js jetstream.JetStream, cfg streams.Config) *Indexer {
	shape := cfg
	cfg = cfg.WithDefaults()
	return &Indexer{js: js, cfg: cfg, shape: shape, pfx: streams.KVSubject(cfg.RunsBucket(), ""),
		runs: streams.KVStream(cfg.RunsBucket()), ackWait: 10 * time.Second}
}

// Stats returns the indexer's counters.
func (ix *Indexer) Stats() Stats {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.stats
}

// Candidates returns the runs in state pending or inProgress that the
// indexer knows of and that match (all when match is nil): those written
// since its term's checkpoint and those a full scan handed it (Seed). The
// repair sweep reads them instead of every record; matching here, it
// copies only those it acts on (runs waiting far ahead are most).
func (ix *Indexer) Candidates(match func(Live) bool) []Live {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var out []Live
	for _, m := range [...]map[string]Live{ix.live, ix.seeded} {
		for _, l := range m {
			if match == nil || match(l) {
				out = append(out, l)
			}
		}
	}
	return out
}

// kept returns l as the indexer holds it for long: its id copied out of
// the message it came from (a substring would keep the whole message's
// buffer), its state and function shared with every other run's (one
// string each, up to maxNames). With the map's own cost, a run not ended
// costs the indexer about 150 bytes (docs/scaling.md).
func (ix *Indexer) kept(l Live) Live {
	l.ID = strings.Clone(l.ID)
	l.State = jetflow.State(ix.intern(string(l.State)))
	l.Function = ix.intern(l.Function)
	return l
}

// maxNames bounds the strings the indexer shares (intern).
const maxNames = 10_000

// intern returns the indexer's copy of v. Called with ix.mu held.
func (ix *Indexer) intern(v string) string {
	if c, ok := ix.names[v]; ok {
		return c
	}
	c := strings.Clone(v)
	if ix.names == nil {
		ix.names = map[string]string{}
	}
	if len(ix.names) < maxNames {
		ix.names[c] = c
	}
	return c
}

// TakeNotify returns the terminal runs with an on-complete callback seen
// since the last call (the repair sweep checks that their callback ran)
// and forgets them; the sweep gives back those it must look at again.
func (ix *Indexer) TakeNotify() []kv.Header {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := make([]kv.Header, 0, len(ix.notify))
	for _, h := range ix.notify {
		out = append(out, h)
	}
	ix.notify = nil
	return out
}

// GiveNotify gives back runs of TakeNotify to look at again.
func (ix *Indexer) GiveNotify(hs []kv.Header) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.notify == nil {
		ix.notify = map[string]kv.Header{}
	}
	for _, h := range hs {
		ix.notify[h.ID] = h
	}
}

// Forget drops run id from the candidates (the repair sweep found it
// ended).
func (ix *Indexer) Forget(id string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	delete(ix.seeded, id)
}

// Seed hands the indexer the non-terminal runs of a full scan, so that
// Candidates holds every run that has not ended.
func (ix *Indexer) Seed(hs []kv.Header) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.seeded == nil {
		ix.seeded = map[string]Live{}
	}
	for _, h := range hs {
		if h.State.Terminal() || hasLive(ix.live, h.ID) {
			continue
		}
		l := ix.kept(Live{ID: h.ID, State: h.State, Function: h.Function, Due: h.Due})
		ix.seeded[l.ID] = l
	}
}

func hasLive(m map[string]Live, id string) bool { _, ok := m[id]; return ok }

// errRebuild: the counts cannot be carried on exactly (a run changed twice
// while no indexer read it); they are recounted from every record.
var errRebuild = errors.New("runindex: counts must be rebuilt")

// Run indexes until ctx ends (one leadership term). It resumes from the
// checkpoint, or recounts every record when there is none or when the
// checkpoint cannot be carried on exactly.
func (ix *Indexer) Run(ctx context.Context) error {
	if ix.Every <= 0 {
		ix.Every = time.Second
	}
	if ix.Log == nil {
		ix.Log = slog.New(slog.DiscardHandler)
	}
	for {
		err := natsperm.Do(ctx, ix.js.Conn(), func(ctx context.Context) error {
			return streams.ProvisionIndex(ctx, ix.js, ix.shape)
		}, "$JS.API.")
		if err == nil {
			break
		}
		if _, serr := ix.js.Stream(ctx, ix.cfg.IndexStream()); serr == nil {
			// The stream is there, but this user may not update its
			// configuration (an earlier version's: a longer duplicate
			// window, which only costs the server memory). Index with it;
			// the admin's Provision updates it.
			ix.Log.Warn("run index: the index stream's configuration could not be updated; indexing with it", "error", err)
			break
		}
		// A user without the rights to create the index stream (the
		// admin's Provision creates it) waits for it: readers meanwhile
		// read every record.
		ix.Log.Warn("run index: no index stream; listings and counts read every record", "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Minute):
		}
	}
	rebuild := false
	for ctx.Err() == nil {
		err := ix.term(ctx, rebuild)
		// Between terms nothing is followed: not caught up until the next
		// term has read to the end (a sweep reads every record meanwhile).
		ix.setCaughtUp(false)
		if errors.Is(err, errRebuild) {
			ix.Log.Info("run index: recounting every record", "reason", err)
			rebuild = true
			continue
		}
		if err != nil && ctx.Err() == nil {
			ix.Log.Warn("run index restarting", "error", err)
			wait := time.Second
			if errors.Is(err, nats.ErrPermissionViolation) {
				wait = time.Minute
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			rebuild = false
			continue
		}
	}
	return ctx.Err()
}

// state is one pass: the counts, and the runs it counted as not ended.
type state struct {
	cp      Checkpoint
	base    uint64 // counts at start reflect every write <= base
	rebuild bool   // counting from nothing
	start   uint64 // rebuild: last sequence of the stream at its start
	at      time.Time
	began   time.Time // the term's start, and the checkpoints it wrote: their Nats-Msg-Id
	cps     int
	// served is the checkpoint readers get while the counts are rebuilt:
	// the last exact one, marked.
	served *Checkpoint
	// pend is the entries not published yet.
	pend staged
}

// term is one leadership term of the indexer: it marks the term in the
// index, reads the checkpoint (or recounts from nothing when rebuild is
// set or the checkpoint cannot serve), then follows the runs stream from
// the checkpoint, counting each write and storing its index entry, with a
// checkpoint every Every.
func (ix *Indexer) term(ctx context.Context, rebuild bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // also ends a delivery blocked on msgs when the term returns
	js := ix.js
	idx, err := ix.indexStream(ctx)
	if err != nil {
		return err
	}
	began := time.Now()
	markerSeq, markerID, err := ix.markTerm(ctx, idx, began)
	if err != nil {
		return err
	}
	ents, err := newEntries(js.Conn(), 4096, markerID, ix.ackWait)
	if err != nil {
		return err
	}
	defer ents.close()
	rs, err := js.Stream(ctx, ix.runs)
	if err != nil {
		return err
	}
	st, err := ix.begin(ctx, rs, idx, markerSeq, rebuild, began)
	if err != nil {
		return err
	}
	msgs, stop, err := ix.follow(ctx, rs, st.cp.Seq)
	if err != nil {
		return err
	}
	defer stop()
	defer ix.leave(ctx, ents, st)
	caughtUp := rs.CachedInfo().State.LastSeq <= st.cp.Seq
	if caughtUp && st.rebuild {
		st.cp.Rebuilding = false
	}
	ix.setCaughtUp(caughtUp && !st.cp.Rebuilding)
	return ix.consume(ctx, ents, st, msgs)
}

// indexStream returns the index stream; one deleted since Run provisioned
// it is made again (if this user may), the counts and entries then rebuilt
// from nothing.
func (ix *Indexer) indexStream(ctx context.Context) (jetstream.Stream, error) {
	js := ix.js
	idx, err := js.Stream(ctx, ix.cfg.IndexStream())
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return idx, err
	}
	err = natsperm.Do(ctx, js.Conn(), func(ctx context.Context) error {
		return streams.ProvisionIndex(ctx, js, ix.shape)
	}, "$JS.API.")
	if err != nil {
		return nil, err
	}
	return js.Stream(ctx, ix.cfg.IndexStream())
}

// markTerm stores the marker that starts the term's chain, right after the
// index's last message as read from its leader (expected last sequence):
// the entries resume after the last one before the marker (resumePoint).
// It returns the marker's sequence and message id.
func (ix *Indexer) markTerm(ctx context.Context, idx jetstream.Stream, began time.Time) (uint64, string, error) {
	marker := nats.NewMsg(ix.cfg.IndexTermSubject())
	markerID := fmt.Sprintf("term-%s-%d", ix.Name, began.UnixNano())
	marker.Header.Set(jetstream.MsgIDHeader, markerID)
	ack, err := ix.js.PublishMsg(ctx, marker, jetstream.WithExpectLastSequence(idx.CachedInfo().State.LastSeq))
	if err != nil {
		return 0, "", fmt.Errorf("runindex: term marker: %w", err)
	}
	return ack.Sequence, markerID, nil
}

// begin is the term's first state: the checkpoint's counts, or nothing to
// recount from (rebuild, no checkpoint, one of a recount, or one of
// another retention), with the entries resuming after the last one stored
// before the term's marker at markerSeq.
func (ix *Indexer) begin(ctx context.Context, rs, idx jetstream.Stream, markerSeq uint64, rebuild bool, began time.Time) (*state, error) {
	var st state
	cp, err := ReadCheckpoint(ctx, ix.js, ix.cfg)
	switch {
	case errors.Is(err, ErrNoCheckpoint):
		rebuild = true
	case err != nil:
		return nil, err
	case cp.Rebuilding, cp.Retention != ix.cfg.Retention:
		rebuild = true
	default:
		st.cp = *cp
	}
	if rebuild {
		st = state{rebuild: true, start: rs.CachedInfo().State.LastSeq}
		if cp != nil {
			st.cp.IndexSeq = cp.IndexSeq
			old := *cp
			old.Rebuilding = true
			st.served = &old
		}
		ix.mu.Lock()
		ix.stats.Rebuilds++
		ix.mu.Unlock()
	}
	// Entries resume after the last one stored: the index holds every
	// entry up to it, in order, and none after (entries.go).
	if rev, ok, err := ix.resumePoint(ctx, idx, markerSeq); err != nil {
		return nil, err
	} else if ok {
		st.cp.IndexSeq = rev
	}
	st.at = st.cp.At
	st.began = began
	st.base = st.cp.Seq
	st.cp.Rebuilding = rebuild
	st.cp.Leader = ix.Name
	st.cp.Retention = ix.cfg.Retention
	st.cp.Width = SlotWidth(ix.cfg.Retention)
	if st.cp.Functions == nil {
		st.cp.Functions = map[string]*FunctionCounts{}
	}
	ix.mu.Lock()
	ix.live = map[string]Live{}
	ix.stats.CaughtUp = false
	ix.stats.Seq = st.cp.Seq
	ix.mu.Unlock()
	return &st, nil
}

// follow consumes the headers of the runs stream's writes after seq (all
// when 0) into the returned channel, until stop.
func (ix *Indexer) follow(ctx context.Context, rs jetstream.Stream, seq uint64) (<-chan jetstream.Msg, func(), error) {
	occ := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{ix.pfx + ">"},
		HeadersOnly:    true,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if seq > 0 {
		occ.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		occ.OptStartSeq = seq + 1
	}
	if kv.WholeStream(rs.CachedInfo().Config, occ.FilterSubjects[0]) {
		occ.FilterSubjects = nil // the same messages, read without walking every key
	}
	c, err := rs.OrderedConsumer(ctx, occ)
	if err != nil {
		return nil, nil, err
	}
	msgs := make(chan jetstream.Msg, 4096)
	cc, err := c.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(2048),
		// nats.go can wait for messages no pull request will bring until
		// two heartbeats go missing (see worker's pullHeartbeat): with
		// pulls of 2 s, that is 2 s of index lag, not nats.go's 30 s.
		jetstream.PullExpiry(2*time.Second))
	if err != nil {
		return nil, nil, err
	}
	return msgs, cc.Stop, nil
}

// leave writes, when the term ends by a cancel (a graceful stop, the lease
// given up), a checkpoint at what it read, so the next term resumes from
// there.
func (ix *Indexer) leave(ctx context.Context, ents *entries, st *state) {
	if context.Cause(ctx) != context.Canceled || st.cp.Rebuilding {
		return
	}
	fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := ix.checkpoint(fctx, ix.js, ents, st); err != nil {
		ix.Log.Info("run index: the term's last checkpoint; the next term reads from the one before", "error", err)
	}
}

// consume counts each write of msgs and stores its index entry, and writes
// a checkpoint every Every while writes come (every 5 x Every otherwise),
// until ctx ends or a write fails.
func (ix *Indexer) consume(ctx context.Context, ents *entries, st *state, msgs <-chan jetstream.Msg) error {
	tick := time.NewTicker(ix.Every)
	defer tick.Stop()
	lingered := time.NewTimer(linger)
	lingered.Stop()
	defer lingered.Stop()
	lingering := false
	dirty, lastWrite := true, time.Time{}
	recount := pace.Pacer{PerSec: ix.RecountRate}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-msgs:
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if st.cp.Rebuilding {
				recount.Wait(ctx)
			}
			if err := ix.apply(ctx, ents, st, m, md); err != nil {
				return err
			}
			if len(msgs) == 0 && !lingering && !st.pend.empty() {
				// Nothing more read yet: the entries go after linger,
				// with those of the writes read meanwhile.
				lingered.Reset(linger)
				lingering = true
			}
			if ents.failed.Load() {
				return ents.wait(ctx, 0) // an entry refused: every later one is too
			}
			dirty = true
			if md.NumPending == 0 {
				ix.reachedEnd(st)
			}
		case <-lingered.C:
			lingering = false
			if err := ix.flush(ctx, ents, st); err != nil {
				return err
			}
		case <-tick.C:
			if !dirty && time.Since(lastWrite) < 5*ix.Every {
				continue
			}
			if err := ix.checkpoint(ctx, ix.js, ents, st); err != nil {
				return err
			}
			dirty, lastWrite = false, time.Now()
		}
	}
}

// reachedEnd notes that the term has read the runs stream to its end: a
// recount is done.
func (ix *Indexer) reachedEnd(st *state) {
	if st.cp.Rebuilding {
		st.cp.Rebuilding = false
		ix.Log.Info("run index: recount done", "seq", st.cp.Seq)
	}
	ix.setCaughtUp(true)
}

func (ix *Indexer) setCaughtUp(v bool) {
	ix.mu.Lock()
	ix.stats.CaughtUp = v
	ix.mu.Unlock()
}

// apply counts one message of the runs stream and publishes its index entry.
func (ix *Indexer) apply(ctx context.Context, ents *entries, st *state, m jetstream.Msg, md *jetstream.MsgMetadata) error {
	seq := md.Sequence.Stream
	id := m.Subject()[len(ix.pfx):]
	h := m.Headers()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	delete(ix.seeded, id)
	old, known := ix.live[id]
	fns := func(fn string) *FunctionCounts {
		f := st.cp.Functions[fn]
		if f == nil {
			f = &FunctionCounts{}
			st.cp.Functions[fn] = f
		}
		return f
	}
	if h.Get("KV-Operation") != "" || h.Get("Nats-Marker-Reason") != "" {
		// A record removed. Terminal records expire by their TTL (their
		// hours drop out of the counts); a record deleted or purged by
		// hand is uncounted if this term counted it, and otherwise
		// forces a recount, unless it was removed before a recount
		// began (the recount never saw it).
		expired := h.Get("Nats-Marker-Reason") == "MaxAge"
		switch {
		case known:
			fns(old.Function).add(old.State, 0, -1)
			delete(ix.live, id)
		case expired:
		case st.rebuild && seq <= st.start:
		default:
			return fmt.Errorf("%w: run %s removed (%s%s) at %d", errRebuild, id, h.Get("KV-Operation"), h.Get("Nats-Marker-Reason"), seq)
		}
		st.cp.Seq, ix.stats.Seq = seq, seq
		return nil
	}
	to := jetflow.State(h.Get(kv.HeaderState))
	fn := h.Get(kv.HeaderFunction)
	if !to.Valid() || jetflow.ValidateName(fn) != nil {
		// Not a record jetflow wrote (a function name that is no subject
		// token, written by hand, would make no index entry): counted
		// nowhere.
		st.cp.Seq, ix.stats.Seq = seq, seq
		return nil
	}
	from := jetflow.State(h.Get(kv.HeaderFrom))
	var prev uint64
	if v := h.Get(kv.HeaderPrev); v != "" { // a create has none (a failed parse allocates)
		prev, _ = strconv.ParseUint(v, 10, 64)
	}
	switch {
	case known:
		fns(old.Function).add(old.State, 0, -1)
	case from == "" || from.Terminal():
		// A create (over nothing, or over an expired record's marker).
	case st.rebuild:
		// Recounting: a run this pass has not counted yet (its earlier
		// writes were replaced before the pass read them).
	case prev != 0 && prev <= st.base:
		// The record the checkpoint counted.
		fns(fn).add(from, 0, -1)
	default:
		// The write this replaced came after the checkpoint and was
		// replaced before this term read it: what the checkpoint counted
		// for this run is unknown.
		return fmt.Errorf("%w: run %s changed twice while unread (revision %d after %d)", errRebuild, id, seq, prev)
	}
	fns(fn).add(to, md.Timestamp.Unix()/st.cp.width(), 1)
	st.at = md.Timestamp
	if to.Terminal() {
		delete(ix.live, id)
		if n := parseMillis(h.Get(kv.HeaderNotify)); !n.IsZero() {
			if ix.notify == nil {
				ix.notify = map[string]kv.Header{}
			}
			ix.notify[id] = kv.Header{ID: id, State: to, Function: fn, Notify: n, Revision: seq}
		}
	} else {
		// Keyed by the copy too: a map stores the key of each assignment.
		l := ix.kept(Live{ID: id, State: to, Function: fn, Due: parseMillis(h.Get(kv.HeaderDue))})
		ix.live[l.ID] = l
	}
	st.cp.Seq, ix.stats.Seq = seq, seq
	if seq > st.cp.IndexSeq {
		if err := ix.stage(ctx, ents, st, ix.cfg.IndexSubject(string(to), fn), id, seq); err != nil {
			return err
		}
		st.cp.IndexSeq = seq
	}
	return nil
}

// stage adds the entry of run id's write at seq (on subject) to those
// not published yet, publishing them first when the window is full.
func (ix *Indexer) stage(ctx context.Context, ents *entries, st *state, subject, id string, seq uint64) error {
	if st.pend.full() {
		if err := ix.flush(ctx, ents, st); err != nil {
			return err
		}
	}
	st.pend.add(subject, id, seq)
	return nil
}

// flush publishes the entries not published yet, in revision order, a
// message per run of consecutive entries of one subject (batches), each
// message of the chain with a Nats-Msg-Id naming its last revision.
func (ix *Indexer) flush(ctx context.Context, ents *entries, st *state) error {
	bs := st.pend.batches(ix.batchBytes())
	st.pend.reset()
	for _, b := range bs {
		m := &nats.Msg{Subject: b.subject, Header: make(nats.Header, 4)}
		m.Header[HeaderRun], m.Header[HeaderRev] = b.runs, b.revs
		if err := ents.publish(ctx, m, "idx-"+b.revs[len(b.revs)-1]); err != nil {
			// The entries after it are not sent: no checkpoint of this
			// term may be stored past them (leave's would, after a
			// cancel), or the next term would never index them.
			err = fmt.Errorf("runindex: index entry: %w", err)
			ents.fail(err)
			return err
		}
	}
	return nil
}

// batchBytes bounds a batch's headers: 16 KB, or half the server's max
// payload if that is less.
func (ix *Indexer) batchBytes() int {
	if mp := int(ix.js.Conn().MaxPayload()) / 2; mp > 0 && mp < 16<<10 {
		return mp
	}
	return 16 << 10
}

// resumePoint is the revision of the last entry stored before the index
// stream's sequence marker (the term's marker): the term publishes the
// entries after it. It reads the messages before the marker, a span at a
// time widening toward the past while none names a run (messages of other
// publishers, earlier terms' markers). ok false when the stream holds no
// entry: the term starts from its checkpoint's.
func (ix *Indexer) resumePoint(ctx context.Context, idx jetstream.Stream, marker uint64) (rev uint64, ok bool, err error) {
	for span := uint64(64); ; span *= 8 {
		from := uint64(1)
		if marker > span {
			from = marker - span
		}
		if rev, ok, err = ix.lastEntryIn(ctx, idx, from, marker); err != nil || ok || from == 1 {
			return rev, ok, err
		}
	}
}

// lastEntryIn reads the index stream's messages from sequence from up to
// the marker with one ordered consumer, and returns the revision of the
// last entry among them. It reads until the marker comes (it is stored, so
// it does): the consumer may be placed on a replica that has not applied
// the last messages yet, where a direct get would answer from what it has.
func (ix *Indexer) lastEntryIn(ctx context.Context, idx jetstream.Stream, from, marker uint64) (rev uint64, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, ix.ackWait)
	defer cancel()
	c, err := idx.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		HeadersOnly: true, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
		MaxResetAttempts: 3,
	})
	if err != nil {
		return 0, false, err
	}
	it, err := c.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return 0, false, err
	}
	stop := context.AfterFunc(ctx, it.Stop) // Next does not watch ctx
	defer stop()
	defer it.Stop()
	pfx := ix.cfg.IndexEntryPrefix()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("runindex: reading the index up to its term marker (sequence %d): %w", marker, ctx.Err())
			}
			return 0, false, err
		}
		md, err := m.Metadata()
		if err != nil {
			return 0, false, err
		}
		if md.Sequence.Stream >= marker {
			return rev, ok, nil
		}
		if strings.HasPrefix(m.Subject(), pfx) {
			if es := entriesOf(m.Headers()); len(es) > 0 {
				rev, ok = es[len(es)-1].rev, true
			}
		}
	}
}

// checkpoint stores the counts once every index entry up to them is stored.
func (ix *Indexer) checkpoint(ctx context.Context, js jetstream.JetStream, ents *entries, st *state) error {
	if err := ix.flush(ctx, ents, st); err != nil {
		return err
	}
	if err := ents.wait(ctx, ix.ackWait); err != nil {
		return err
	}
	ix.mu.Lock()
	st.cp.prune(time.Now())
	serve := &st.cp
	if st.cp.Rebuilding {
		serve = st.served
	} else {
		st.cp.At = st.at
	}
	var data []byte
	var err error
	if serve != nil {
		data, err = json.Marshal(serve)
	} else {
		data, err = json.Marshal(&Checkpoint{Rebuilding: true, IndexSeq: st.cp.IndexSeq, Leader: ix.Name, Retention: ix.cfg.Retention})
	}
	ix.mu.Unlock()
	if err != nil {
		return err
	}
	m := nats.NewMsg(ix.cfg.IndexCheckpointSubject())
	m.Data = data
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	st.cps++
	if err := ents.publishSync(ctx, js, m, fmt.Sprintf("cp-%s-%d-%d", ix.Name, st.began.UnixNano(), st.cps)); err != nil {
		return fmt.Errorf("runindex: checkpoint: %w", err)
	}
	ix.mu.Lock()
	ix.stats.Checkpoints++
	ix.mu.Unlock()
	return nil
}

// ErrNoCheckpoint: no indexer has stored counts (none runs, or it has not
// finished its first pass).
var ErrNoCheckpoint = errors.New("runindex: no checkpoint")

// ReadCheckpoint reads the indexer's checkpoint (one direct get).
func ReadCheckpoint(ctx context.Context, js jetstream.JetStream, cfg streams.Config) (*Checkpoint, error) {
	cfg = cfg.WithDefaults()
	st, err := js.Stream(ctx, cfg.IndexStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoCheckpoint
	}
	if err != nil {
		return nil, err
	}
	return readCheckpoint(ctx, st, cfg)
}

func readCheckpoint(ctx context.Context, st jetstream.Stream, cfg streams.Config) (*Checkpoint, error) {
	m, err := st.GetLastMsgForSubject(ctx, cfg.IndexCheckpointSubject())
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrNoCheckpoint
	}
	if err != nil {
		return nil, err
	}
	cp := new(Checkpoint)
	if err := json.Unmarshal(m.Data, cp); err != nil {
		return nil, fmt.Errorf("runindex: checkpoint: %w", err)
	}
	cp.AsOf = m.Time.UTC()
	if cp.At.IsZero() {
		cp.At = cp.AsOf
	}
	if cp.Functions == nil {
		cp.Functions = map[string]*FunctionCounts{}
	}
	return cp, nil
}

func parseMillis(v string) time.Time {
	if v == "" {
		return time.Time{} // most writes: not parsed, as a failed parse allocates its error
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}
