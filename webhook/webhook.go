package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
)

// DefaultMaxBody is the default largest body accepted: 1 MiB.
const DefaultMaxBody = 1 << 20

// DefaultHeaders are the request headers kept with an event by default,
// besides the signature header and the EventID header.
var DefaultHeaders = []string{
	"Content-Type", "User-Agent",
	"X-GitHub-Event", "X-GitHub-Delivery", "X-GitHub-Hook-ID",
	"X-GitHub-Hook-Installation-Target-Type", "X-GitHub-Hook-Installation-Target-ID",
}

// Config configures a webhook receiver and, with Register, its processing.
// Every zero field takes the default named.
type Config struct {
	// Function processes the events; its runs' args are the Events.
	// Required.
	Function jetflow.Function[Event]
	// Verifier checks signatures: GitHub, HMAC or Stripe. Required.
	Verifier Verifier
	// MaxBody is the largest body accepted, in bytes; larger gets 413.
	// Default DefaultMaxBody (1 MiB). The stored event holds the body in
	// base64 (exact bytes), a third larger: it must also fit the NATS
	// server's max payload (1 MiB by default on a plain server, 8 MiB on
	// jetflow's embedded one), or the request gets 413 as well.
	MaxBody int64
	// MaxAttempts of processing, the first included. Default 5.
	MaxAttempts int
	// Backoff between processing attempts: exponential with full jitter.
	// Default initial 1 s, base 2, max 1 h (see jetflow.Backoff).
	Backoff jetflow.Backoff
	// EventID names a header holding the sender's delivery id (e.g.
	// "X-GitHub-Delivery"): an event redelivered with the same id is stored
	// once. Default: none, every request is a new event.
	EventID string
	// EventIDFrom, when set, takes the delivery id from the request once
	// its signature is verified, in place of the EventID header: for
	// senders whose event id is in the signed body (Stripe's "id", which
	// BodyField("id") reads), so a replayed or redelivered event is stored
	// once. An empty result means no id (a new event each time).
	EventIDFrom func(body []byte, header http.Header) string
	// Headers are the request headers kept with the event. Default
	// DefaultHeaders. The signature header and the EventID header are
	// always kept.
	Headers []string
	// Timeout ends a processing attempt that runs longer as failed (and
	// retried). Default: the function's.
	Timeout time.Duration
	// ReadTimeout bounds reading the body, from the moment the handler
	// starts: a sender that sends it more slowly (a slowloris trickling
	// bytes) gets 408 and its connection is closed. It sets the
	// connection's read deadline for the body (http.ResponseController),
	// replacing http.Server.ReadTimeout's for this request. Default 10 s,
	// GitHub's own delivery timeout.
	ReadTimeout time.Duration
	// StoreTimeout bounds storing one event. Default 10 s.
	StoreTimeout time.Duration
	// OnError, when set, sees every request that was not stored, with its
	// error: ErrMethod, ErrTooLarge, ErrReadBody, ErrMissingSignature,
	// ErrBadSignature, ErrExpired, ErrBadEventID or ErrStore. For metrics and logs; it
	// must not write to the response.
	OnError func(r *http.Request, err error)
	// Logger receives rejections at debug level and storage failures as
	// warnings. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.MaxBody <= 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	c.Backoff = c.Backoff.WithDefaults()
	if c.Headers == nil {
		c.Headers = DefaultHeaders
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 10 * time.Second
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	if c.Function.Name() == "" {
		return fmt.Errorf("%w: Config.Function is required", ErrConfig)
	}
	if c.Verifier == nil {
		return fmt.Errorf("%w: Config.Verifier is required", ErrConfig)
	}
	// A verifier built without its constructor (a zero value) has no
	// secret: refuse it here rather than answer 401 to every delivery.
	var secret []byte
	switch v := c.Verifier.(type) {
	case HMACVerifier:
		secret = v.secret
	case *HMACVerifier:
		if v != nil {
			secret = v.secret
		}
	case StripeVerifier:
		secret = v.secret
	case *StripeVerifier:
		if v != nil {
			secret = v.secret
		}
	default:
		return nil
	}
	if err := checkSecret(string(secret)); err != nil {
		return fmt.Errorf("%w: Config.Verifier: %w", ErrConfig, err)
	}
	return nil
}

// Event is one received webhook: the args of a run of the processing
// function.
type Event struct {
	// ID is the sender's delivery id (the Config.EventID header), if any.
	ID string `json:"id,omitempty"`
	// Body is the raw body, byte for byte as signed.
	Body []byte `json:"body"`
	// Headers are the kept request headers, canonical keys, first values.
	Headers map[string]string `json:"headers,omitempty"`
	// Received is when the request arrived (UTC).
	Received time.Time `json:"received"`
}

// Header returns the kept header name ("" if absent), any case.
func (e Event) Header(name string) string { return e.Headers[http.CanonicalHeaderKey(name)] }

// Decode decodes the JSON body into v. A form-encoded body (a kept
// Content-Type of application/x-www-form-urlencoded, GitHub's other content
// type) is decoded from its payload field. A body that is not UTF-8 JSON
// (invalid UTF-8 is refused, not replaced) returns a jetflow.Permanent
// error matching jetflow.ErrBadArgs: returned by the processing function,
// it fails the event at once, its record naming the reason and keeping the
// event.
func (e Event) Decode(v any) error {
	body := e.Body
	if mt, _, _ := mime.ParseMediaType(e.Header("Content-Type")); mt == "application/x-www-form-urlencoded" {
		form, err := url.ParseQuery(string(body))
		if err != nil || !form.Has("payload") {
			return jetflow.Permanent(fmt.Errorf("%w: webhook body: form-encoded without a payload field", jetflow.ErrBadArgs))
		}
		body = []byte(form.Get("payload"))
	}
	if !utf8.Valid(body) {
		return jetflow.Permanent(fmt.Errorf("%w: webhook body: not valid UTF-8", jetflow.ErrBadArgs))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return jetflow.Permanent(fmt.Errorf("%w: webhook body: %v", jetflow.ErrBadArgs, err))
	}
	return nil
}

// EventOf reads the event back from a run record of a processing function:
// pending, running, succeeded or failed. Errors: jetflow.ErrBadArgs.
func EventOf(r *jetflow.Run) (Event, error) {
	var e Event
	if r == nil || len(r.Args) == 0 {
		return e, fmt.Errorf("%w: run without args", jetflow.ErrBadArgs)
	}
	if err := json.Unmarshal(r.Args, &e); err != nil {
		return e, fmt.Errorf("%w: run %s: %v", jetflow.ErrBadArgs, r.ID, err)
	}
	return e, nil
}

// Handler receives webhooks: it is an http.Handler. It is safe for
// concurrent use.
type Handler struct {
	p    *producer.Producer
	cfg  Config
	keep []string
	idp  string
}

// New returns the receiver of cfg, storing events with p. Errors: ErrConfig
// (no Function, no Verifier, or a verifier without a secret, which also
// matches ErrWeakSecret).
func New(p *producer.Producer, cfg Config) (*Handler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("%w: nil producer", ErrConfig)
	}
	cfg = cfg.withDefaults()
	keep := append([]string(nil), cfg.Headers...)
	keep = append(keep, cfg.Verifier.SignatureHeader())
	if cfg.EventID != "" {
		keep = append(keep, cfg.EventID)
	}
	for i, k := range keep {
		keep[i] = http.CanonicalHeaderKey(k)
	}
	return &Handler{p: p, cfg: cfg, keep: keep, idp: strings.ReplaceAll(cfg.Function.Name(), ".", "_")}, nil
}

// Response is the JSON body of a 200 answer.
type Response struct {
	// ID is the run id of the event.
	ID string `json:"id"`
	// Duplicate: the event id was stored before; nothing new was stored.
	Duplicate bool `json:"duplicate,omitempty"`
}

// ServeHTTP verifies, stores and acknowledges one webhook.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reject(w, r, http.StatusMethodNotAllowed, fmt.Errorf("%w: %s", ErrMethod, r.Method))
		return
	}
	if r.ContentLength > h.cfg.MaxBody {
		h.reject(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, r.ContentLength, h.cfg.MaxBody))
		return
	}
	if r.Header.Get(h.cfg.Verifier.SignatureHeader()) == "" {
		h.reject(w, r, http.StatusUnauthorized, fmt.Errorf("%w: no %s header", ErrMissingSignature, h.cfg.Verifier.SignatureHeader()))
		return
	}
	// The server may have no read timeout (http.ListenAndServe has none):
	// a sender trickling its body would hold this handler forever.
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(h.cfg.ReadTimeout)) == nil
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	if deadline {
		// The rest of the request (storing) is not bounded by the sender.
		// A clear that fails leaves the deadline set: nothing more is read.
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.reject(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: limit %d bytes", ErrTooLarge, h.cfg.MaxBody))
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			h.reject(w, r, http.StatusRequestTimeout, fmt.Errorf("%w: not received within %s", ErrReadBody, h.cfg.ReadTimeout))
			return
		}
		h.reject(w, r, http.StatusBadRequest, fmt.Errorf("%w: %w", ErrReadBody, err))
		return
	}
	now := h.cfg.Now()
	if err := h.cfg.Verifier.Verify(r.Header, body, now); err != nil {
		h.reject(w, r, http.StatusUnauthorized, err)
		return
	}
	ev := Event{Body: body, Received: now.UTC(), Headers: make(map[string]string, len(h.keep))}
	for _, k := range h.keep {
		if v := r.Header.Get(k); v != "" {
			ev.Headers[k] = v
		}
	}
	switch {
	case h.cfg.EventIDFrom != nil:
		ev.ID = strings.TrimSpace(h.cfg.EventIDFrom(body, r.Header))
	case h.cfg.EventID != "":
		ev.ID = strings.TrimSpace(r.Header.Get(h.cfg.EventID))
	}
	if len(ev.ID) > MaxEventID || !utf8.ValidString(ev.ID) {
		h.reject(w, r, http.StatusBadRequest, fmt.Errorf("%w: delivery id of %d bytes (at most %d of valid UTF-8)", ErrBadEventID, len(ev.ID), MaxEventID))
		return
	}
	// The sender hanging up must not cut a write in half: the store gets
	// its own deadline.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.StoreTimeout)
	defer cancel()
	resp, err := h.store(ctx, ev)
	switch {
	case errors.Is(err, producer.ErrArgsTooLarge):
		h.reject(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: %w", ErrTooLarge, err))
		return
	case err != nil:
		h.cfg.Logger.WarnContext(r.Context(), "webhook not stored", "function", h.cfg.Function.Name(), "error", err)
		w.Header().Set("Retry-After", "5")
		h.reject(w, r, http.StatusServiceUnavailable, fmt.Errorf("%w: %w", ErrStore, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if err := json.NewEncoder(w).Encode(resp); err != nil {
		// Stored already: a sender gone before the answer sends it again,
		// and its event id makes that a duplicate.
		h.cfg.Logger.DebugContext(r.Context(), "webhook answer not written", "function", h.cfg.Function.Name(), "error", err)
	}
}

// store enqueues ev. An event with a delivery id is stored under RunID, or,
// when that id is taken by a run that is not this event (a run of another
// function whose name maps to the same prefix, "a.b" and "a_b", or "gh"
// with delivery "x-1" and "gh-x" with delivery "1"), under fallbackID; a
// run under either id that holds this function's event with this delivery
// id is the duplicate.
func (h *Handler) store(ctx context.Context, ev Event) (Response, error) {
	opts := []producer.Option{producer.WithMaxAttempts(h.cfg.MaxAttempts)}
	if h.cfg.Timeout > 0 {
		opts = append(opts, producer.WithTimeout(h.cfg.Timeout))
	}
	if ev.ID == "" {
		id, err := h.p.Enqueue(ctx, h.cfg.Function.With(ev), opts...)
		return Response{ID: id}, err
	}
	for _, id := range []string{h.RunID(ev.ID), h.fallbackID(ev.ID)} {
		_, err := h.p.Enqueue(ctx, h.cfg.Function.With(ev), append(opts, producer.WithID(id))...)
		if !errors.Is(err, producer.ErrAlreadyExists) {
			return Response{ID: id}, err
		}
		r, err := h.p.Get(ctx, id)
		if err != nil {
			return Response{}, fmt.Errorf("reading run %s: %w", id, err)
		}
		if prev, err := EventOf(r); err == nil && r.Name == h.cfg.Function.Name() && prev.ID == ev.ID {
			return Response{ID: id, Duplicate: true}, nil
		}
	}
	return Response{}, fmt.Errorf("delivery %q: run ids %s and %s are taken by other runs", ev.ID, h.RunID(ev.ID), h.fallbackID(ev.ID))
}

// MaxEventID is the longest delivery id, in bytes.
const MaxEventID = 1024

// BodyField returns an EventIDFrom that reads the top-level string field
// name of a JSON body (Stripe's event id: BodyField("id")); "" when the
// body is not a JSON object or the field is not a string.
func BodyField(name string) func(body []byte, header http.Header) string {
	return func(body []byte, _ http.Header) string {
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return ""
		}
		var v string
		if json.Unmarshal(m[name], &v) != nil {
			return ""
		}
		return v
	}
}

// RunID is the run id of the event with delivery id id: stable, so a
// redelivery finds the stored event. The answer's Response.ID is the one
// to keep: in the rare case that RunID is taken by a run of another
// function (see store), the event is stored under another stable id.
func (h *Handler) RunID(id string) string { return jetflow.DerivedID(h.idp + "-" + id) }

// fallbackID is the event's run id when RunID is taken by another run: a
// hash of the function's full name and the delivery id (the newline makes
// the input an invalid run id, so DerivedID always hashes it; RunID's input
// never holds one, header values cannot).
func (h *Handler) fallbackID(id string) string {
	return jetflow.DerivedID(h.cfg.Function.Name() + "\n" + id)
}

func (h *Handler) reject(w http.ResponseWriter, r *http.Request, code int, err error) {
	h.cfg.Logger.DebugContext(r.Context(), "webhook rejected", "function", h.cfg.Function.Name(), "status", code, "error", err)
	if h.cfg.OnError != nil {
		h.cfg.OnError(r, err)
	}
	http.Error(w, http.StatusText(code), code)
}

// WorkerOptions are the worker options that apply cfg's retry policy
// (MaxAttempts, Backoff, Timeout) to the processing function.
func WorkerOptions(cfg Config) worker.Options {
	c := cfg.withDefaults()
	return worker.Options{MaxAttempts: c.MaxAttempts, Backoff: c.Backoff, Timeout: c.Timeout}
}

// Register serves cfg.Function on w with handler h and cfg's retry policy.
// A handler error retries the event with backoff until MaxAttempts; a
// jetflow.Permanent error fails it at once. Errors: ErrConfig,
// worker.ErrRegistered.
func Register(w *worker.Worker, cfg Config, h func(ctx context.Context, j *worker.Job[Event]) error) error {
	if cfg.Function.Name() == "" {
		return fmt.Errorf("%w: Config.Function is required", ErrConfig)
	}
	return worker.Register(w, cfg.Function, h, WorkerOptions(cfg))
}
