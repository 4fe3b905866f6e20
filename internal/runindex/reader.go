package runindex

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	// ErrUnavailable: no indexer keeps the index up to date (none runs, it
	// is recounting, or its checkpoint is older than StaleAfter). Callers
	// read every record instead, and say so.
	ErrUnavailable = errors.New("runindex: no up-to-date index")
	// ErrBadCursor: a cursor that no page of this listing returned.
	ErrBadCursor = errors.New("runindex: not a cursor of this listing")
)

// StaleAfter is how old a checkpoint may be for readers to use it.
const StaleAfter = 15 * time.Second

// read counts the messages and records the readers fetched, for tests and
// the benchmark: a page costs in proportion to what it shows.
var read atomic.Int64

// MessagesRead returns how many messages (index entries, record headers and
// records) the readers of this process have fetched.
func MessagesRead() int64 { return read.Load() }

// made counts the short-lived consumers the readers created (a request to
// the server each, and one more to delete it).
var made atomic.Int64

// ConsumersMade returns how many short-lived consumers the readers of this
// process have created to read windows of a stream.
func ConsumersMade() int64 { return made.Load() }

// Reader reads the index: counts and pages of runs.
type Reader struct {
	store *kv.Store
	js    jetstream.JetStream
	cfg   streams.Config
	pfx   string
}

// NewReader returns a reader of the index of store's runs.
func NewReader(store *kv.Store) *Reader {
	cfg := store.Config()
	return &Reader{store: store, js: store.JetStream(), cfg: cfg, pfx: streams.KVSubject(cfg.RunsBucket(), "")}
}

// CountsResult is the counts and where they come from.
type CountsResult struct {
	Counts
	// Source is "index" (the indexer's checkpoint) or "scan" (every
	// record read: no indexer runs).
	Source string `json:"source"`
	// AsOf is when the counts were true (the checkpoint's time; now for a
	// scan), and Seq the runs stream sequence they reflect (index only).
	AsOf time.Time `json:"asOf"`
	Seq  uint64    `json:"seq,omitempty"`
	// Rebuilding: the indexer is recounting every record; the counts are
	// the last exact ones, true at AsOf.
	Rebuilding bool `json:"rebuilding,omitempty"`
	// TerminalSince: terminal counts cover the runs that ended at or after
	// it (index only: records expire by the slot, an hour at the default
	// retention; see docs/runindex.md).
	TerminalSince time.Time `json:"terminalSince,omitzero"`
}

// Checkpoint returns the indexer's checkpoint if it is up to date:
// ErrUnavailable otherwise.
func (r *Reader) Checkpoint(ctx context.Context) (*Checkpoint, error) {
	var cp *Checkpoint
	err := natsperm.Do(ctx, r.js.Conn(), func(ctx context.Context) error {
		var err error
		cp, err = ReadCheckpoint(ctx, r.js, r.cfg)
		return err
	}, "$JS.API.")
	read.Add(1)
	if errors.Is(err, ErrNoCheckpoint) || errors.Is(err, nats.ErrPermissionViolation) {
		// No index, or this user may not read it: every record is read
		// instead.
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err != nil {
		return nil, err
	}
	if cp.Rebuilding && cp.Seq == 0 {
		return nil, fmt.Errorf("%w: the indexer is counting for the first time", ErrUnavailable)
	}
	if age := time.Since(cp.AsOf); age > StaleAfter {
		return nil, fmt.Errorf("%w: last checkpoint %s ago", ErrUnavailable, age.Round(time.Second))
	}
	return cp, nil
}

// Counts returns the runs of function fn (all when "") in each state from
// the checkpoint (one read), plus the runs waiting in the function stream
// without a record yet (pending; their number is the backlog no worker has
// taken). ErrUnavailable when no indexer keeps the counts.
func (r *Reader) Counts(ctx context.Context, fn string) (CountsResult, error) {
	cp, err := r.Checkpoint(ctx)
	if err != nil {
		return CountsResult{}, err
	}
	now := time.Now()
	res := CountsResult{Counts: cp.Sum(fn, now), Source: "index", AsOf: cp.AsOf, Seq: cp.Seq,
		TerminalSince: TerminalSince(now, cp.Retention, cp.Width), Rebuilding: cp.Rebuilding}
	if cp.Rebuilding {
		res.AsOf = cp.At
	}
	q, err := r.queuedWithoutRecord(ctx, fn)
	if err != nil {
		return res, err
	}
	res.Add(jetflow.Pending, int64(len(q)))
	return res, nil
}

// queuedWithoutRecord returns the runs waiting in the function stream that
// have no record yet (id -> function). Its cost is proportional to the
// messages waiting.
func (r *Reader) queuedWithoutRecord(ctx context.Context, fn string) (map[string]string, error) {
	queued := map[string]string{}
	if err := r.store.ScanQueued(ctx, fn, func(f, id string) { queued[id] = f }); err != nil {
		return nil, err
	}
	if len(queued) == 0 {
		return queued, nil
	}
	rs, err := r.js.Stream(ctx, streams.KVStream(r.cfg.RunsBucket()))
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	ids := make([]string, 0, len(queued))
	for id := range queued {
		ids = append(ids, id)
	}
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m, err := rs.GetLastMsgForSubject(ctx, r.pfx+id)
			read.Add(1)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
			case err != nil:
				first = cmpErr(first, err)
			case m.Header.Get("KV-Operation") != "" || m.Header.Get("Nats-Marker-Reason") != "":
			default:
				delete(queued, id)
			}
		})
	}
	wg.Wait()
	return queued, first
}

// queuedRun is a run waiting in the function stream without a record.
type queuedRun struct {
	id, fn string
	seq    uint64 // of its message in the function stream
	run    *jetflow.Run
}

// queuedRuns reads the runs waiting without a record (their messages),
// oldest first (by function stream sequence).
func (r *Reader) queuedRuns(ctx context.Context, fn string) ([]queuedRun, error) {
	ids, err := r.queuedWithoutRecord(ctx, fn)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var first error
	var out []queuedRun
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for id, f := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			run, seq, ok, err := r.store.QueuedRunSeq(ctx, f, id)
			read.Add(1)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				first = cmpErr(first, err)
			case ok:
				out = append(out, queuedRun{id: id, fn: f, seq: seq, run: run})
			}
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b queuedRun) int { return cmpUint(a.seq, b.seq) })
	return out, first
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Query selects a page of runs, newest first.
type Query struct {
	State    jetflow.State
	Function string
	Limit    int
	// After is the cursor of the page to follow (a page's Next), Before of
	// the page to precede (a page's Prev); at most one.
	After, Before string
}

// Page is a page of runs, newest first.
type Page struct {
	Runs []*jetflow.Run
	// Next is the cursor of the older page ("" on the last page), Prev of
	// the newer page ("" on the first).
	Next, Prev string
}

// Row classes, newest first: runs waiting without a record (by id), then
// records not indexed yet (the runs stream's tail, by revision), then
// index entries (by index sequence).
const (
	classIndex  = 0
	classTail   = 1
	classQueued = 2
)

type pos struct {
	class int
	seq   uint64 // index sequence (classIndex), revision (classTail)
	rev   uint64 // classIndex: the entry's revision
	id    string // classTail in ListScan
}

func (p pos) String() string {
	switch p.class {
	case classQueued:
		return "q" + strconv.FormatUint(p.seq, 10)
	case classTail:
		return "t" + strconv.FormatUint(p.seq, 10)
	}
	return "i" + strconv.FormatUint(p.seq, 10) + "." + strconv.FormatUint(p.rev, 10)
}

func parsePos(s string) (*pos, error) {
	if s == "" {
		return nil, nil
	}
	bad := fmt.Errorf("%w: %q", ErrBadCursor, s)
	switch s[0] {
	case 'q':
		n, err := strconv.ParseUint(s[1:], 10, 64)
		if err != nil {
			return nil, bad
		}
		return &pos{class: classQueued, seq: n}, nil
	case 't':
		n, err := strconv.ParseUint(s[1:], 10, 64)
		if err != nil {
			return nil, bad
		}
		return &pos{class: classTail, seq: n}, nil
	case 'i':
		a, b, ok := strings.Cut(s[1:], ".")
		n, err1 := strconv.ParseUint(a, 10, 64)
		m, err2 := strconv.ParseUint(b, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, bad
		}
		return &pos{class: classIndex, seq: n, rev: m}, nil
	}
	return nil, bad
}

// newer reports whether a comes before b newest first.
func newer(a, b pos) bool {
	if a.class != b.class {
		return a.class > b.class
	}
	if a.seq == b.seq {
		return a.rev > b.rev // entries of one index message
	}
	return a.seq > b.seq
}

type row struct {
	pos pos
	run *jetflow.Run
}

// positions parses the query's cursors.
func (q Query) positions() (after, before *pos, err error) {
	if after, err = parsePos(q.After); err != nil {
		return nil, nil, err
	}
	before, err = parsePos(q.Before)
	return after, before, err
}

// List returns a page of runs matching q, newest first: by their last
// write (a run's latest state change or heartbeat), runs waiting without
// a record first. A page costs in proportion to the runs it shows plus the
// entries it skips (runs that left the state since), not to the runs kept;
// the runs waiting without a record are read from the function stream's
// subjects (in proportion to the backlog) when the state asked is pending
// or any. ErrUnavailable when no indexer keeps the index (the caller scans
// instead), ErrBadCursor for a cursor of no page.
func (r *Reader) List(ctx context.Context, q Query) (Page, error) {
	after, before, err := q.positions()
	if err != nil {
		return Page{}, err
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	unfiltered := q.State == "" && q.Function == ""
	var idx jetstream.Stream
	var lastIndexed, idxLast uint64
	if !unfiltered {
		cp, err := r.Checkpoint(ctx)
		if err != nil {
			return Page{}, err
		}
		idx, err = r.js.Stream(ctx, r.cfg.IndexStream())
		if err != nil {
			return Page{}, err
		}
		idxLast = idx.CachedInfo().State.LastSeq
		last, err := lastEntry(ctx, idx, r.cfg)
		if err != nil {
			return Page{}, err
		}
		if last.seq != 0 {
			idxLast = last.seq
		}
		lastIndexed = last.rev
		if !last.found && last.seq != 0 {
			// Its last messages name no run: every entry up to the
			// checkpoint's was stored before it was written. (An empty
			// index stays 0: the page reads the runs stream.)
			lastIndexed = cp.IndexSeq
		}
	}
	rs, err := r.js.Stream(ctx, streams.KVStream(r.cfg.RunsBucket()))
	if err != nil {
		return Page{}, err
	}
	runsLast := rs.CachedInfo().State.LastSeq
	var queued []queuedRun
	if q.State == "" || q.State == jetflow.Pending {
		if queued, err = r.queuedRuns(ctx, q.Function); err != nil {
			return Page{}, err
		}
	}
	p := &pager{r: r, q: q, idx: idx, rs: rs, lastIndexed: lastIndexed, runsLast: runsLast, seen: map[string]bool{}}
	if unfiltered {
		p.lastIndexed = 0 // the runs stream holds the latest revision of each record: no index needed
	}
	if before != nil {
		return p.backward(ctx, *before, queued, runsLast, idxLast)
	}
	return p.forward(ctx, after, queued, runsLast, idxLast)
}

type pager struct {
	r           *Reader
	q           Query
	idx, rs     jetstream.Stream
	lastIndexed uint64
	runsLast    uint64 // the runs stream's last sequence as read
	seen        map[string]bool
	ahead       map[string]fetched
}

// match reports whether a record's state and function fit the query.
func (p *pager) match(state jetflow.State, fn string) bool {
	return fits(p.q.State, state) && fits(p.q.Function, fn)
}

// fits reports whether got is what a query asks for: want, or anything
// when want is "".
func fits[S ~string](want, got S) bool { return want == "" || got == want }

// record reads run id and returns it if its revision is still rev (0: any)
// and it fits the query.
func (p *pager) record(ctx context.Context, id string, rev uint64) (*jetflow.Run, error) {
	if p.seen[id] {
		return nil, nil
	}
	run, err := p.get(ctx, id)
	if errors.Is(err, jetflow.ErrNotFound) {
		return nil, nil
	}
	if errors.Is(err, jetflow.ErrBadRecord) {
		// A record jetflow did not write: one row saying so (in a page
		// of every run, which it belongs to) instead of no page at all.
		if p.q.State != "" || p.q.Function != "" {
			return nil, nil
		}
		p.seen[id] = true
		return &jetflow.Run{ID: id, Revision: rev, Error: err.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	if (rev != 0 && run.Revision != rev) || !p.match(run.State, run.Name) {
		return nil, nil
	}
	p.seen[id] = true
	return run, nil
}

// entry is one index entry: a run and the revision of its write.
type entry struct {
	id  string
	rev uint64
}

// entriesOf reads the entries of an index message (one, or a batch of
// consecutive writes of its subject: a value of Jetflow-Run and Jetflow-Rev
// each, revisions increasing); none for a message the indexer did not
// write (it names no valid run or revision, or not one revision a run).
func entriesOf(h nats.Header) []entry {
	runs, revs := h[HeaderRun], h[HeaderRev]
	if len(runs) == 0 || len(runs) != len(revs) {
		return nil
	}
	out := make([]entry, len(runs))
	for i, id := range runs {
		rev, err := strconv.ParseUint(revs[i], 10, 64)
		if err != nil || rev == 0 || jetflow.ValidateRunID(id) != nil || i > 0 && rev <= out[i-1].rev {
			return nil
		}
		out[i] = entry{id, rev}
	}
	return out
}

// indexEnd is where the index ends: the sequence of its last message (an
// entry, or one that names no run), and the revision of its last entry.
type indexEnd struct {
	seq   uint64
	rev   uint64
	found bool // rev is an entry's: false for an empty index, or one whose last messages name no run
}

// lastEntry finds the index's last entry. The indexer stores entries in
// revision order with no gaps (entries.go), so every write up to its
// revision has its entry, or was replaced by a later write of its run
// that has one (staged.go): every write up to it that is still a run's
// latest is in the index. A last message that names no run (only the
// scheduler role may publish there) is looked past, up to 16 messages back;
// past those, found is false and the caller takes the checkpoint's
// revision (every entry up to it was stored before it was written).
func lastEntry(ctx context.Context, idx jetstream.Stream, cfg streams.Config) (indexEnd, error) {
	m, err := idx.GetLastMsgForSubject(ctx, cfg.IndexFilter("", ""))
	read.Add(1)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return indexEnd{}, nil
	}
	if err != nil {
		return indexEnd{}, err
	}
	end := indexEnd{seq: m.Sequence}
	if es := entriesOf(m.Header); len(es) > 0 {
		end.rev, end.found = es[len(es)-1].rev, true
		return end, nil
	}
	entries := cfg.IndexEntryPrefix()
	for seq := m.Sequence - 1; seq > 0 && seq+16 >= m.Sequence; seq-- {
		read.Add(1)
		m, err := idx.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return indexEnd{}, err
		}
		if !strings.HasPrefix(m.Subject, entries) {
			continue
		}
		if es := entriesOf(m.Header); len(es) > 0 {
			end.rev, end.found = es[len(es)-1].rev, true
			return end, nil
		}
	}
	return end, nil
}

// fetched is a record read ahead (prefetch).
type fetched struct {
	run *jetflow.Run
	err error
}

// get reads run id's record, or takes it from what prefetch read.
func (p *pager) get(ctx context.Context, id string) (*jetflow.Run, error) {
	if f, ok := p.ahead[id]; ok {
		delete(p.ahead, id)
		return f.run, f.err
	}
	read.Add(1)
	return p.r.store.Show(ctx, id)
}

// pageRows are the rows a page reads, up to want: the page's limit and one
// more, which says there is a page beyond.
type pageRows struct {
	rows []row
	want int
}

func (w *pageRows) full() bool                   { return len(w.rows) >= w.want }
func (w *pageRows) need() int                    { return w.want - len(w.rows) }
func (w *pageRows) add(ps pos, run *jetflow.Run) { w.rows = append(w.rows, row{ps, run}) }

// newestFirst is the page of rows read newest first, after a cursor
// (after) or from the top; str writes a cursor.
func newestFirst(rows []row, limit int, after bool, str func(pos) string) Page {
	var page Page
	if len(rows) > limit {
		rows = rows[:limit]
		page.Next = str(rows[len(rows)-1].pos)
	}
	for _, rw := range rows {
		page.Runs = append(page.Runs, rw.run)
	}
	if after && len(rows) > 0 {
		page.Prev = str(rows[0].pos)
	}
	return page
}

// oldestFirst is the page of rows read oldest first, back from a cursor;
// str writes a cursor.
func oldestFirst(rows []row, limit int, str func(pos) string) Page {
	var page Page
	if len(rows) > limit {
		rows = rows[:limit]
		page.Prev = str(rows[len(rows)-1].pos)
	}
	slices.Reverse(rows)
	for _, rw := range rows {
		page.Runs = append(page.Runs, rw.run)
	}
	if len(rows) > 0 {
		page.Next = str(rows[len(rows)-1].pos)
	}
	return page
}

// tailRows is the visitor of the runs stream's tail (the writes not
// indexed yet): each write that matches the page's filter adds its record
// to w, until full.
func (p *pager) tailRows(ctx context.Context, w *pageRows) func(uint64, jetstream.Msg) (bool, error) {
	return func(seq uint64, m jetstream.Msg) (bool, error) {
		h := m.Headers()
		if !p.match(jetflow.State(h.Get(kv.HeaderState)), h.Get(kv.HeaderFunction)) {
			return true, nil
		}
		run, err := p.record(ctx, m.Subject()[len(p.r.pfx):], seq)
		if err != nil {
			return false, err
		}
		if run != nil {
			w.add(pos{class: classTail, seq: seq}, run)
		}
		return !w.full(), nil
	}
}

// prefetch reads the records of a window's candidates side by side, the
// newest (last) first, up to n of them: the walk then finds them read.
func (p *pager) prefetch(ctx context.Context, ids []string, n int) {
	if p.ahead == nil {
		p.ahead = map[string]fetched{}
	}
	var todo []string
	for i := len(ids) - 1; i >= 0 && len(todo) < n; i-- {
		if id := ids[i]; id != "" && !p.seen[id] && !slices.Contains(todo, id) {
			if _, ok := p.ahead[id]; !ok {
				todo = append(todo, id)
			}
		}
	}
	out := make([]fetched, len(todo))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, id := range todo {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			run, err := p.r.store.Show(ctx, id)
			out[i] = fetched{run, err}
		})
	}
	wg.Wait()
	read.Add(int64(len(todo)))
	for i, id := range todo {
		p.ahead[id] = out[i]
	}
}

// forward is a page newest first after cursor (nil: the first page): the
// runs waiting without a record, then the records not indexed yet, then
// the index entries.
func (p *pager) forward(ctx context.Context, after *pos, queued []queuedRun, runsLast, idxLast uint64) (Page, error) {
	w := &pageRows{want: p.q.Limit + 1}
	if after == nil || after.class == classQueued {
		p.queuedNewest(w, after, queued)
	}
	if err := p.tailNewest(ctx, w, after, runsLast); err != nil {
		return Page{}, err
	}
	if err := p.indexNewest(ctx, w, after, idxLast); err != nil {
		return Page{}, err
	}
	return newestFirst(w.rows, p.q.Limit, after != nil, pos.String), nil
}

// queuedNewest adds the runs waiting without a record, newest first,
// older than after (nil: all).
func (p *pager) queuedNewest(w *pageRows, after *pos, queued []queuedRun) {
	for i := len(queued) - 1; i >= 0 && !w.full(); i-- {
		qr := queued[i]
		if after != nil && qr.seq >= after.seq {
			continue
		}
		if p.match(qr.run.State, qr.run.Name) {
			p.seen[qr.id] = true
			w.add(pos{class: classQueued, seq: qr.seq}, qr.run)
		}
	}
}

// tailNewest adds the records not indexed yet (the runs stream's tail,
// up to runsLast), newest first, older than after (nil: all).
func (p *pager) tailNewest(ctx context.Context, w *pageRows, after *pos, runsLast uint64) error {
	if after != nil && after.class < classTail {
		return nil // the cursor is past the tail, in the index
	}
	tailTop := runsLast + 1
	if after != nil && after.class == classTail {
		tailTop = after.seq
	}
	if w.full() || tailTop <= p.lastIndexed+1 {
		return nil
	}
	if p.byGets(p.lastIndexed + 1) {
		n := len(w.rows)
		err := walkBack(ctx, p.r.js, p.rs.CachedInfo().Config.Name, tailTop, p.lastIndexed, w.need, p.tailRecords(w))
		if !p.deniedGets(w, n, err) {
			return err
		}
	}
	pre := func(ms []jetstream.Msg) {
		ids := make([]string, len(ms))
		for i, m := range ms {
			if h := m.Headers(); p.match(jetflow.State(h.Get(kv.HeaderState)), h.Get(kv.HeaderFunction)) {
				ids[i] = m.Subject()[len(p.r.pfx):]
			}
		}
		p.prefetch(ctx, ids, w.need())
	}
	return back(ctx, p.rs, p.r.pfx+">", false, tailTop, p.lastIndexed, w.need, pre, p.tailRows(ctx, w))
}

// indexNewest adds the runs of the index entries (up to idxLast), newest
// first, older than after (nil: all).
func (p *pager) indexNewest(ctx context.Context, w *pageRows, after *pos, idxLast uint64) error {
	if w.full() || p.idx == nil || p.lastIndexed == 0 {
		return nil
	}
	top := idxLast + 1
	var revBelow uint64 // skip entries of writes shown from the tail
	var cur *pos        // the cursor's message: its entries before the cursor's are next
	if after != nil && after.class == classIndex {
		top, cur = after.seq+1, after
	}
	if after != nil && after.class == classTail {
		revBelow = after.seq
	}
	shown := func(seq uint64, e entry) bool {
		return indexShows(e.rev, p.lastIndexed, revBelow) && (cur == nil || seq != cur.seq || e.rev < cur.rev)
	}
	pre := func(ms []jetstream.Msg) {
		var ids []string
		for _, m := range ms {
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			for _, e := range entriesOf(m.Headers()) {
				if shown(md.Sequence.Stream, e) {
					ids = append(ids, e.id)
				}
			}
		}
		p.prefetch(ctx, ids, w.need())
	}
	return back(ctx, p.idx, p.r.cfg.IndexFilter(string(p.q.State), p.q.Function), true, top, 0, w.need, pre, func(seq uint64, m jetstream.Msg) (bool, error) {
		es := entriesOf(m.Headers())
		for i := len(es) - 1; i >= 0; i-- {
			e := es[i]
			if !shown(seq, e) {
				continue
			}
			if more, err := p.indexRow(ctx, w, seq, e.id, e.rev); err != nil || !more {
				return more, err
			}
		}
		return true, nil
	})
}

// indexRow adds to w the run of index entry seq (run id at revision rev),
// and reports whether w wants more.
func (p *pager) indexRow(ctx context.Context, w *pageRows, seq uint64, id string, rev uint64) (bool, error) {
	run, err := p.record(ctx, id, rev)
	if err != nil {
		return false, err
	}
	if run != nil {
		w.add(pos{class: classIndex, seq: seq, rev: rev}, run)
	}
	return !w.full(), nil
}

// indexShows reports whether an index entry of revision rev is shown from
// the index: it is not of a write shown from the tail, on this page (after
// the index's end as read, lastIndexed) or on the one before (at or after
// revBelow, the cursor's; 0: none).
func indexShows(rev, lastIndexed, revBelow uint64) bool {
	return rev <= lastIndexed && (revBelow == 0 || rev < revBelow)
}

// backward is the page of runs just newer than cursor before, newest
// first: read oldest first from the cursor, the index entries, then the
// records not indexed yet, then the runs waiting without a record.
func (p *pager) backward(ctx context.Context, before pos, queued []queuedRun, runsLast, idxLast uint64) (Page, error) {
	w := &pageRows{want: p.q.Limit + 1} // oldest first
	if before.class == classIndex && p.idx != nil {
		if err := p.indexOldest(ctx, w, before); err != nil {
			return Page{}, err
		}
	}
	if p.caughtUp(before) {
		if err := p.caughtUpOldest(ctx, w, before, idxLast); err != nil {
			return Page{}, err
		}
	}
	if !w.full() && before.class <= classTail {
		if err := p.tailOldest(ctx, w, before); err != nil {
			return Page{}, err
		}
	}
	p.queuedOldest(w, before, queued)
	return oldestFirst(w.rows, p.q.Limit, pos.String), nil
}

// indexOldest adds the runs of the index entries after cursor before (in
// the index), oldest first, up to the index's end as read.
func (p *pager) indexOldest(ctx context.Context, w *pageRows, before pos) error {
	// From the cursor's message: its entries after the cursor's come first.
	return ahead(ctx, p.idx, p.r.cfg.IndexFilter(string(p.q.State), p.q.Function), before.seq, func(seq uint64, m jetstream.Msg) (bool, error) {
		for _, e := range entriesOf(m.Headers()) { // none: a message that names no run
			if seq == before.seq && e.rev <= before.rev {
				continue
			}
			if e.rev > p.lastIndexed {
				return false, nil // newer than the index's end as read: the tail has it
			}
			if more, err := p.indexRow(ctx, w, seq, e.id, e.rev); err != nil || !more {
				return more, err
			}
		}
		return true, nil
	})
}

// caughtUp reports whether cursor before was in the runs stream's tail and
// the index has caught up past it since.
func (p *pager) caughtUp(before pos) bool {
	if p.idx == nil {
		return false
	}
	return before.class == classTail && before.seq < p.lastIndexed
}

// caughtUpOldest adds the runs written after cursor before (in the runs
// stream's tail when its page was read) and indexed since: the writes
// after it and up to the index's end are index entries now, the newest
// ones. It reads from the end (idxLast) back to the cursor, then their
// records oldest first.
func (p *pager) caughtUpOldest(ctx context.Context, w *pageRows, before pos, idxLast uint64) error {
	type found struct {
		seq uint64
		entry
	}
	var newer []found
	err := back(ctx, p.idx, p.r.cfg.IndexFilter(string(p.q.State), p.q.Function), true, idxLast+1, 0, func() int { return w.want }, nil, func(seq uint64, m jetstream.Msg) (bool, error) {
		es := entriesOf(m.Headers()) // none: a message that names no run
		for i := len(es) - 1; i >= 0; i-- {
			switch e := es[i]; {
			case e.rev <= before.seq:
				return false, nil
			case e.rev <= p.lastIndexed:
				newer = append(newer, found{seq, e})
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for i := len(newer) - 1; i >= 0 && !w.full(); i-- {
		e := newer[i]
		if _, err := p.indexRow(ctx, w, e.seq, e.id, e.rev); err != nil {
			return err
		}
	}
	return nil
}

// tailOldest adds the records not indexed yet after cursor before, oldest
// first.
func (p *pager) tailOldest(ctx context.Context, w *pageRows, before pos) error {
	start := p.lastIndexed + 1
	if before.class == classTail {
		start = max(start, before.seq+1)
	}
	if before.class == classIndex {
		start = max(start, before.rev+1)
	}
	if p.byGets(start) {
		n := len(w.rows)
		err := walkAhead(ctx, p.r.js, p.rs.CachedInfo().Config.Name, start, p.runsLast, p.tailRecords(w))
		if !p.deniedGets(w, n, err) {
			return err
		}
	}
	return ahead(ctx, p.rs, p.r.pfx+">", start, p.tailRows(ctx, w))
}

// byGets reports whether the page reads the runs stream's records from
// sequence from by gets (walk.go): every record is a row (no filter), or
// at most shortTail of them are left to read.
func (p *pager) byGets(from uint64) bool {
	return p.q.State == "" && p.q.Function == "" || p.runsLast < from+shortTail
}

// deniedGets reports whether err is this user's gets from the leader
// denied ($JS.API.STREAM.MSG.GET on the runs stream is optional,
// docs/permissions.md): the rows the gets added after the first n are
// taken back, and the caller reads by consumers instead.
func (p *pager) deniedGets(w *pageRows, n int, err error) bool {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	for _, rw := range w.rows[n:] {
		delete(p.seen, rw.run.ID)
	}
	w.rows = w.rows[:n]
	return true
}

// queuedOldest adds the runs waiting without a record, oldest first, newer
// than cursor before and not shown yet.
func (p *pager) queuedOldest(w *pageRows, before pos, queued []queuedRun) {
	for _, qr := range queued {
		if w.full() {
			break
		}
		if before.class == classQueued && qr.seq <= before.seq || p.seen[qr.id] {
			continue
		}
		if p.match(qr.run.State, qr.run.Name) {
			w.add(pos{class: classQueued, seq: qr.seq}, qr.run)
		}
	}
}

// back visits the messages of stream on filter with a sequence in (floor,
// below), newest first, until visit returns false. It reads windows of
// the stream toward the past, each with a consumer that counts the
// matching messages in it (the server's count), and fetches only those.
// When the filter is the page's (counts: index subjects), a window is
// sized from the density of matches seen so far to hold about need() more
// (a quarter more), so the messages it reads are about the ones it visits.
// When it is not (the runs stream's records, which visit filters by their
// headers), the server's count is every message: windows then start at
// twice need() and grow fourfold (to 16,384), so a sparse filter over a long tail
// takes a few windows (a consumer each), not one per need() messages.
func back(ctx context.Context, st jetstream.Stream, filter string, counts bool, below, floor uint64, need func() int, pre func([]jetstream.Msg), visit func(uint64, jetstream.Msg) (bool, error)) error {
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return nil // (and FirstSeq may be 0)
	}
	floor = max(floor, info.State.FirstSeq-1)
	if below > info.State.LastSeq+1 {
		below = info.State.LastSeq + 1
	}
	if below <= floor+1 {
		return nil
	}
	above := uint64(0) // matches at or above the window's top
	if below <= info.State.LastSeq {
		c, err := consumer(ctx, st, filter, below)
		if err != nil {
			return err
		}
		above = c.CachedInfo().NumPending
		drop(st, c)
	}
	w := uint64(max(2*need(), 16))
	var scanned, matched uint64
	hi := below
	for hi > floor+1 {
		lo := floor + 1
		if hi-lo > w {
			lo = hi - w
		}
		c, err := consumer(ctx, st, filter, lo)
		if err != nil {
			return err
		}
		pending := c.CachedInfo().NumPending
		n := int(pending - min(pending, above))
		// Far more matches than needed (a sparse filter found after the
		// windows grew): keep the window's upper part, halving it while
		// it still holds more than twice what is needed. The lower part
		// is the next window.
		for want := 2*need() + 16; counts && n > want && hi-lo > 16; {
			mid := lo + (hi-lo)/2
			cm, err := consumer(ctx, st, filter, mid)
			if err != nil {
				drop(st, c)
				return err
			}
			pm := cm.CachedInfo().NumPending
			drop(st, c)
			c, lo, pending, n = cm, mid, pm, int(pm-min(pm, above))
		}
		above = pending
		if counted != nil {
			counted(st, lo, hi)
		}
		// Without waiting on the server: records removed since the count
		// (expired, purged) leave the window short, and a fetch that
		// waited for them would hold the page for its expiry.
		var msgs []jetstream.Msg
		err = kv.FetchPending(ctx, c, n, 1000, func(m jetstream.Msg) (bool, error) {
			msgs = append(msgs, m)
			return true, nil
		})
		drop(st, c)
		if err != nil {
			return err
		}
		read.Add(int64(len(msgs)))
		if pre != nil && len(msgs) > 0 {
			pre(msgs)
		}
		for i := len(msgs) - 1; i >= 0; i-- {
			md, err := msgs[i].Metadata()
			if err != nil {
				return err
			}
			if md.Sequence.Stream >= hi {
				continue // written meanwhile above the window
			}
			more, err := visit(md.Sequence.Stream, msgs[i])
			if err != nil || !more {
				return err
			}
		}
		scanned += hi - lo
		matched += uint64(n)
		hi = lo
		if !counts {
			w = min(w*4, 1<<14) // a window's headers are held at once
		} else if matched == 0 {
			w = min(w*4, 1<<22)
		} else {
			// Entries per match so far, times the rows still needed.
			w = min(max(scanned*uint64(need())*5/4/matched, 16), w*4, 1<<22)
		}
	}
	return nil
}

// counted, when set (by tests), runs between a window's count and its
// fetch.
var counted func(st jetstream.Stream, lo, hi uint64)

// ahead visits the messages of stream on filter from sequence from on,
// oldest first, until visit returns false or the stream ends.
func ahead(ctx context.Context, st jetstream.Stream, filter string, from uint64, visit func(uint64, jetstream.Msg) (bool, error)) error {
	c, err := consumer(ctx, st, filter, max(from, 1))
	if err != nil {
		return err
	}
	defer drop(st, c)
	return kv.FetchPending(ctx, c, int(c.CachedInfo().NumPending), 256, func(m jetstream.Msg) (bool, error) {
		read.Add(1)
		md, err := m.Metadata()
		if err != nil {
			return false, err
		}
		return visit(md.Sequence.Stream, m)
	})
}

// drop deletes a consumer of back or ahead (the server would after
// InactiveThreshold; many pages a second would leave many behind).
func drop(st jetstream.Stream, c jetstream.Consumer) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = st.DeleteConsumer(ctx, c.CachedInfo().Name) // best effort: the server deletes it after InactiveThreshold anyway
}

// consumer is a short-lived consumer of stream on filter from sequence
// from, headers only (the server removes it when idle).
func consumer(ctx context.Context, st jetstream.Stream, filter string, from uint64) (jetstream.Consumer, error) {
	made.Add(1)
	if kv.WholeStream(st.CachedInfo().Config, filter) {
		// The runs stream's tail: the same messages, counted without
		// walking every key (about 15 ms a consumer at 1M records).
		filter = ""
	}
	return st.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject:     filter,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		InactiveThreshold: 5 * time.Second,
		Replicas:          1,
	})
}
