package webhook_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/webhook"
	"github.com/jetflow-dev/jetflow/worker"
)

// postTo sends a GitHub delivery to url and returns the status and answer.
func postTo(t *testing.T, url string, body []byte, delivery string) (int, webhook.Response) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range githubHeaders(body, delivery) {
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
			t.Fatal(err)
		}
	}
	return res.StatusCode, out
}

// Two receivers whose function names map to the same run-id prefix
// ("hooks.github" and "hooks_github"; "gh" with delivery "x-1" and "gh-x"
// with delivery "1") get the same delivery id: each event is stored as a
// run of its own function. Before, the second was answered 200 "duplicate"
// with the first one's run and never stored. The redelivery of either is
// still a duplicate of its own run.
func TestEventIDCollisionAcrossFunctions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ fn1, d1, fn2, d2 string }{
		{"hooks.github", "d1", "hooks_github", "d1"},
		{"gh", "x-1", "gh-x", "1"},
	} {
		t.Run(tc.fn2, func(t *testing.T) {
			t.Parallel()
			e := setup(t, webhook.Config{Verifier: gh}, nil)
			serve := func(name string) string {
				h, err := webhook.New(e.P, webhook.Config{Function: jetflow.Define[webhook.Event](name), Verifier: gh, EventID: "X-GitHub-Delivery"})
				if err != nil {
					t.Fatal(err)
				}
				s := httptest.NewServer(h)
				t.Cleanup(s.Close)
				return s.URL
			}
			url1, url2 := serve(tc.fn1), serve(tc.fn2)
			body1, body2 := []byte(`{"to":"one"}`), []byte(`{"to":"two"}`)
			code1, res1 := postTo(t, url1, body1, tc.d1)
			code2, res2 := postTo(t, url2, body2, tc.d2)
			if code1 != http.StatusOK || code2 != http.StatusOK || res1.Duplicate || res2.Duplicate || res1.ID == res2.ID {
				t.Fatalf("answers %d %+v, %d %+v; want two new runs", code1, res1, code2, res2)
			}
			for _, c := range []struct {
				url, fn, d string
				body       []byte
				first      webhook.Response
			}{{url1, tc.fn1, tc.d1, body1, res1}, {url2, tc.fn2, tc.d2, body2, res2}} {
				r, err := e.P.Get(context.Background(), c.first.ID)
				if err != nil {
					t.Fatal(err)
				}
				ev, err := webhook.EventOf(r)
				if err != nil || r.Name != c.fn || ev.ID != c.d || !bytes.Equal(ev.Body, c.body) {
					t.Fatalf("run %s: %s, event %+v, %v; want %s's delivery %s", r.ID, r.Name, ev, err, c.fn, c.d)
				}
				code, again := postTo(t, c.url, c.body, c.d)
				if code != http.StatusOK || again.ID != c.first.ID || !again.Duplicate {
					t.Fatalf("redelivery to %s: %d %+v, want a duplicate of %s", c.fn, code, again, c.first.ID)
				}
			}
			page, err := e.P.List(context.Background(), producer.Filter{})
			if err != nil || len(page.Runs) != 2 {
				t.Fatalf("%d runs (%v), want 2", len(page.Runs), err)
			}
		})
	}
}

// rawRequest writes req on a new connection to e's server and returns the
// status line of the answer, waiting at most 20 s (a guard against a
// hanging handler, not a timing assertion).
func (e *env) rawRequest(t *testing.T, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return strings.TrimSpace(line)
}

// A sender that stops sending its body (slowloris) is answered 408 once
// Config.ReadTimeout passes, even on a server without timeouts of its own
// (httptest's), with ErrReadBody; nothing is stored. Before, the handler
// waited for the body forever, holding its goroutine and connection.
func TestSlowBodyTimesOut(t *testing.T) {
	t.Parallel()
	e := setup(t, webhook.Config{Verifier: gh, ReadTimeout: 100 * time.Millisecond}, nil)
	body := []byte(`{"ref":"refs/heads/main"}`)
	status := e.rawRequest(t, fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nX-Hub-Signature-256: %s\r\n\r\n%s",
		len(body), gh.Sign(body), body[:5]))
	if status != "HTTP/1.1 408 Request Timeout" || !errors.Is(e.lastError(), webhook.ErrReadBody) {
		t.Fatalf("answer %q, error %v; want 408 and ErrReadBody", status, e.lastError())
	}
	if runs := e.runs(t); len(runs) != 0 {
		t.Fatalf("%d runs stored, want none", len(runs))
	}
}

// A body that cannot be read (a malformed chunked encoding) is answered 400
// with ErrReadBody, an error OnError can match. Before, it was an untyped
// error.
func TestMalformedChunkedBody(t *testing.T) {
	t.Parallel()
	e := setup(t, webhook.Config{Verifier: gh}, nil)
	status := e.rawRequest(t, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nX-Hub-Signature-256: sha256=00\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
	if status != "HTTP/1.1 400 Bad Request" || !errors.Is(e.lastError(), webhook.ErrReadBody) {
		t.Fatalf("answer %q, error %v; want 400 and ErrReadBody", status, e.lastError())
	}
	if runs := e.runs(t); len(runs) != 0 {
		t.Fatalf("%d runs stored, want none", len(runs))
	}
}

// Decode reads what senders send: GitHub's form-encoded deliveries
// (Content-Type application/x-www-form-urlencoded, the JSON in the payload
// field) as well as JSON. A body that is not valid UTF-8 JSON is an error,
// permanent (decoding the same bytes again cannot succeed) and matching
// jetflow.ErrBadArgs. Before, a form-encoded delivery could not be decoded
// and invalid UTF-8 inside strings was silently replaced with U+FFFD.
func TestDecode(t *testing.T) {
	t.Parallel()
	type push struct{ Ref string }
	form := webhook.Event{
		Body:    []byte("payload=" + url.QueryEscape(`{"ref":"refs/heads/main"}`)),
		Headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
	}
	var p push
	if err := form.Decode(&p); err != nil || p.Ref != "refs/heads/main" {
		t.Fatalf("form-encoded: %+v, %v", p, err)
	}
	for name, ev := range map[string]webhook.Event{
		"invalid utf-8":   {Body: []byte("{\"ref\":\"\xff\xfe\"}")},
		"not json":        {Body: []byte("ref=main")},
		"empty":           {Body: []byte{}},
		"form no payload": {Body: []byte("other=1"), Headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}},
	} {
		var p push
		err := ev.Decode(&p)
		if !errors.Is(err, jetflow.ErrBadArgs) || !jetflow.IsPermanent(err) {
			t.Errorf("%s: Decode = %+v, %v; want a permanent ErrBadArgs", name, p, err)
		}
	}
}

// A delivery whose body the processing function cannot decode ends failed
// at once, with the reason in its record and the event kept, even when the
// function returns Decode's error as is: it is never dropped, nor retried
// for nothing.
func TestUndecodableEventFails(t *testing.T) {
	t.Parallel()
	e := setup(t, webhook.Config{Verifier: gh, MaxAttempts: 5}, func(_ *env, j *worker.Job[webhook.Event]) error {
		var v struct{ Ref string }
		return j.Args.Decode(&v)
	})
	body := []byte("\x00\x01binary\xff")
	code, res := e.post(t, body, githubHeaders(body, "d"))
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	r := e.wait(t, res.ID)
	if r.State != jetflow.Failed || r.Attempts != 1 || !strings.Contains(r.Error, "webhook body") {
		t.Fatalf("run %s after %d attempts: %q; want failed after 1, naming the body", r.State, r.Attempts, r.Error)
	}
	ev, err := webhook.EventOf(r)
	if err != nil || !bytes.Equal(ev.Body, body) {
		t.Fatalf("failed record's event %+v, %v", ev, err)
	}
}

// What a hostile client may send: other methods, empty and binary bodies,
// odd content types, a body shorter than its Content-Length. Each gets its
// status and typed error; what is stored is stored byte for byte.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	e := setup(t, webhook.Config{Verifier: gh}, nil)
	for _, m := range []string{http.MethodPut, http.MethodHead, http.MethodOptions, http.MethodDelete, "PROPFIND"} {
		req, err := http.NewRequest(m, e.srv.URL, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Hub-Signature-256", gh.Sign([]byte("{}")))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != http.MethodPost || !errors.Is(e.lastError(), webhook.ErrMethod) {
			t.Fatalf("%s: %d, Allow %q, %v", m, res.StatusCode, res.Header.Get("Allow"), e.lastError())
		}
	}
	// A body shorter than its Content-Length, the sender hanging up.
	body := []byte(`{"ref":"refs/heads/main"}`)
	c, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nX-Hub-Signature-256: %s\r\n\r\n%s", len(body)+10, gh.Sign(body), body)
	c.(*net.TCPConn).CloseWrite()
	testserver.Eventually(t, 10*time.Second, "the truncated body's rejection", func() bool { return errors.Is(e.lastError(), webhook.ErrReadBody) })
	c.Close()
	if runs := e.runs(t); len(runs) != 0 {
		t.Fatalf("%d runs stored, want none", len(runs))
	}
	for name, body := range map[string][]byte{
		"empty":  {},
		"binary": {0, 0xff, 0xfe, '\r', '\n', 0x80, 'x'},
	} {
		code, res := e.post(t, body, map[string]string{"X-Hub-Signature-256": gh.Sign(body), "Content-Type": "application/octet-stream; charset=latin1"})
		if code != http.StatusOK {
			t.Fatalf("%s: %d, %v", name, code, e.lastError())
		}
		r, err := e.P.Get(context.Background(), res.ID)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := webhook.EventOf(r)
		if err != nil || !bytes.Equal(ev.Body, body) || ev.Body == nil {
			t.Fatalf("%s: stored %q, %v", name, ev.Body, err)
		}
	}
}
