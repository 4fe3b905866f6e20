package dashboard_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The browser tests drive Debian's headless Chromium through the DevTools
// protocol on a pipe (--remote-debugging-pipe: commands on fd 3, answers on
// fd 4, each a JSON message ended by a NUL byte), so that they can wait for
// the page's live updates and act on the page. A plain --dump-dom cannot:
// it dumps at the load event, before the events stream delivers anything,
// and --virtual-time-budget never expires while an EventSource is open.

// chromiumPath is the browser: $JETFLOW_CHROMIUM, else chromium on PATH.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("JETFLOW_CHROMIUM"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the dashboard's browser tests need Chromium, and chromium is not on PATH (%v).\n"+
			"Install Debian's chromium: sudo apt-get update && sudo apt-get install -y chromium\n"+
			"(.ci/run installs it when missing), or set JETFLOW_CHROMIUM to a Chromium or Chrome binary.", err)
	}
	return p
}

// browser is one headless Chromium with one page.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	in      *os.File // our end of fd 3
	stderr  *bytes.Buffer
	session string

	mu      sync.Mutex
	nextID  int
	pending map[int]chan cdpMessage
	closed  chan struct{}
	readErr error
	// problems are the page's uncaught exceptions, console errors and
	// error log entries (a CSP violation, a failed request), as text.
	problems []string
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    any             `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// startBrowser starts Chromium with a 1280x900 page; it is closed at the
// end of the test.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
	cmdIn, ourIn, err := os.Pipe() // we write, Chromium reads fd 3
	if err != nil {
		t.Fatal(err)
	}
	ourOut, cmdOut, err := os.Pipe() // Chromium writes fd 4, we read
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir="+t.TempDir(), "--window-size=1280,900",
		"--remote-debugging-pipe", "about:blank")
	b := &browser{t: t, cmd: cmd, in: ourIn, stderr: new(bytes.Buffer), pending: map[int]chan cdpMessage{}, closed: make(chan struct{})}
	cmd.Stderr = b.stderr
	cmd.ExtraFiles = []*os.File{cmdIn, cmdOut}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	// The browser holds its ends of the pipes now.
	for _, f := range []*os.File{cmdIn, cmdOut} {
		if err := f.Close(); err != nil {
			t.Logf("close the browser's end of a pipe: %v", err)
		}
	}
	go b.read(ourOut)
	t.Cleanup(b.close)

	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	b.call(b.session, "Runtime.enable", nil, nil)
	b.call(b.session, "Log.enable", nil, nil)
	b.call(b.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

func (b *browser) read(r *os.File) {
	defer close(b.closed)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.readErr = err
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil {
			continue
		}
		if m.ID == 0 {
			if p := problem(m.Method, msg[:len(msg)-1]); p != "" {
				b.mu.Lock()
				b.problems = append(b.problems, p)
				b.mu.Unlock()
			}
			continue
		}
		b.mu.Lock()
		ch := b.pending[m.ID]
		delete(b.pending, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// call sends a DevTools command and decodes its result into out.
func (b *browser) call(session, method string, params any, out any) {
	b.t.Helper()
	if err := b.try(session, method, params, out); err != nil {
		b.t.Fatalf("%v\nchromium stderr:\n%s", err, b.stderrTail())
	}
}

func (b *browser) try(session, method string, params any, out any) error {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	if params == nil {
		params = map[string]any{}
	}
	data, err := json.Marshal(cdpMessage{ID: id, Method: method, Params: params, SessionID: session})
	if err != nil {
		return err
	}
	if _, err := b.in.Write(append(data, 0)); err != nil {
		return fmt.Errorf("devtools %s: write: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("devtools %s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	case <-b.closed:
		return fmt.Errorf("devtools %s: chromium exited: %v", method, b.readErr)
	case <-time.After(30 * time.Second):
		return fmt.Errorf("devtools %s: no answer within 30s", method)
	}
}

func (b *browser) stderrTail() string {
	var keep []string
	for _, l := range strings.Split(b.stderr.String(), "\n") {
		if !strings.Contains(l, "dbus") && strings.TrimSpace(l) != "" {
			keep = append(keep, l)
		}
	}
	if len(keep) > 30 {
		keep = keep[len(keep)-30:]
	}
	return strings.Join(keep, "\n")
}

// eval evaluates a JavaScript expression in the page and decodes its value.
func (b *browser) eval(expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := b.try(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res); err != nil {
		return err
	}
	if res.Exception != nil {
		return fmt.Errorf("%s: %s %s", expr, res.Exception.Text, res.Exception.Exception.Description)
	}
	if out == nil || len(res.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(res.Result.Value, out)
}

// navigate loads url and waits for the page's script to have shown live
// data (it sets data-live="ready" on <main> once it has).
func (b *browser) navigate(url string) {
	b.t.Helper()
	b.call(b.session, "Page.navigate", map[string]any{"url": url}, nil)
	b.waitFor("the page at "+url+" to be live", `(() => { const m = document.querySelector('main'); return document.readyState === 'complete' && !!m && m.dataset.live === 'ready' && location.href === `+jsString(url)+` })()`)
}

// waitFor polls a boolean JavaScript expression until it is true.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last error
	for {
		var ok bool
		last = b.eval(expr, &ok)
		if last == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			var html string
			_ = b.eval("document.documentElement.outerHTML", &html)
			b.t.Fatalf("timed out after 20s waiting for %s (last error: %v)\nDOM:\n%s\nchromium stderr:\n%s", what, last, html, b.stderrTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dom is the serialized DOM of the page, as the script left it.
func (b *browser) dom() string {
	b.t.Helper()
	var html string
	if err := b.eval("document.documentElement.outerHTML", &html); err != nil {
		b.t.Fatal(err)
	}
	return html
}

// screenshot writes a PNG of the page to path.
func (b *browser) screenshot(path string) []byte {
	b.t.Helper()
	var res struct {
		Data string `json:"data"`
	}
	b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return png
}

func (b *browser) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A browser gone already is as good as closed: what matters is that
	// its process ends; the errors are for the log of a failed test.
	if err := b.try("", "Browser.close", nil, nil); err != nil {
		b.t.Logf("close the browser: %v", err)
	}
	if err := b.in.Close(); err != nil {
		b.t.Logf("close the pipe to the browser: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- b.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		if kerr := b.cmd.Process.Kill(); kerr != nil {
			b.t.Logf("kill the browser: %v", kerr)
		}
		err = <-done
	}
	if err != nil {
		b.t.Logf("browser: %v", err)
	}
}

func jsString(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}

// problem is the text of a DevTools event that reports a problem of the
// page: an uncaught exception, console.error, or an error log entry.
func problem(method string, raw []byte) string {
	var ev struct {
		Params struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
			ExceptionDetails struct {
				Text      string `json:"text"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
			Entry struct {
				Level  string `json:"level"`
				Source string `json:"source"`
				Text   string `json:"text"`
				URL    string `json:"url"`
			} `json:"entry"`
		} `json:"params"`
	}
	if json.Unmarshal(raw, &ev) != nil {
		return ""
	}
	switch method {
	case "Runtime.exceptionThrown":
		d := ev.Params.ExceptionDetails
		return "exception: " + d.Text + " " + d.Exception.Description
	case "Runtime.consoleAPICalled":
		if ev.Params.Type != "error" && ev.Params.Type != "assert" {
			return ""
		}
		var parts []string
		for _, a := range ev.Params.Args {
			parts = append(parts, fmt.Sprint(a.Value)+a.Description)
		}
		return "console." + ev.Params.Type + ": " + strings.Join(parts, " ")
	case "Log.entryAdded":
		if ev.Params.Entry.Level != "error" {
			return ""
		}
		return "log " + ev.Params.Entry.Source + ": " + ev.Params.Entry.Text + " " + ev.Params.Entry.URL
	}
	return ""
}

// takeProblems returns the problems the page reported since the last call.
func (b *browser) takeProblems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}
