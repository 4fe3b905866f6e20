package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/webhook"
	"github.com/jetflow-dev/jetflow/worker"
)

var OnEvent = jetflow.Define[webhook.Event]("hooks.github")

const secret = "test-secret-0123456789"

// gh is the GitHub verifier of secret.
var gh = must(webhook.GitHub(secret))

type env struct {
	*testserver.Env
	P   *producer.Producer
	cfg webhook.Config
	srv *httptest.Server

	mu     sync.Mutex
	errs   []error
	events map[string][]webhook.Event // by run id: every processing attempt
}

// setup starts a server, a receiver for cfg (Function and OnError filled),
// and, when handle is set, a worker processing events with it and a
// scheduler for the retries.
func setup(t *testing.T, cfg webhook.Config, handle func(e *env, j *worker.Job[webhook.Event]) error) *env {
	t.Helper()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{Env: ts, P: p, events: map[string][]webhook.Event{}}
	cfg.Function = OnEvent
	cfg.OnError = func(_ *http.Request, err error) {
		e.mu.Lock()
		e.errs = append(e.errs, err)
		e.mu.Unlock()
	}
	if cfg.Backoff == (jetflow.Backoff{}) {
		cfg.Backoff = jetflow.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	}
	e.cfg = cfg
	h, err := webhook.New(p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	if handle == nil {
		return e
	}
	w, err := worker.New(ctx, ts.JS, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = webhook.Register(w, cfg, func(_ context.Context, j *worker.Job[webhook.Event]) error {
		e.mu.Lock()
		e.events[j.ID()] = append(e.events[j.ID()], j.Args)
		e.mu.Unlock()
		return handle(e, j)
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(ctx, ts.JS, scheduler.Config{LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
		_ = s.Stop(ctx)
	})
	return e
}

// post sends body with headers and returns the status and the decoded 200
// answer.
func (e *env) post(t *testing.T, body []byte, headers map[string]string) (int, webhook.Response) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out webhook.Response
	if res.StatusCode == http.StatusOK {
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			t.Fatalf("200 body: %v", err)
		}
		if out.ID == "" {
			t.Fatal("200 without a run id")
		}
	}
	return res.StatusCode, out
}

func (e *env) lastError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.errs) == 0 {
		return nil
	}
	return e.errs[len(e.errs)-1]
}

func (e *env) attempts(id string) []webhook.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]webhook.Event(nil), e.events[id]...)
}

func (e *env) wait(t *testing.T, id string) *jetflow.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := e.P.Wait(ctx, id)
	if err != nil {
		t.Fatalf("run %s did not end: %v", id, err)
	}
	return r
}

func (e *env) runs(t *testing.T) []*jetflow.Run {
	t.Helper()
	page, err := e.P.List(context.Background(), producer.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return page.Runs
}

func githubHeaders(body []byte, delivery string) map[string]string {
	return map[string]string{
		"X-Hub-Signature-256": gh.Sign(body),
		"X-GitHub-Event":      "push",
		"X-GitHub-Delivery":   delivery,
	}
}

// A correctly signed GitHub delivery is answered 200 with its run id, and
// processed with the exact body and the kept headers.
func TestGitHubDelivery(t *testing.T) {
	t.Parallel()
	e := setup(t, webhook.Config{Verifier: gh}, func(*env, *worker.Job[webhook.Event]) error { return nil })
	body := []byte(`{"ref": "refs/heads/main", "html": "<b>&</b>"}`)
	code, res := e.post(t, body, githubHeaders(body, "d-1"))
	if code != http.StatusOK || res.Duplicate {
		t.Fatalf("status %d %+v, want 200", code, res)
	}
	r := e.wait(t, res.ID)
	if r.State != jetflow.Success || r.Name != OnEvent.Name() {
		t.Fatalf("run %s %s: %s", r.Name, r.State, r.Error)
	}
	got := e.attempts(res.ID)
	if len(got) != 1 {
		t.Fatalf("processed %d times, want 1", len(got))
	}
	ev := got[0]
	if !bytes.Equal(ev.Body, body) {
		t.Fatalf("body %q, want %q", ev.Body, body)
	}
	if ev.Header("x-github-event") != "push" || ev.Header("X-Hub-Signature-256") == "" || ev.Header("Content-Type") != "application/json" {
		t.Fatalf("headers = %v", ev.Headers)
	}
	if ev.Received.IsZero() || ev.ID != "" {
		t.Fatalf("received %v, id %q (no EventID configured)", ev.Received, ev.ID)
	}
	// The signature still verifies against the stored event.
	h := http.Header{}
	h.Set("X-Hub-Signature-256", ev.Header("X-Hub-Signature-256"))
	if err := gh.Verify(h, ev.Body, time.Now()); err != nil {
		t.Fatalf("stored event does not verify: %v", err)
	}
	var push struct{ Ref string }
	if err := ev.Decode(&push); err != nil || push.Ref != "refs/heads/main" {
		t.Fatalf("decode = %+v, %v", push, err)
	}
}

// Rejected requests get their status, the typed error, and store nothing.
func TestRejected(t *testing.T) {
	t.Parallel()
	stripe := must(webhook.Stripe(secret, time.Minute))
	for _, tc := range []struct {
		name    string
		v       webhook.Verifier
		method  string
		body    []byte
		headers func(body []byte) map[string]string
		code    int
		err     error
	}{
		{"invalid signature", gh, "POST", []byte(`{"a":1}`),
			func(b []byte) map[string]string { return githubHeaders([]byte(`{"a":2}`), "d") },
			http.StatusUnauthorized, webhook.ErrBadSignature},
		{"wrong secret", gh, "POST", []byte(`{"a":1}`),
			func(b []byte) map[string]string {
				return map[string]string{"X-Hub-Signature-256": must(webhook.GitHub("other-secret-0123456789")).Sign(b)}
			},
			http.StatusUnauthorized, webhook.ErrBadSignature},
		{"missing signature", gh, "POST", []byte(`{"a":1}`),
			func([]byte) map[string]string { return nil },
			http.StatusUnauthorized, webhook.ErrMissingSignature},
		{"stripe replay", stripe, "POST", []byte(`{"id":"evt_1"}`),
			func(b []byte) map[string]string {
				return map[string]string{"Stripe-Signature": stripe.Sign(b, time.Now().Add(-2*time.Minute))}
			},
			http.StatusUnauthorized, webhook.ErrExpired},
		{"oversized", gh, "POST", bytes.Repeat([]byte("x"), 2048),
			func(b []byte) map[string]string { return githubHeaders(b, "d") },
			http.StatusRequestEntityTooLarge, webhook.ErrTooLarge},
		{"wrong method", gh, "GET", nil,
			func([]byte) map[string]string { return nil },
			http.StatusMethodNotAllowed, webhook.ErrMethod},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, webhook.Config{Verifier: tc.v, MaxBody: 1024}, nil)
			req, err := http.NewRequest(tc.method, e.srv.URL, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.headers(tc.body) {
				req.Header.Set(k, v)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.code)
			}
			if err := e.lastError(); !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if runs := e.runs(t); len(runs) != 0 {
				t.Fatalf("%d runs stored, want none", len(runs))
			}
		})
	}
}

// A body larger than MaxBody is refused even when the sender does not say
// its length up front (chunked).
func TestOversizedChunked(t *testing.T) {
	t.Parallel()
	e := setup(t, webhook.Config{Verifier: gh, MaxBody: 1024}, nil)
	body := bytes.Repeat([]byte("y"), 4096)
	req, err := http.NewRequest(http.MethodPost, e.srv.URL, struct{ *bytes.Reader }{bytes.NewReader(body)})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	for k, v := range githubHeaders(body, "d") {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge || !errors.Is(e.lastError(), webhook.ErrTooLarge) {
		t.Fatalf("status %d, error %v; want 413 ErrTooLarge", res.StatusCode, e.lastError())
	}
	if runs := e.runs(t); len(runs) != 0 {
		t.Fatalf("%d runs stored, want none", len(runs))
	}
}

// Stripe-style and generic HMAC signatures are accepted when valid.
func TestOtherVerifiers(t *testing.T) {
	t.Parallel()
	stripe := must(webhook.Stripe(secret, 0))
	shop := must(webhook.HMAC(secret, "X-Shop-Hmac-Sha256", webhook.Base64))
	for _, tc := range []struct {
		name string
		v    webhook.Verifier
		sign func(body []byte) map[string]string
	}{
		{"stripe", stripe, func(b []byte) map[string]string {
			return map[string]string{"Stripe-Signature": stripe.Sign(b, time.Now())}
		}},
		{"hmac base64", shop, func(b []byte) map[string]string {
			return map[string]string{"X-Shop-Hmac-Sha256": shop.Sign(b)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, webhook.Config{Verifier: tc.v}, nil)
			body := []byte(`{"n":1}`)
			code, res := e.post(t, body, tc.sign(body))
			if code != http.StatusOK {
				t.Fatalf("status %d, want 200 (error %v)", code, e.lastError())
			}
			r, err := e.P.Get(context.Background(), res.ID)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := webhook.EventOf(r)
			if err != nil || !bytes.Equal(ev.Body, body) || ev.Header(tc.v.SignatureHeader()) == "" {
				t.Fatalf("stored event %+v, %v", ev, err)
			}
		})
	}
}

// Processing that fails twice is retried and then succeeds.
func TestProcessingRetried(t *testing.T) {
	t.Parallel()
	e := setup(t, webhook.Config{Verifier: gh}, func(e *env, j *worker.Job[webhook.Event]) error {
		if j.Attempt() <= 2 {
			return fmt.Errorf("downstream unavailable (attempt %d)", j.Attempt())
		}
		return nil
	})
	body := []byte(`{"n":2}`)
	code, res := e.post(t, body, githubHeaders(body, "d-2"))
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	r := e.wait(t, res.ID)
	if r.State != jetflow.Success || r.Attempts != 3 {
		t.Fatalf("run %s after %d attempts (%s), want success after 3", r.State, r.Attempts, r.Error)
	}
	if got := e.attempts(res.ID); len(got) != 3 || !bytes.Equal(got[2].Body, body) {
		t.Fatalf("processed %d times, want 3 with the body", len(got))
	}
}

// Processing that always fails ends failed after MaxAttempts, and the
// failed record still holds the event.
func TestProcessingFailsKeepsEvent(t *testing.T) {
	t.Parallel()
	e := setup(t, webhook.Config{Verifier: gh, MaxAttempts: 3, EventID: "X-GitHub-Delivery"},
		func(e *env, j *worker.Job[webhook.Event]) error { return errors.New("cannot process") })
	body := []byte(`{"n":3,"text":"keep me"}`)
	code, res := e.post(t, body, githubHeaders(body, "d-3"))
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	r := e.wait(t, res.ID)
	if r.State != jetflow.Failed || r.Attempts != 3 || !strings.Contains(r.Error, "cannot process") {
		t.Fatalf("run %s after %d attempts (%s), want failed after 3", r.State, r.Attempts, r.Error)
	}
	if n := len(e.attempts(res.ID)); n != 3 {
		t.Fatalf("processed %d times, want 3", n)
	}
	r, err := e.P.Get(context.Background(), res.ID)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := webhook.EventOf(r)
	if err != nil || !bytes.Equal(ev.Body, body) || ev.ID != "d-3" || ev.Header("X-GitHub-Event") != "push" {
		t.Fatalf("failed record's event = %+v, %v", ev, err)
	}
}

// The same delivery id twice is stored once: both answers carry the same
// run id, and it is processed once.
func TestDuplicateDelivery(t *testing.T) {
	t.Parallel()
	e := setup(t, webhook.Config{Verifier: gh, EventID: "X-GitHub-Delivery"},
		func(*env, *worker.Job[webhook.Event]) error { return nil })
	body := []byte(`{"n":4}`)
	code1, res1 := e.post(t, body, githubHeaders(body, "72d3162e-cc78-11e3-81ab-4c9367dc0958"))
	code2, res2 := e.post(t, body, githubHeaders(body, "72d3162e-cc78-11e3-81ab-4c9367dc0958"))
	if code1 != http.StatusOK || code2 != http.StatusOK {
		t.Fatalf("status %d, %d; want 200 twice", code1, code2)
	}
	if res1.ID != res2.ID || res1.Duplicate || !res2.Duplicate {
		t.Fatalf("answers %+v, %+v; want one id, the second a duplicate", res1, res2)
	}
	e.wait(t, res1.ID)
	page, err := e.P.List(context.Background(), producer.Filter{Function: OnEvent.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(page.Runs))
	}
	if got := e.attempts(res1.ID); len(got) != 1 || got[0].ID != "72d3162e-cc78-11e3-81ab-4c9367dc0958" {
		t.Fatalf("processed %d times (%+v), want once with the delivery id", len(got), got)
	}
	// Another delivery is another event.
	code3, res3 := e.post(t, body, githubHeaders(body, "other"))
	if code3 != http.StatusOK || res3.ID == res1.ID || res3.Duplicate {
		t.Fatalf("second delivery: %d %+v", code3, res3)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	if _, err := webhook.New(nil, webhook.Config{Verifier: gh}); !errors.Is(err, webhook.ErrConfig) {
		t.Fatalf("no function: %v", err)
	}
	if _, err := webhook.New(nil, webhook.Config{Function: OnEvent}); !errors.Is(err, webhook.ErrConfig) {
		t.Fatalf("no verifier: %v", err)
	}
	o := webhook.WorkerOptions(webhook.Config{})
	if o.MaxAttempts != 5 || o.Backoff.Max != time.Hour || o.Backoff.Initial != time.Second || o.Backoff.Base != 2 {
		t.Fatalf("default worker options = %+v", o)
	}
}

// An unset secret cannot make a receiver: the constructor refuses it, and a
// verifier's zero value (no secret) is refused by New. A forged delivery
// signed with the empty key is answered 401 by every receiver that exists,
// and nothing is stored.
func TestEmptySecretRefused(t *testing.T) {
	t.Parallel()
	if _, err := webhook.GitHub(""); !errors.Is(err, webhook.ErrWeakSecret) {
		t.Fatalf("GitHub(\"\") = %v, want ErrWeakSecret", err)
	}
	for _, v := range []webhook.Verifier{webhook.HMACVerifier{}, &webhook.HMACVerifier{}, (*webhook.HMACVerifier)(nil), webhook.StripeVerifier{}} {
		_, err := webhook.New(nil, webhook.Config{Function: OnEvent, Verifier: v})
		if !errors.Is(err, webhook.ErrConfig) || !errors.Is(err, webhook.ErrWeakSecret) {
			t.Fatalf("New with %T without a secret = %v, want ErrConfig and ErrWeakSecret", v, err)
		}
	}
	e := setup(t, webhook.Config{Verifier: gh}, nil)
	body := []byte(`{"ref":"refs/heads/main"}`)
	code, _ := e.post(t, body, map[string]string{"X-Hub-Signature-256": webhook.HMACVerifier{}.WithPrefix("sha256=").Sign(body)})
	if code != http.StatusUnauthorized || !errors.Is(e.lastError(), webhook.ErrBadSignature) {
		t.Fatalf("delivery signed with the empty key: %d, %v; want 401 ErrBadSignature", code, e.lastError())
	}
	if runs := e.runs(t); len(runs) != 0 {
		t.Fatalf("%d runs stored, want none", len(runs))
	}
}

// With EventIDFrom, the delivery id comes from the verified body (Stripe's
// event id): a Stripe event resent with a new signature and timestamp is
// stored once; another event id is another event; a body without the
// field is a new event each time; an id too long for one is refused.
func TestEventIDFromBody(t *testing.T) {
	t.Parallel()
	stripe := must(webhook.Stripe(secret, 0))
	e := setup(t, webhook.Config{Verifier: stripe, EventIDFrom: webhook.BodyField("id")}, nil)
	post := func(body string, at time.Time) (int, webhook.Response) {
		return e.post(t, []byte(body), map[string]string{"Stripe-Signature": stripe.Sign([]byte(body), at)})
	}
	body := `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","type":"invoice.paid"}`
	code1, res1 := post(body, time.Now())
	code2, res2 := post(body, time.Now().Add(time.Second))
	if code1 != http.StatusOK || code2 != http.StatusOK || res1.ID != res2.ID || res1.Duplicate || !res2.Duplicate {
		t.Fatalf("answers %d %+v, %d %+v; want one run, the second a duplicate", code1, res1, code2, res2)
	}
	r, err := e.P.Get(context.Background(), res1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := webhook.EventOf(r); err != nil || ev.ID != "evt_1NG8Du2eZvKYlo2CUI79vXWy" {
		t.Fatalf("stored event %+v, %v", ev, err)
	}
	if code, res := post(`{"id":"evt_other","type":"invoice.paid"}`, time.Now()); code != http.StatusOK || res.ID == res1.ID || res.Duplicate {
		t.Fatalf("another event id: %d %+v", code, res)
	}
	_, a := post(`{"type":"no id"}`, time.Now())
	_, b := post(`{"type":"no id"}`, time.Now())
	if a.ID == "" || a.ID == b.ID || b.Duplicate {
		t.Fatalf("bodies without an id: %+v, %+v; want two events", a, b)
	}
	if code, _ := post(`{"id":"`+strings.Repeat("x", webhook.MaxEventID+1)+`"}`, time.Now()); code != http.StatusBadRequest || !errors.Is(e.lastError(), webhook.ErrBadEventID) {
		t.Fatalf("a long id: %d %v; want 400 ErrBadEventID", code, e.lastError())
	}
	// A delivery id header that is not UTF-8.
	h := setup(t, webhook.Config{Verifier: gh, EventID: "X-GitHub-Delivery"}, nil)
	if code, _ := h.post(t, []byte(body), githubHeaders([]byte(body), "d-\xff")); code != http.StatusBadRequest || !errors.Is(h.lastError(), webhook.ErrBadEventID) {
		t.Fatalf("a non-UTF-8 id: %d %v; want 400 ErrBadEventID", code, h.lastError())
	}
	if runs := h.runs(t); len(runs) != 0 {
		t.Fatalf("%d runs stored, want none", len(runs))
	}
}
