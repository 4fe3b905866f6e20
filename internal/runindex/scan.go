package runindex

import (
	"context"
	"errors"
	"slices"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
)

// ListScan is List without the index: it reads the header of every record
// (and the subjects of the runs waiting), then the records of the page.
// Same order and cursors as List; its cost is proportional to the records
// kept. The fallback when no indexer runs.
func (r *Reader) ListScan(ctx context.Context, q Query) (Page, error) {
	after, before, err := q.positions()
	if err != nil {
		return Page{}, err
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	p := &pager{r: r, q: q, seen: map[string]bool{}}
	sc, err := p.scan(ctx)
	if err != nil {
		return Page{}, err
	}
	if before != nil {
		return sc.backward(ctx, *before)
	}
	return sc.forward(ctx, after)
}

// scanned is every run of a ListScan's query, newest first: the records'
// positions, and the runs waiting without a record (byID).
type scanned struct {
	p    *pager
	all  []pos
	byID map[string]*jetflow.Run
}

// scan reads the header of every record that fits the query, and the
// subjects of the runs waiting.
func (p *pager) scan(ctx context.Context) (*scanned, error) {
	r, q := p.r, p.q
	// Queued messages first: a run's record is written before its message
	// goes, so a run taken between the two scans is still seen once.
	queued := map[string]string{}
	if q.State == "" || q.State == jetflow.Pending {
		if err := r.store.ScanQueued(ctx, q.Function, func(fn, id string) { queued[id] = fn }); err != nil {
			return nil, err
		}
	}
	sc := &scanned{p: p, byID: map[string]*jetflow.Run{}}
	err := r.store.Scan(ctx, func(h kv.Header) {
		delete(queued, h.ID)
		if p.match(h.State, h.Function) {
			sc.all = append(sc.all, pos{class: classTail, seq: h.Revision, id: h.ID})
		}
	})
	if err != nil {
		return nil, err
	}
	for id, fn := range queued {
		read.Add(1)
		run, seq, ok, err := r.store.QueuedRunSeq(ctx, fn, id)
		if err != nil {
			return nil, err
		}
		if !ok {
			// Taken meanwhile: its record was written before its
			// message went; it was written after the scan, so it is
			// left to the next page read.
			continue
		}
		sc.byID[id] = run
		sc.all = append(sc.all, pos{class: classQueued, seq: seq, id: id})
	}
	slices.SortFunc(sc.all, func(a, b pos) int {
		if newer(a, b) {
			return -1
		}
		if newer(b, a) {
			return 1
		}
		return 0
	})
	return sc, nil
}

// load reads the run at ps: nil when it no longer fits the query.
func (sc *scanned) load(ctx context.Context, ps pos) (*jetflow.Run, error) {
	if ps.class == classQueued {
		if run := sc.byID[ps.id]; sc.p.match(run.State, run.Name) {
			return run, nil
		}
		return nil, nil
	}
	return sc.p.record(ctx, ps.id, 0)
}

// add loads the run at ps into w; a record gone meanwhile is left out.
func (sc *scanned) add(ctx context.Context, w *pageRows, ps pos) error {
	run, err := sc.load(ctx, ps)
	if errors.Is(err, jetflow.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if run != nil {
		w.add(ps, run)
	}
	return nil
}

// backward is the page of the rows just newer than before, walked oldest
// first.
func (sc *scanned) backward(ctx context.Context, before pos) (Page, error) {
	w := &pageRows{want: sc.p.q.Limit + 1}
	i := len(sc.all) - 1
	for ; i >= 0 && !newer(sc.all[i], before); i-- {
	}
	for ; i >= 0 && !w.full(); i-- {
		if err := sc.add(ctx, w, sc.all[i]); err != nil {
			return Page{}, err
		}
	}
	return oldestFirst(w.rows, sc.p.q.Limit, pos.scanString), nil
}

// forward is the page of the rows older than after (nil: the first page).
func (sc *scanned) forward(ctx context.Context, after *pos) (Page, error) {
	w := &pageRows{want: sc.p.q.Limit + 1}
	for _, ps := range sc.all {
		if after != nil && !newer(*after, ps) {
			continue
		}
		if w.full() {
			break
		}
		if err := sc.add(ctx, w, ps); err != nil {
			return Page{}, err
		}
	}
	return newestFirst(w.rows, sc.p.q.Limit, after != nil, pos.scanString), nil
}

// scanString is the cursor of a row of ListScan: a record's is its
// revision (as the tail of List), so cursors carry over between the two.
func (p pos) scanString() string { return p.String() }

// CountsScan counts the runs of function fn (all when "") in each state by
// reading every record's header and the subjects of the runs waiting: the
// fallback when no indexer runs (Source "scan").
func (r *Reader) CountsScan(ctx context.Context, fn string) (CountsResult, error) {
	res := CountsResult{Source: "scan"}
	queued := map[string]bool{}
	if err := r.store.ScanQueued(ctx, fn, func(_, id string) { queued[id] = true }); err != nil {
		return res, err
	}
	err := r.store.Scan(ctx, func(h kv.Header) {
		delete(queued, h.ID)
		if fn == "" || h.Function == fn {
			res.Add(h.State, 1)
		}
	})
	res.Add(jetflow.Pending, int64(len(queued)))
	res.AsOf = timeNow()
	return res, err
}
