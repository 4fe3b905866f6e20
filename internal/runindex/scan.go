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
	// Queued messages first: a run's record is written before its message
	// goes, so a run taken between the two scans is still seen once.
	queued := map[string]string{}
	if q.State == "" || q.State == jetflow.Pending {
		if err := r.store.ScanQueued(ctx, q.Function, func(fn, id string) { queued[id] = fn }); err != nil {
			return Page{}, err
		}
	}
	var all []pos // newest first
	err = r.store.Scan(ctx, func(h kv.Header) {
		delete(queued, h.ID)
		if p.match(h.State, h.Function) {
			all = append(all, pos{class: classTail, seq: h.Revision, id: h.ID})
		}
	})
	if err != nil {
		return Page{}, err
	}
	byID := map[string]*jetflow.Run{}
	for id, fn := range queued {
		read.Add(1)
		run, seq, ok, err := r.store.QueuedRunSeq(ctx, fn, id)
		if err != nil {
			return Page{}, err
		}
		if !ok {
			// Taken meanwhile: its record was written before its
			// message went; it was written after the scan, so it is
			// left to the next page read.
			continue
		}
		byID[id] = run
		all = append(all, pos{class: classQueued, seq: seq, id: id})
	}
	slices.SortFunc(all, func(a, b pos) int {
		if newer(a, b) {
			return -1
		}
		if newer(b, a) {
			return 1
		}
		return 0
	})
	load := func(ps pos) (*jetflow.Run, error) {
		if ps.class == classQueued {
			if run := byID[ps.id]; p.match(run.State, run.Name) {
				return run, nil
			}
			return nil, nil
		}
		return p.record(ctx, ps.id, 0)
	}
	var page Page
	var rows []row
	if before != nil {
		// The rows just newer than before, walked oldest first.
		i := len(all) - 1
		for ; i >= 0 && !newer(all[i], *before); i-- {
		}
		for ; i >= 0 && len(rows) <= q.Limit; i-- {
			run, err := load(all[i])
			if errors.Is(err, jetflow.ErrNotFound) {
				continue
			}
			if err != nil {
				return page, err
			}
			if run != nil {
				rows = append(rows, row{all[i], run})
			}
		}
		if len(rows) > q.Limit {
			rows = rows[:q.Limit]
			page.Prev = rows[len(rows)-1].pos.scanString()
		}
		slices.Reverse(rows)
		if len(rows) > 0 {
			page.Next = rows[len(rows)-1].pos.scanString()
		}
	} else {
		for _, ps := range all {
			if after != nil && !newer(*after, ps) {
				continue
			}
			if len(rows) > q.Limit {
				break
			}
			run, err := load(ps)
			if errors.Is(err, jetflow.ErrNotFound) {
				continue
			}
			if err != nil {
				return page, err
			}
			if run != nil {
				rows = append(rows, row{ps, run})
			}
		}
		if len(rows) > q.Limit {
			rows = rows[:q.Limit]
			page.Next = rows[len(rows)-1].pos.scanString()
		}
		if after != nil && len(rows) > 0 {
			page.Prev = rows[0].pos.scanString()
		}
	}
	for _, rw := range rows {
		page.Runs = append(page.Runs, rw.run)
	}
	return page, nil
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
