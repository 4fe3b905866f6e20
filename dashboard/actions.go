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
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
)

// CronController is a CronLister that can also pause and resume crons:
// *scheduler.Crons implements it. When Config.Crons implements it, POST
// /api/crons/<name>/pause and /resume work, and the crons page has Pause
// and Resume buttons for a NATS user that may write the crons bucket;
// otherwise they answer 501.
type CronController interface {
	CronLister
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) error
}

// errConflict marks a request that does not fit the run's state (409).
var errConflict = errors.New("conflict")

type conflict struct{ msg string }

func (e *conflict) Error() string { return e.msg }
func (e *conflict) Unwrap() error { return errConflict }

// errNotImplemented: the dashboard was not given what the request needs
// (501).
var errNotImplemented = errors.New("not implemented")

// rerunSuffix joins a re-run's id to the run it retries: the n-th re-run
// of run X is X-rerun-n, and its Parent is X. The link is found both ways
// without writing the original run's record (terminal records are never
// changed).
const rerunSuffix = "-rerun-"

// maxReruns bounds the re-runs of one run looked up and created.
const maxReruns = 50

// rerunID is the id of the n-th re-run of id.
func rerunID(id string, n int) string { return id + rerunSuffix + strconv.Itoa(n) }

// retryOf returns the run that run r re-runs ("" if r is not a re-run).
func retryOf(r *jetflow.Run) string {
	i := strings.LastIndex(r.ID, rerunSuffix)
	if i <= 0 || r.Parent != r.ID[:i] {
		return ""
	}
	if _, err := strconv.Atoi(r.ID[i+len(rerunSuffix):]); err != nil {
		return ""
	}
	return r.Parent
}

// rerunResult is the body of POST /api/runs/<id>/rerun.
type rerunResult struct {
	// Run is the new run's record.
	Run *jetflow.Run `json:"run"`
	// RetryOf is the run re-run (the new run's parent).
	RetryOf string `json:"retryOf"`
}

// reruns reads the re-runs of run id, oldest first.
func (h *handler) reruns(ctx context.Context, id string) ([]*jetflow.Run, error) {
	var out []*jetflow.Run
	for n := 1; n <= maxReruns; n++ {
		rid := rerunID(id, n)
		if jetflow.ValidateRunID(rid) != nil {
			break
		}
		r, err := h.p.Get(ctx, rid)
		if errors.Is(err, jetflow.ErrNotFound) {
			break
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// rerun starts a new run of a failed or canceled run's function with the
// same arguments (and its max attempts and timeout), id <id>-rerun-<n>
// and the run as its parent. A request repeated before the new run is
// written creates it once (its id is an idempotency key).
func (h *handler) rerun(ctx context.Context, id string) (rerunResult, error) {
	old, err := h.get(ctx, id)
	if err != nil {
		return rerunResult{}, err
	}
	if old.State != jetflow.Failed && old.State != jetflow.Canceled {
		return rerunResult{}, &conflict{fmt.Sprintf("run %s is %s: only a failed or canceled run is re-run", id, old.State)}
	}
	prev, err := h.reruns(ctx, id)
	if err != nil {
		return rerunResult{}, err
	}
	n := len(prev) + 1
	nid := rerunID(id, n)
	if n > maxReruns {
		return rerunResult{}, &conflict{fmt.Sprintf("run %s has been re-run %d times already", id, maxReruns)}
	}
	if err := jetflow.ValidateRunID(nid); err != nil {
		return rerunResult{}, badRequestf(fmt.Sprintf("run %s: its id is too long for a re-run's id (%s)", id, nid))
	}
	call := jetflow.Call{Name: old.Name, Kind: old.Kind, Args: old.Args}
	opts := []producer.Option{producer.WithID(nid), producer.WithParent(id)}
	if old.MaxAttempts > 0 {
		opts = append(opts, producer.WithMaxAttempts(old.MaxAttempts))
	}
	if old.Timeout > 0 {
		opts = append(opts, producer.WithTimeout(old.Timeout))
	}
	if err := h.enqueue(ctx, call, opts...); err != nil {
		return rerunResult{}, err
	}
	r, err := h.get(ctx, nid)
	if err != nil {
		return rerunResult{}, err
	}
	return rerunResult{Run: r, RetryOf: id}, nil
}

// enqueue starts a run (a re-run, a cron triggered by hand) whose id is an
// idempotency key: a repeated request is no error. A user that may not
// write its record fails at once with the server's violation; one that may
// write it but not publish the run gets it recorded, and the scheduler's
// repair sweep publishes it (as for any producer: the record is durable).
func (h *handler) enqueue(ctx context.Context, call jetflow.Call, opts ...producer.Option) error {
	err := h.act(ctx, func(ctx context.Context) error {
		_, err := h.p.Enqueue(ctx, call, opts...)
		return err
	})
	if errors.Is(err, producer.ErrAlreadyExists) {
		return nil
	}
	return err
}

func (h *handler) apiRerun(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	res, err := h.rerun(ctx, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, h.path("/runs/"+url.PathEscape(res.Run.ID)), http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusCreated, res)
}

func (h *handler) apiReruns(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	run, err := h.get(ctx, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	list, err := h.reruns(ctx, run.ID)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if list == nil {
		list = []*jetflow.Run{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"retryOf": retryOf(run), "reruns": list})
}

// cron finds cron name.
func (h *handler) cron(ctx context.Context, name string) (*kv.CronInfo, error) {
	list, err := h.crons(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range list {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("cron %q: %w", name, jetflow.ErrNotFound)
}

// cronResult is the body of POST /api/crons/<name>/pause, /resume and
// /trigger.
type cronResult struct {
	Cron *kv.CronInfo `json:"cron"`
	// Run is the run trigger started.
	Run *jetflow.Run `json:"run,omitempty"`
}

// unusableCron refuses a button on a cron whose stored record cannot be
// used (kv.CronInfo.Unreadable): 422 with the reason. It matches
// kv.ErrBadCronRecord (scheduler.ErrBadCronRecord) and
// jetflow.ErrBadRecord.
type unusableCron struct{ action, why string }

func (e *unusableCron) Error() string { return e.action + " refused: " + e.why }
func (e *unusableCron) Unwrap() error { return kv.ErrBadCronRecord }

func (h *handler) apiCronAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := h.ctx(r)
		defer cancel()
		name := r.PathValue("name")
		c, err := h.cron(ctx, name)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if c.Unreadable != "" {
			// Its schedule, its name or its call may be anything: it is
			// neither run nor changed (Delete removes it).
			h.fail(w, r, &unusableCron{action: action, why: c.Unreadable})
			return
		}
		var res cronResult
		switch action {
		case "pause", "resume":
			ctl, ok := h.cfg.Crons.(CronController)
			if !ok {
				h.fail(w, r, fmt.Errorf("%w: this dashboard's Config.Crons cannot pause or resume crons (give it a *scheduler.Crons)", errNotImplemented))
				return
			}
			err = h.act(ctx, func(ctx context.Context) error {
				if action == "pause" {
					return ctl.Pause(ctx, name)
				}
				return ctl.Resume(ctx, name)
			})
			if err != nil {
				h.fail(w, r, err)
				return
			}
		case "trigger":
			id := engine.CronTriggerID(name, time.Now())
			call := jetflow.Call{Name: c.Function, Kind: c.Kind, Args: c.Args}
			if err := h.enqueue(ctx, call, producer.WithID(id)); err != nil {
				h.fail(w, r, err)
				return
			}
			if res.Run, err = h.get(ctx, id); err != nil {
				h.fail(w, r, err)
				return
			}
		}
		if res.Cron, err = h.cron(ctx, name); err != nil {
			h.fail(w, r, err)
			return
		}
		if strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, h.path("/crons"), http.StatusSeeOther)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// favicon is the dashboard's icon: a lightning bolt on the header's color.
const favicon = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" fill="#141a26"/><path d="M18.5 3 7 18h7.5L12 29l13-16h-8z" fill="#4ade80"/></svg>`

func faviconHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "public, max-age=86400")
	_, _ = w.Write([]byte(favicon))
}

// functionResult is the answer to a function's pause or resume.
type functionResult struct {
	Function string `json:"function"`
	Paused   bool   `json:"paused"`
}

// apiFunctionAction pauses (or resumes) a function on every worker: its
// runs wait as pending meanwhile (producer.PauseFunction).
func (h *handler) apiFunctionAction(pause bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := h.ctx(r)
		defer cancel()
		name := r.PathValue("name")
		err := h.act(ctx, func(ctx context.Context) error {
			if pause {
				return h.p.PauseFunction(ctx, name)
			}
			return h.p.ResumeFunction(ctx, name)
		})
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, h.path("/functions"), http.StatusSeeOther)
			return
		}
		writeJSON(w, http.StatusOK, functionResult{Function: name, Paused: pause})
	}
}

// apiSteps answers the steps of a workflow run ({"steps": null} for a run
// that is not one, or when the dashboard has no Config.Steps).
func (h *handler) apiSteps(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	id := r.PathValue("id")
	if err := jetflow.ValidateRunID(id); err != nil {
		h.fail(w, r, err)
		return
	}
	var steps any
	if h.cfg.Steps != nil {
		var err error
		if steps, err = h.cfg.Steps(ctx, id); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"steps": steps})
}
