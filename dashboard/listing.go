package dashboard

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/kv"
)

// Sort orders of the runs list.
const (
	// sortUpdated: newest first by last write (a state change or a
	// heartbeat), the default. With a scheduler running, its run index
	// serves it: a page costs in proportion to its rows, not to the runs
	// kept. The other orders read every record's header.
	sortUpdated = "updated"
	// sortCreated: newest first by creation time.
	sortCreated = "created"
	// sortScheduled: by scheduled time (due time, or the next retry's).
	sortScheduled = "scheduled"
	// sortState: pending, inProgress, success, failed, canceled, then by
	// scheduled time.
	sortState = "state"
	// sortID: by run id.
	sortID = "id"
)

var sortKeys = []string{sortUpdated, sortCreated, sortScheduled, sortState, sortID}

// listQuery is one request for a page of runs.
type listQuery struct {
	State    jetflow.State
	Function string
	Limit    int
	Sort     string
	Asc      bool    // ascending order; descending (newest first) by default
	After    *cursor // the page after this row (next page)
	Before   *cursor // the page before this row (previous page)
}

// cursor is the position of one row in a sort order: its sort keys and id.
// On the wire it is opaque (base64url JSON); a plain run id is accepted as
// an id-order cursor, as producer.Filter.After is.
type cursor struct {
	K1 int64  `json:"a,omitempty"`
	K2 int64  `json:"b,omitempty"`
	ID string `json:"i"`
	// P is a position in the updated order (the run index's cursor).
	P string `json:"p,omitempty"`
}

// otherOrder reports whether c, a cursor of a page (nil: none), is not
// one of the updated order: it has no position in the run index.
func (c *cursor) otherOrder() bool { return c != nil && c.P == "" }

func (c cursor) String() string {
	data, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(data)
}

func parseCursor(s string) (*cursor, error) {
	if s == "" {
		return nil, nil
	}
	var c cursor
	if data, err := base64.RawURLEncoding.DecodeString(s); err == nil && json.Unmarshal(data, &c) == nil && jetflow.ValidateRunID(c.ID) == nil {
		return &c, nil
	}
	if jetflow.ValidateRunID(s) == nil {
		return &cursor{ID: s}, nil
	}
	return nil, badRequestf(fmt.Sprintf("cursor %q: not a cursor of this list (pass the next or prev value of a page)", s))
}

// parseList reads state, function, limit, sort, order, after and before.
func parseList(q url.Values, defLimit int) (listQuery, error) {
	f, err := parseFilter(url.Values{"state": q["state"], "function": q["function"], "limit": q["limit"]}, defLimit)
	if err != nil {
		return listQuery{}, err
	}
	lq := listQuery{State: f.State, Function: f.Function, Limit: f.Limit, Sort: sortUpdated}
	if s := q.Get("sort"); s != "" {
		if !slices.Contains(sortKeys, s) {
			return lq, badRequestf(fmt.Sprintf("sort %q: one of %s", s, strings.Join(sortKeys, ", ")))
		}
		lq.Sort = s
	}
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		lq.Asc = true
	default:
		return lq, badRequestf(fmt.Sprintf("order %q: asc or desc", o))
	}
	if (lq.Sort == sortCreated || lq.Sort == sortUpdated) && lq.Asc {
		return lq, badRequestf(fmt.Sprintf("sort=%s is newest first only (order=desc): finding the oldest runs would read every record", lq.Sort))
	}
	if lq.After, err = parseCursor(q.Get("after")); err != nil {
		return lq, err
	}
	if lq.Before, err = parseCursor(q.Get("before")); err != nil {
		return lq, err
	}
	if lq.After != nil && lq.Before != nil {
		return lq, badRequestf("after and before: give one of the two")
	}
	return lq, nil
}

// values is the query string of lq without its cursors ("" values and
// defaults left out).
func (lq listQuery) values(defLimit int) url.Values {
	v := url.Values{}
	if lq.State != "" {
		v.Set("state", string(lq.State))
	}
	if lq.Function != "" {
		v.Set("function", lq.Function)
	}
	if lq.Limit != 0 && lq.Limit != defLimit {
		v.Set("limit", strconv.Itoa(lq.Limit))
	}
	if lq.Sort != sortUpdated {
		v.Set("sort", lq.Sort)
	}
	if lq.Asc {
		v.Set("order", "asc")
	}
	return v
}

// entry is what the header scan knows of one run.
type entry struct {
	ID       string
	State    jetflow.State
	Function string
	Due      int64 // scheduled time, Unix ms
	run      *jetflow.Run
	queuedFn string // a run known by its waiting message only, not read yet
	unplaced bool   // its times were not read: its keys are unplacedDue
	gone     bool   // read, and not found
}

var stateRank = map[jetflow.State]int64{jetflow.Pending: 0, jetflow.InProgress: 1, jetflow.Success: 2, jetflow.Failed: 3, jetflow.Canceled: 4}

// key is e's position in sort order s (the created order uses the record).
func (e *entry) key(s string) cursor {
	switch s {
	case sortScheduled:
		return cursor{K1: e.Due, ID: e.ID}
	case sortState:
		// Within a state, newest scheduled first in either direction of
		// the state order is not kept: the order is one tuple.
		return cursor{K1: stateRank[e.State], K2: e.Due, ID: e.ID}
	case sortCreated:
		if e.unplaced {
			return cursor{K1: unplacedDue * 1000, ID: e.ID}
		}
		if e.run != nil {
			return cursor{K1: e.run.CreationTime.UnixMicro(), ID: e.ID}
		}
	}
	return cursor{ID: e.ID}
}

func compareCursor(a, b cursor) int {
	return cmp.Or(cmp.Compare(a.K1, b.K1), cmp.Compare(a.K2, b.K2), strings.Compare(a.ID, b.ID))
}

// scanned is one header scan of the runs bucket: the runs of one function
// (or all) and their counts per state.
type scanned struct {
	entries []*entry
	counts  counts
}

// scan reads the record headers of the runs bucket, then the waiting
// messages of runs published without a record. Its cost is proportional to
// the records kept and the runs waiting: the one full pass a page costs.
func (h *handler) scan(ctx context.Context, function string) (scanned, error) {
	st := engine.Of(h.p).Store()
	queued := make(map[string]string)
	// Queued messages first: a run's record is written before its message
	// goes, so a run taken between the two scans is still seen once.
	if err := st.ScanQueued(ctx, function, func(fn, id string) { queued[id] = fn }); err != nil {
		return scanned{}, err
	}
	var s scanned
	err := st.Scan(ctx, func(hd kv.Header) {
		delete(queued, hd.ID)
		if function != "" && hd.Function != function {
			return
		}
		s.counts.Add(hd.State, 1)
		s.entries = append(s.entries, &entry{ID: hd.ID, State: hd.State, Function: hd.Function, Due: hd.Due.UnixMilli()})
	})
	if err != nil {
		return s, err
	}
	// A run with no record yet is known by its message, which holds its
	// times: read one by one, the first maxQueuedReads in id order (their
	// number is the backlog of runs no worker has taken). The others are
	// not placed by time: they come first in the newest-first orders (in
	// id order among themselves) and are read when they are on the page.
	qids := slices.Sorted(maps.Keys(queued))
	for i, id := range qids {
		fn := queued[id]
		if i >= h.queuedReads {
			s.counts.Add(jetflow.Pending, 1)
			s.entries = append(s.entries, &entry{ID: id, State: jetflow.Pending, Function: fn, Due: unplacedDue, queuedFn: fn, unplaced: true})
			continue
		}
		r, ok, err := st.QueuedRunOf(ctx, fn, id)
		if err != nil {
			return s, err
		}
		if !ok {
			if r, err = st.Show(ctx, id); err != nil {
				continue // taken and ended meanwhile, or expired
			}
		}
		s.counts.Add(r.State, 1)
		s.entries = append(s.entries, &entry{ID: id, State: r.State, Function: r.Name, Due: r.ScheduledTime.UnixMilli(), run: r})
	}
	return s, nil
}

// unplacedDue is the sort key of a waiting run whose time was not read:
// after every real time (it is shown first newest first).
const unplacedDue = math.MaxInt64 / 2000

// maxQueuedReads bounds the waiting messages a page reads to know their
// times.
const maxQueuedReads = 5000

// read reads e's record (or its waiting message) unless it has it; false
// when the run is gone (expired, or taken and ended without a record).
func (h *handler) read(ctx context.Context, e *entry) (bool, error) {
	if e.run != nil || e.gone {
		return e.run != nil, nil
	}
	st := engine.Of(h.p).Store()
	r, err := st.Show(ctx, e.ID)
	if errors.Is(err, jetflow.ErrNotFound) && e.queuedFn != "" {
		q, ok, qerr := st.QueuedRunOf(ctx, e.queuedFn, e.ID)
		switch {
		case qerr != nil:
			return false, qerr
		case ok:
			r, err = q, nil
		default:
			r, err = st.Show(ctx, e.ID) // taken meanwhile: the record is there
		}
	}
	if errors.Is(err, jetflow.ErrNotFound) {
		e.gone = true
		return false, nil
	}
	if errors.Is(err, jetflow.ErrBadRecord) {
		// A record jetflow did not write (by hand, or by something
		// else): one row saying so, as the run index's pages show it,
		// instead of no page at all.
		e.run = &jetflow.Run{ID: e.ID, Error: err.Error()}
		return true, nil
	}
	if err != nil {
		return false, err
	}
	e.run = r
	return true, nil
}

// readAhead is how many records the created order reads at once, and
// readers how many requests it has in flight.
const (
	readAhead = 64
	readers   = 16
)

// prefetch reads the records of es side by side (the walk in created
// order then finds them read).
func (h *handler) prefetch(ctx context.Context, es []*entry) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, readers)
	for _, e := range es {
		if e.run != nil || e.gone || e.unplaced {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := h.read(ctx, e); err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// listPage is the body of GET /api/runs: the runs as the record has them
// (jetflow.Run's JSON), in the order asked for.
type listPage struct {
	Runs []*jetflow.Run `json:"runs"`
	// Next is the cursor of the next page (pass it as after=), "" on the
	// last page; Prev the cursor of the previous one (before=), "" on the
	// first.
	Next string `json:"next,omitempty"`
	Prev string `json:"prev,omitempty"`
	// Sort and Order say the order of Runs.
	Sort  string `json:"sort"`
	Order string `json:"order"`
	// Counts are the runs of the function filter (or all) in each state.
	Counts counts `json:"counts"`
	// Indexed: the page was read from the run index (sort=updated with a
	// scheduler running), not from a scan of every record.
	Indexed bool `json:"indexed"`
}

// page reads one page of runs: one header scan (which also gives the
// counts), then only the records of the page, except in created order:
// there the candidates are read newest scheduled first until no older one
// can have been created later (a run is created at or before its scheduled
// time), so a page near the top reads about as many records as it shows.
func (h *handler) page(ctx context.Context, lq listQuery) (listPage, error) {
	if lq.Sort == sortUpdated {
		return h.pageUpdated(ctx, lq)
	}
	s, err := h.scan(ctx, lq.Function)
	if err != nil {
		return listPage{}, err
	}
	out := listPage{Runs: []*jetflow.Run{}, Sort: lq.Sort, Order: "desc", Counts: s.counts}
	out.Counts.Source, out.Counts.AsOf = "scan", time.Now().UTC()
	if lq.Asc {
		out.Order = "asc"
	}
	cands := s.entries[:0:0]
	for _, e := range s.entries {
		if lq.State == "" || e.State == lq.State {
			cands = append(cands, e)
		}
	}
	var rows []*entry
	var hasPrev, hasNext bool
	if lq.Sort == sortCreated {
		rows, hasPrev, hasNext, err = h.pageCreated(ctx, lq, cands)
		if err != nil {
			return out, err
		}
	} else {
		// before(a, b): a comes first in the page order.
		sign := -1
		if lq.Asc {
			sign = 1
		}
		slices.SortFunc(cands, func(a, b *entry) int { return sign * compareCursor(a.key(lq.Sort), b.key(lq.Sort)) })
		var lo, hi int
		switch {
		case lq.After != nil:
			lo, _ = slices.BinarySearchFunc(cands, *lq.After, func(e *entry, c cursor) int { return sign * compareCursor(e.key(lq.Sort), c) })
			if lo < len(cands) && compareCursor(cands[lo].key(lq.Sort), *lq.After) == 0 {
				lo++
			}
			hi = min(len(cands), lo+lq.Limit)
		case lq.Before != nil:
			hi, _ = slices.BinarySearchFunc(cands, *lq.Before, func(e *entry, c cursor) int { return sign * compareCursor(e.key(lq.Sort), c) })
			lo = max(0, hi-lq.Limit)
		default:
			hi = min(len(cands), lq.Limit)
		}
		rows, hasPrev, hasNext = cands[lo:hi], lo > 0, hi < len(cands)
		for _, e := range rows {
			if _, err := h.read(ctx, e); err != nil { // a run gone since the scan is left out
				return out, err
			}
		}
	}
	for _, e := range rows {
		if e.run != nil {
			out.Runs = append(out.Runs, e.run)
		}
	}
	if len(rows) > 0 {
		if hasPrev {
			out.Prev = rows[0].key(lq.Sort).String()
		}
		if hasNext {
			out.Next = rows[len(rows)-1].key(lq.Sort).String()
		}
	}
	return out, nil
}

// pageUpdated is a page newest first by last write: from the run index
// when a scheduler keeps it (cost in proportion to the page), otherwise
// from a header scan; the counts come from the index's checkpoint (or the
// scan) likewise.
func (h *handler) pageUpdated(ctx context.Context, lq listQuery) (listPage, error) {
	out := listPage{Runs: []*jetflow.Run{}, Sort: lq.Sort, Order: "desc"}
	rd := runindex.NewReader(engine.Of(h.p).Store())
	q := runindex.Query{State: lq.State, Function: lq.Function, Limit: lq.Limit}
	if lq.After != nil {
		q.After = lq.After.P
	}
	if lq.Before != nil {
		q.Before = lq.Before.P
	}
	if lq.After.otherOrder() || lq.Before.otherOrder() {
		return out, badRequestf("cursor: not a cursor of the updated order (pass the next or prev value of a page)")
	}
	pg, err := rd.List(ctx, q)
	out.Indexed = err == nil
	if errors.Is(err, runindex.ErrUnavailable) {
		pg, err = rd.ListScan(ctx, q)
	}
	if errors.Is(err, runindex.ErrBadCursor) {
		return out, badRequestf(err.Error())
	}
	if err != nil {
		return out, err
	}
	out.Runs = append(out.Runs, pg.Runs...)
	if pg.Next != "" {
		out.Next = cursor{ID: pg.Runs[len(pg.Runs)-1].ID, P: pg.Next}.String()
	}
	if pg.Prev != "" {
		out.Prev = cursor{ID: pg.Runs[0].ID, P: pg.Prev}.String()
	}
	if out.Counts, err = h.counts(ctx, lq.Function); err != nil {
		return out, err
	}
	return out, nil
}

// pageCreated is a page newest first by creation time. A run's creation
// time is in its record only, but it is never later than its scheduled
// time (the producer schedules at now or later; a retry moves it later),
// which the header scan has: candidates are read newest scheduled first,
// and the walk stops once the next one's scheduled time is older than the
// creation time of the page's last row.
func (h *handler) pageCreated(ctx context.Context, lq listQuery, cands []*entry) (rows []*entry, hasPrev, hasNext bool, err error) {
	slices.SortFunc(cands, func(a, b *entry) int { return cmp.Or(cmp.Compare(b.Due, a.Due), strings.Compare(b.ID, a.ID)) })
	// An unplaced run's key is known without reading it; it is read if
	// it is on the page.
	read := func(e *entry) (bool, error) {
		if e.unplaced {
			return true, nil
		}
		return h.read(ctx, e)
	}
	defer func() {
		for _, e := range rows {
			if err == nil && e.unplaced {
				_, err = h.read(ctx, e)
			}
		}
	}()
	desc := func(a, b *entry) int { return compareCursor(b.key(sortCreated), a.key(sortCreated)) }
	if lq.Before != nil {
		// The rows created after the cursor: every one is scheduled at
		// or after the cursor's creation time.
		var above []*entry
		for i, e := range cands {
			if dueEnd(e) <= lq.Before.K1 {
				break
			}
			if i%readAhead == 0 {
				if err := h.prefetch(ctx, cands[i:min(len(cands), i+readAhead)]); err != nil {
					return nil, false, false, err
				}
			}
			ok, err := read(e)
			if err != nil {
				return nil, false, false, err
			}
			if ok && compareCursor(e.key(sortCreated), *lq.Before) > 0 {
				above = append(above, e)
			}
		}
		slices.SortFunc(above, desc)
		lo := max(0, len(above)-lq.Limit)
		return above[lo:], lo > 0, true, nil
	}
	// The page after the cursor (or the first): keep the best Limit+1.
	var best []*entry
	for i, e := range cands {
		if len(best) > lq.Limit && dueEnd(e) <= best[lq.Limit].key(sortCreated).K1 {
			break
		}
		if i%readAhead == 0 {
			if err := h.prefetch(ctx, cands[i:min(len(cands), i+readAhead)]); err != nil {
				return nil, false, false, err
			}
		}
		ok, err := read(e)
		if err != nil {
			return nil, false, false, err
		}
		if !ok || (lq.After != nil && compareCursor(e.key(sortCreated), *lq.After) >= 0) {
			continue
		}
		i, _ := slices.BinarySearchFunc(best, e, desc)
		best = slices.Insert(best, i, e)
		if len(best) > lq.Limit+1 {
			best = best[:lq.Limit+1]
		}
	}
	if len(best) > lq.Limit {
		return best[:lq.Limit], lq.After != nil, true, nil
	}
	return best, lq.After != nil, false, nil
}

// dueEnd is the end of the millisecond of e's scheduled time, in
// microseconds (the header has milliseconds; the created order uses
// microseconds): e was created before it.
func dueEnd(e *entry) int64 { return (e.Due + 1) * 1000 }

// durations of a run for the list: how long it waited for a worker (its
// start minus its scheduled time) and how long it ran (to its end, or to
// now while it runs).
func queueWait(r *jetflow.Run) time.Duration {
	if r.StartedTime.IsZero() || r.ScheduledTime.IsZero() {
		return -1
	}
	return max(0, r.StartedTime.Sub(r.ScheduledTime))
}

func runDuration(r *jetflow.Run, now time.Time) time.Duration {
	if r.StartedTime.IsZero() {
		return -1
	}
	end := r.CompletedTime
	if end.IsZero() {
		if r.State.Terminal() {
			return -1
		}
		end = now
	}
	return max(0, end.Sub(r.StartedTime))
}
