package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
)

type testArgs struct {
	N    int    `json:"n"`
	Note string `json:"note,omitempty"`
}

// Functions of the tests. No worker serves idle and other: their runs stay
// pending until canceled.
var (
	idleFn  = jetflow.Define[testArgs]("test.idle")
	otherFn = jetflow.Define[testArgs]("other.fn")
	okFn    = jetflow.Define[testArgs]("test.ok")
	failFn  = jetflow.Define[testArgs]("test.fail")
	blockFn = jetflow.Define[testArgs]("test.block")
)

// evilError is the message of failFn's runs: markup that must reach the
// page as text.
const evilError = `boom <script>window.pwned=1</script><img src=x onerror="window.pwned=2">`

type env struct {
	*testserver.Env
	P   *producer.Producer
	URL string
	W   *worker.Worker
}

// setup starts an embedded server, a producer and the dashboard on an
// httptest server.
func setup(t *testing.T, cfg dashboard.Config) *env {
	t.Helper()
	return setupOn(t, testserver.Start(t), cfg)
}

// setupOn is setup on a server that is running already.
func setupOn(t *testing.T, ts *testserver.Env, cfg dashboard.Config) *env {
	t.Helper()
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{Env: ts, P: p}
	srv := httptest.NewServer(dashboard.New(p, cfg))
	t.Cleanup(srv.Close)
	e.URL = srv.URL
	return e
}

// startWorker serves okFn, failFn and blockFn. blockFn reports 40 %
// progress and waits for its context (cancel ends it).
func (e *env) startWorker(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	w, err := worker.New(ctx, e.JS, worker.Config{ID: "w1", ProgressInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, okFn, func(ctx context.Context, j *worker.Job[testArgs]) error {
		return j.SetResult(map[string]any{"doubled": j.Args.N * 2, "note": j.Args.Note})
	})
	worker.Handle(w, failFn, func(ctx context.Context, j *worker.Job[testArgs]) error {
		return jetflow.Permanent(errors.New(evilError))
	})
	worker.Handle(w, blockFn, func(ctx context.Context, j *worker.Job[testArgs]) error {
		if err := j.Progress(ctx, jetflow.Progress{Percent: 40, Processed: 4, Total: 10, Message: "halfway"}); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}, worker.Options{Concurrency: 4})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	e.W = w
}

func (e *env) enqueue(t *testing.T, c jetflow.Call, id string) string {
	t.Helper()
	var opts []producer.Option
	if id != "" {
		opts = append(opts, producer.WithID(id))
	}
	got, err := e.P.Enqueue(context.Background(), c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (e *env) waitState(t *testing.T, id string, st jetflow.State) *jetflow.Run {
	t.Helper()
	var r *jetflow.Run
	testserver.Eventually(t, 20*time.Second, "run "+id+" "+string(st), func() bool {
		var err error
		r, err = e.P.Get(context.Background(), id)
		return err == nil && r.State == st
	})
	return r
}

// do sends a request and returns the status, headers and body.
func do(t testing.TB, method, url string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// getJSON expects status want and decodes the body into v.
func getJSON(t testing.TB, method, url string, want int, v any) {
	t.Helper()
	st, hdr, body := do(t, method, url, nil)
	if st != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, url, st, want, body)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: Content-Type %q, want JSON", method, url, ct)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s %s: %v: %s", method, url, err, body)
	}
}

// apiError expects a JSON error with status want and returns its message.
func apiError(t *testing.T, method, url string, want int) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	getJSON(t, method, url, want, &e)
	if e.Error == "" {
		t.Fatalf("%s %s: empty error message", method, url)
	}
	return e.Error
}

type listPage struct {
	Runs   []*jetflow.Run `json:"runs"`
	Next   string         `json:"next"`
	Prev   string         `json:"prev"`
	Sort   string         `json:"sort"`
	Order  string         `json:"order"`
	Counts counts         `json:"counts"`
	// Indexed: read from the run index.
	Indexed bool `json:"indexed"`
}

type counts struct {
	Pending    int `json:"pending"`
	InProgress int `json:"inProgress"`
	Success    int `json:"success"`
	Failed     int `json:"failed"`
	Canceled   int `json:"canceled"`
	Total      int `json:"total"`
	// Source: "index" or "scan".
	Source string `json:"source"`
}

// numbers is c without its source.
func (c counts) numbers() counts {
	c.Source = ""
	return c
}

func ids(runs []*jetflow.Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	Name string
	Data string
}

// subscribe opens an events stream; the returned channel delivers its
// events and is closed when the stream ends. The stream is closed at the
// end of the test.
func subscribe(t *testing.T, url string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		t.Fatalf("events: status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Name != "" || ev.Data != "" {
					select {
					case out <- ev:
					case <-ctx.Done():
						return
					}
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return out
}

// next waits for the next event named name for which match holds,
// skipping others.
func next(t *testing.T, ch <-chan sseEvent, name string, match func(data string) bool) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("events stream ended while waiting for %q", name)
			}
			if ev.Name == name && (match == nil || match(ev.Data)) {
				return ev.Data
			}
		case <-timeout:
			t.Fatalf("no %q event within 20s", name)
		}
	}
}
