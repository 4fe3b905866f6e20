package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/nats-io/nats.go"
)

// CronLister lists crons for the crons page and /api/crons.
// *scheduler.Crons implements it (Scheduler.Crons, scheduler.NewCrons), and
// so does CronsOf, which reads the crons bucket without the scheduler
// (scheduler.CronInfo is kv.CronInfo).
type CronLister interface {
	List(ctx context.Context) ([]*kv.CronInfo, error)
}

// CronsOf is a CronLister reading the crons bucket of p's streams (see
// kv.Store.Crons): for a dashboard in a process without a scheduler.
func CronsOf(p *producer.Producer) CronLister { return storeCrons{engine.Of(p).Store()} }

type storeCrons struct{ s *kv.Store }

func (c storeCrons) List(ctx context.Context) ([]*kv.CronInfo, error) { return c.s.Crons(ctx) }

// Config configures the dashboard. The zero value is usable.
type Config struct {
	// Logger receives warnings: a failed read, an events connection that
	// ended on an error. Default: discard.
	Logger *slog.Logger
	// BasePath is the path the dashboard is served under, e.g. "/jetflow":
	// the handler strips it itself and prefixes its links with it. Default
	// "" (the root).
	BasePath string
	// Crons, if set, is listed on /crons and /api/crons. Default nil: no
	// crons page.
	Crons CronLister
	// Steps, if set, returns the steps of run id when it is a workflow
	// (nil, nil when it is not): the run page shows them as a timeline,
	// live, and /api/runs/{id}/steps answers them. The dashboard does not
	// import the workflow package (it would pull in the worker): give it
	// workflow.StepsFunc(p) from a program that does, as jetflow dashboard and
	// jetflow dev do.
	Steps func(ctx context.Context, id string) (any, error)
	// CountsInterval is the shortest time between two "counts" events on
	// one events connection (each is a header-only scan of the runs
	// bucket). Default 1 s.
	CountsInterval time.Duration
	// Heartbeat is how often an idle events connection gets a comment line,
	// so that proxies keep it open. Default 15 s.
	Heartbeat time.Duration
	// RequestTimeout bounds the NATS work of one request (not of the
	// events stream). Default 15 s.
	RequestTimeout time.Duration
	// AllowedHosts are the values of the Host header served besides
	// loopback ones (localhost, 127.0.0.0/8, [::1], on any port): each a
	// host name or address (any port) or host:port; "*" serves any Host.
	// Every other request gets 421 Misdirected Request, whatever its route
	// and method: a page on another name that resolves to this server (DNS
	// rebinding) cannot read runs or cancel them. Set it to the names the
	// dashboard is reached by, e.g. behind a reverse proxy that keeps the
	// Host. Default: loopback only.
	AllowedHosts []string
	// Middleware, when set, wraps every request after the Host check: the
	// seam for authentication (BearerToken, BasicAuth, or your own, e.g.
	// an OAuth proxy's header check). Default: none, no login.
	Middleware func(http.Handler) http.Handler
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.BasePath = strings.TrimRight(c.BasePath, "/")
	if c.BasePath != "" && !strings.HasPrefix(c.BasePath, "/") {
		c.BasePath = "/" + c.BasePath
	}
	if c.CountsInterval <= 0 {
		c.CountsInterval = time.Second
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 15 * time.Second
	}
	return c
}

//go:embed assets
var assetsFS embed.FS

// handler serves the pages and the API of one producer's runs.
type handler struct {
	p     *producer.Producer
	cfg   Config
	log   *slog.Logger
	pages *pages
	root  http.Handler
	// queuedReads bounds the waiting messages a page reads
	// (maxQueuedReads; tests lower it).
	queuedReads int
	// rights is what the NATS user may write, as probed (mayWrite).
	rights rights
}

// New returns the dashboard of the runs p reads: HTML pages, the JSON API
// and the events stream (see the package documentation). It starts nothing
// in the background: every NATS watch it opens belongs to a request and
// ends with it. It does not own p's connection.
func New(p *producer.Producer, cfg Config) http.Handler {
	cfg = cfg.withDefaults()
	h := &handler{p: p, cfg: cfg, log: cfg.Logger, queuedReads: maxQueuedReads}
	ps, err := h.parsePages()
	if err != nil {
		panic(err) // the templates are embedded: a test parses them
	}
	h.pages = ps

	mux := http.NewServeMux()
	page := func(pattern string, fn http.HandlerFunc) {
		mux.HandleFunc("GET "+pattern, fn)
		mux.HandleFunc(pattern, methodNotAllowed("GET, HEAD", false))
	}
	api := func(method, pattern string, fn http.HandlerFunc) {
		mux.HandleFunc(method+" "+pattern, fn)
		allow := method
		if method == http.MethodGet {
			allow = "GET, HEAD"
		}
		mux.HandleFunc(pattern, methodNotAllowed(allow, true))
	}
	page("/{$}", h.index)
	page("/runs/{id}", h.runPage)
	page("/functions", h.functionsPage)
	page("/crons", h.cronsPage)
	page("/triggers", h.triggersPage)
	page("/favicon.ico", faviconHandler)
	static, _ := fs.Sub(assetsFS, "assets/static")
	page("/assets/", http.StripPrefix("/assets/", cacheFor(time.Hour, http.FileServerFS(static))).ServeHTTP)

	api(http.MethodGet, "/api/runs", h.apiList)
	api(http.MethodGet, "/api/runs/{id}", h.apiGet)
	api(http.MethodPost, "/api/runs/{id}/cancel", h.apiCancel)
	api(http.MethodPost, "/api/runs/{id}/rerun", h.apiRerun)
	api(http.MethodGet, "/api/runs/{id}/reruns", h.apiReruns)
	api(http.MethodGet, "/api/runs/{id}/steps", h.apiSteps)
	api(http.MethodGet, "/api/counts", h.apiCounts)
	api(http.MethodGet, "/api/functions", h.apiFunctions)
	api(http.MethodPost, "/api/functions/{name}/pause", h.apiFunctionAction(true))
	api(http.MethodPost, "/api/functions/{name}/resume", h.apiFunctionAction(false))
	api(http.MethodGet, "/api/crons", h.apiCrons)
	api(http.MethodGet, "/api/triggers", h.apiTriggers)
	api(http.MethodPost, "/api/crons/{name}/pause", h.apiCronAction("pause"))
	api(http.MethodPost, "/api/crons/{name}/resume", h.apiCronAction("resume"))
	api(http.MethodPost, "/api/crons/{name}/trigger", h.apiCronAction("trigger"))
	api(http.MethodGet, "/api/events", h.events)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API endpoint: "+r.URL.Path)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.errorPage(w, r, http.StatusNotFound, "page not found: "+r.URL.Path)
	})

	// Browsers send Sec-Fetch-Site (or Origin) with every POST: one from
	// another site cannot cancel runs through a visitor's browser.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross-origin request refused")
	}))
	root := cop.Handler(securityHeaders(mux))
	if cfg.BasePath != "" {
		inner := http.StripPrefix(cfg.BasePath, root)
		base := cfg.BasePath
		root = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == base {
				http.Redirect(w, r, base+"/", http.StatusMovedPermanently)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	if cfg.Middleware != nil {
		root = cfg.Middleware(root)
	}
	h.root = checkHost(cfg.AllowedHosts, root)
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.root.ServeHTTP(w, r) }

// securityHeaders allows the page nothing but its own origin.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

func cacheFor(d time.Duration, next http.Handler) http.Handler {
	v := "public, max-age=" + strconv.Itoa(int(d/time.Second))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", v)
		next.ServeHTTP(w, r)
	})
}

// methodNotAllowed answers 405 with the Allow header, as JSON for the API.
func methodNotAllowed(allow string, asJSON bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		msg := "method " + r.Method + " not allowed; allowed: " + allow
		if asJSON {
			writeError(w, http.StatusMethodNotAllowed, msg)
			return
		}
		http.Error(w, msg, http.StatusMethodNotAllowed)
	}
}

// ctx bounds a request's NATS work.
func (h *handler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.cfg.RequestTimeout)
}

// path is an absolute link to a dashboard path.
func (h *handler) path(p string) string { return h.cfg.BasePath + p }

// errBadRequest marks errors of the request itself (400).
var errBadRequest = errors.New("bad request")

type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }
func (e *badRequest) Unwrap() error { return errBadRequest }

func badRequestf(msg string) error { return &badRequest{msg: msg} }

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, jetflow.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errBadRequest), errors.Is(err, jetflow.ErrInvalidRunID), errors.Is(err, jetflow.ErrInvalidName),
		errors.Is(err, jetflow.ErrBadArgs):
		return http.StatusBadRequest
	case errors.Is(err, jetflow.ErrBadRecord):
		// A record jetflow did not write (a cron's, a trigger's, a run's):
		// nothing this dashboard can act on.
		return http.StatusUnprocessableEntity
	case errors.Is(err, errConflict):
		return http.StatusConflict
	case errors.Is(err, errNotImplemented):
		return http.StatusNotImplemented
	case errors.Is(err, nats.ErrPermissionViolation):
		return http.StatusForbidden // the dashboard's NATS user may not
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}

// act runs a button's writes, ending them at once with the server's
// permissions violation when the dashboard's NATS user may not make them
// (docs/permissions.md), instead of after the request's timeout.
func (h *handler) act(ctx context.Context, fn func(ctx context.Context) error) error {
	return natsperm.Do(ctx, engine.Of(h.p).Conn(), fn)
}

// fail answers err as JSON, logging server-side failures.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	st := statusOf(err)
	if st >= 500 && r.Context().Err() == nil {
		h.log.WarnContext(r.Context(), "dashboard request failed", "path", r.URL.Path, "error", err)
	}
	writeError(w, st, err.Error())
}

func writeError(w http.ResponseWriter, status int, msg string) {
	if len(msg) > maxErrorText {
		// A bad request quotes what it got: a 100 KB query value is not
		// echoed whole.
		msg = strings.ToValidUTF8(msg[:maxErrorText], "") + "…"
	}
	writeJSON(w, status, map[string]string{"error": msg})
}

// maxErrorText bounds an error answer's text.
const maxErrorText = 1024

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
