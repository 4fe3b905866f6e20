package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/worker"
)

func TestPrintable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, one, lines string }{
		{"plain text, héllo 世界 ✓", "plain text, héllo 世界 ✓", "plain text, héllo 世界 ✓"},
		{"\x1b]0;PWNED\a\x1b[2J\rOVERWRITE", `\x1b]0;PWNED\a\x1b[2J\rOVERWRITE`, `\x1b]0;PWNED\a\x1b[2J\rOVERWRITE`},
		{"a\tb\nc", `a\tb\nc`, "a\\tb\nc"},
		{"csi \u009b2J del \x7f", `csi \x9b2J del \x7f`, `csi \x9b2J del \x7f`},
		{"bidi \u202egnp.exe zw\u200bsp", `bidi \u202egnp.exe zw\u200bsp`, `bidi \u202egnp.exe zw\u200bsp`},
		{"bad \xff\xfe utf-8", `bad \xff\xfe utf-8`, `bad \xff\xfe utf-8`},
	} {
		if got := printable(c.in); got != c.one {
			t.Errorf("printable(%q) = %q, want %q", c.in, got, c.one)
		}
		if got := printableLines(c.in); got != c.lines {
			t.Errorf("printableLines(%q) = %q, want %q", c.in, got, c.lines)
		}
	}
}

type escArgs struct {
	Note string `json:"note"`
}

var escFn = jetflow.Define[escArgs]("test.escapes")

// evil is a run error as a handler may return it, carrying user input:
// an OSC title change, a screen clear, a color, a carriage return.
const evil = "bad input \x1b]0;PWNED\a\x1b[2J\x1b[31mred\rOVERWRITE é世"

// terminalControls reports the first terminal control character in s
// other than a newline, and where.
func terminalControls(s string) (string, bool) {
	for i, r := range s {
		if r == '\n' {
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return s[max(0, i-40):min(len(s), i+40)], true
		}
	}
	return "", false
}

// Run data (errors, progress messages, args) reaches the operator's
// terminal escaped: runs list, get and watch, and dev's change lines, never
// write a run's control characters; --json is unchanged.
func TestRunDataIsEscapedOnTheTerminal(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setup(t)
	_, js := e.Connect()
	w, err := worker.New(ctx, js, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, escFn, func(ctx context.Context, j *worker.Job[escArgs]) error {
		_ = j.Progress(ctx, jetflow.Progress{Percent: 10, Message: evil})
		return jetflow.Permanent(errors.New(evil + "\nsecond line"))
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(c)
	})
	id, err := e.P.Enqueue(ctx, escFn.With(escArgs{Note: "\x1b[2J"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.P.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}

	escaped := `bad input \x1b]0;PWNED\a\x1b[2J\x1b[31mred\rOVERWRITE é世`
	for _, args := range [][]string{{"list"}, {"get", id}, {"watch", id}} {
		code, out, errw := runCLI(ctx, append([]string{"runs"}, append(args, "--url", e.URL)...)...)
		if bad, ok := terminalControls(out + errw); ok {
			t.Errorf("runs %s writes a run's control characters: %q", args[0], bad)
		}
		if !strings.Contains(out+errw, escaped[:40]) {
			t.Errorf("runs %s (exit %d) does not show the error escaped:\n%s%s", args[0], code, out, errw)
		}
	}
	// runs get shows the whole error, on its lines, and the args escaped
	// as JSON has them.
	_, out, _ := runCLI(ctx, "runs", "get", id, "--url", e.URL)
	if !strings.Contains(out, escaped+"\nsecond line\n") || !strings.Contains(out, `{"note":"\u001b[2J"}`) {
		t.Errorf("runs get:\n%s", out)
	}
	// --json is JSON: it carries the error as it is.
	r := e.getJSON(ctx, t, id)
	if r.Error != evil+"\nsecond line" || r.Progress == nil || r.Progress.Message != evil {
		t.Errorf("runs get --json: error %q, progress %+v", r.Error, r.Progress)
	}

	// dev prints each change of every run with the same lines.
	var lines syncBuffer
	tr := newRunTracker(&lines)
	first := *r
	first.State, first.Error, first.Progress = jetflow.InProgress, "", nil
	tr.apply(&first, true)
	tr.apply(r, true)
	if bad, ok := terminalControls(lines.String()); ok {
		t.Errorf("dev's change lines write a run's control characters: %q", bad)
	}
	if !strings.Contains(lines.String(), "inProgress -> failed") || !strings.Contains(lines.String(), escaped[:40]) {
		t.Errorf("dev's change lines:\n%s", lines.String())
	}
}
