package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/nats-io/nats.go/jetstream"
)

// states in the order the dashboard shows them.
var states = []jetflow.State{jetflow.Pending, jetflow.InProgress, jetflow.Success, jetflow.Failed, jetflow.Canceled}

// counts are the runs in each state (of one function, or of all): the run
// index's counts, and where they come from.
type counts struct {
	runindex.Counts
	// Source is "index" (the scheduler's run index, one read) or "scan"
	// (every record read: no scheduler indexing), AsOf when they were
	// true; Rebuilding says the index is recounting (the counts are its
	// last exact ones, at AsOf). See docs/runindex.md.
	Source     string    `json:"source,omitempty"`
	AsOf       time.Time `json:"asOf,omitzero"`
	Rebuilding bool      `json:"rebuilding,omitempty"`
}

// cancelResult is the body of POST /api/runs/<id>/cancel.
type cancelResult struct {
	// Canceled is false when the run had ended already (nothing to cancel).
	Canceled bool         `json:"canceled"`
	Run      *jetflow.Run `json:"run"`
}

// parseState accepts a state case-insensitively ("inprogress", "in_progress").
func parseState(s string) (jetflow.State, error) {
	if s == "" {
		return "", nil
	}
	norm := strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	for _, st := range states {
		if strings.ToLower(string(st)) == norm {
			return st, nil
		}
	}
	return "", badRequestf(fmt.Sprintf("unknown state %q (pending, inProgress, success, failed, canceled)", s))
}

// parseFilter reads state, function, limit and after.
func parseFilter(q url.Values, defLimit int) (producer.Filter, error) {
	var f producer.Filter
	var err error
	if f.State, err = parseState(q.Get("state")); err != nil {
		return f, err
	}
	if f.Function = strings.TrimSpace(q.Get("function")); f.Function != "" {
		if err := jetflow.ValidateName(f.Function); err != nil {
			return f, badRequestf("function: " + err.Error())
		}
	}
	f.Limit = defLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return f, badRequestf(fmt.Sprintf("limit %q: must be 1 to 1000", v))
		}
		f.Limit = n
	}
	if f.After = q.Get("after"); f.After != "" {
		if err := jetflow.ValidateRunID(f.After); err != nil {
			return f, badRequestf("after: " + err.Error())
		}
	}
	return f, nil
}

// get reads run id; an invalid id is a bad request, an unknown one
// jetflow.ErrNotFound.
func (h *handler) get(ctx context.Context, id string) (*jetflow.Run, error) {
	if err := jetflow.ValidateRunID(id); err != nil {
		return nil, badRequestf(fmt.Sprintf("run %q: not a valid run id (letters, digits, '_' or '-')", id))
	}
	r, err := h.p.Get(ctx, id)
	if errors.Is(err, jetflow.ErrNotFound) {
		return nil, fmt.Errorf("run %s: %w", id, jetflow.ErrNotFound)
	}
	return r, err
}

// cancel cancels run id unless it has ended, and returns its record after.
func (h *handler) cancel(ctx context.Context, id string) (cancelResult, error) {
	before, err := h.get(ctx, id)
	if err != nil {
		return cancelResult{}, err
	}
	if before.State.Terminal() {
		return cancelResult{Run: before}, nil
	}
	res, err := h.p.CancelRun(ctx, id)
	if err != nil && !res.Canceled {
		if errors.Is(err, jetflow.ErrNotFound) {
			return cancelResult{}, fmt.Errorf("run %s: %w", id, jetflow.ErrNotFound)
		}
		return cancelResult{}, err
	}
	if err != nil {
		// Canceled: the run will not start, but its waiting entry could
		// not be removed (a NATS user without purge rights).
		h.log.WarnContext(ctx, "run canceled, waiting entry left", "run_id", id, "error", err)
	}
	after, err := h.get(ctx, id)
	if err != nil {
		return cancelResult{}, err
	}
	// Canceled is what Cancel did: false when the run ended meanwhile.
	return cancelResult{Canceled: res.Canceled, Run: after}, nil
}

// counts reads the runs in each state from the run index's checkpoint
// (one read, plus the subjects of the runs waiting without a record) when
// a scheduler keeps it, and otherwise scans every record's header (and
// says so in Source).
func (h *handler) counts(ctx context.Context, function string) (counts, error) {
	rd := runindex.NewReader(engine.Of(h.p).Store())
	res, err := rd.Counts(ctx, function)
	if errors.Is(err, runindex.ErrUnavailable) {
		res, err = rd.CountsScan(ctx, function)
	}
	if err != nil {
		return counts{}, err
	}
	return counts{Counts: res.Counts, Source: res.Source, AsOf: res.AsOf, Rebuilding: res.Rebuilding}, nil
}

// functions reads the functions registry (kv.ReadFunctions): entries of
// workers that are gone have expired. Sorted by function, then worker. No
// bucket yet (no worker ever started) is no function.
func (h *handler) functions(ctx context.Context) ([]kv.FunctionInfo, error) {
	st := engine.Of(h.p).Store()
	fns, err := kv.ReadFunctions(ctx, st.JetStream(), st.Config(), "")
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return []kv.FunctionInfo{}, nil
	}
	return fns, err
}

// errNoCrons answers the crons endpoints of a dashboard without Config.Crons.
var errNoCrons = fmt.Errorf("crons are not configured on this dashboard (Config.Crons): %w", jetflow.ErrNotFound)

func (h *handler) crons(ctx context.Context) ([]*kv.CronInfo, error) {
	if h.cfg.Crons == nil {
		return nil, errNoCrons
	}
	list, err := h.cfg.Crons.List(ctx)
	if list == nil {
		list = []*kv.CronInfo{}
	}
	return list, err
}

func (h *handler) apiList(w http.ResponseWriter, r *http.Request) {
	lq, err := parseList(r.URL.Query(), 100)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	page, err := h.page(ctx, lq)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

func (h *handler) apiGet(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	run, err := h.get(ctx, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

func (h *handler) apiCancel(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	id := r.PathValue("id")
	res, err := h.cancel(ctx, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// A plain HTML form (the page without its script) goes back to the run.
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, h.path("/runs/"+url.PathEscape(id)), http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (h *handler) apiCounts(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(url.Values{"function": r.URL.Query()["function"]}, 1)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	c, err := h.counts(ctx, f.Function)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (h *handler) apiFunctions(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	fns, err := h.functions(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"functions": fns})
}

func (h *handler) apiCrons(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	list, err := h.crons(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"crons": list})
}
