package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
)

// runCLI runs a whole command line as main does and returns its exit code
// and what it printed on stdout and stderr.
func runCLI(ctx context.Context, args ...string) (int, string, string) {
	var out, errw syncBuffer
	code := runMain(withOutput(ctx, &out, &errw), args)
	return code, out.String(), errw.String()
}

// Every level answers -h and --help on stdout with exit code 0, and lists
// its flags as the README writes them (--url, not -url).
func TestHelpAtEveryLevel(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	lines := [][]string{
		{"help"}, {"--help"}, {"-h"},
		{"help", "runs"},
		{"runs", "--help"}, {"runs", "-h"}, {"runs", "help"},
		{"crons", "--help"}, {"functions", "--help"},
	}
	for name := range commands {
		lines = append(lines, []string{name, "--help"}, []string{name, "-h"})
	}
	for _, sub := range []string{"list", "get", "cancel", "watch"} {
		lines = append(lines, []string{"runs", sub, "--help"}, []string{"runs", sub, "-h"})
	}
	for _, sub := range []string{"list", "get", "pause", "resume", "delete", "add", "next"} {
		lines = append(lines, []string{"crons", sub, "--help"}, []string{"crons", sub, "-h"})
	}
	lines = append(lines, []string{"functions", "list", "--help"})
	for _, args := range lines {
		code, out, errw := runCLI(ctx, args...)
		if code != exitOK || !strings.Contains(out, "usage: jetflow") || errw != "" {
			t.Errorf("jetflow %s: exit %d, stdout %q, stderr %q; want usage on stdout, exit 0",
				strings.Join(args, " "), code, out, errw)
			continue
		}
		if strings.Contains(out, "\n  -url") || strings.Contains(out, "\n  -prefix") || strings.Contains(out, "\n  -json") {
			t.Errorf("jetflow %s: flags shown with one dash:\n%s", strings.Join(args, " "), out)
		}
	}
	_, out, _ := runCLI(ctx, "runs", "list", "--help")
	for _, want := range []string{"--url string", "--state string", "--limit int", "(default 50)", "--json"} {
		if !strings.Contains(out, want) {
			t.Errorf("runs list --help lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = runCLI(ctx, "crons", "next", "-h")
	if !strings.Contains(out, "\n  -n int") || !strings.Contains(out, "\n  --tz string") {
		t.Errorf("crons next -h:\n%s", out)
	}
	code, _, errw := runCLI(ctx, "runs", "list", "--bogus")
	if code != exitUsage || !strings.Contains(errw, "not defined: --bogus") || strings.Contains(errw, " -bogus") {
		t.Errorf("runs list --bogus: exit %d, stderr %q", code, errw)
	}
	code, _, errw = runCLI(ctx, "runs", "list", "--limit", "x")
	if code != exitUsage || !strings.Contains(errw, "for flag --limit") {
		t.Errorf("runs list --limit x: exit %d, stderr %q", code, errw)
	}
	_, out, _ = runCLI(ctx, "--help")
	if !strings.Contains(out, "Exit codes:") || !strings.Contains(out, "--version") {
		t.Errorf("jetflow --help does not document exit codes and --version:\n%s", out)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	for _, arg := range []string{"--version", "version", "-version"} {
		code, out, errw := runCLI(ctx, arg)
		v := strings.TrimPrefix(strings.TrimSpace(out), "jetflow ")
		if code != exitOK || errw != "" || v == "" || v == strings.TrimSpace(out) || strings.Contains(v, " ") {
			t.Errorf("jetflow %s: exit %d, stdout %q, stderr %q", arg, code, out, errw)
		}
	}
}

// Bad usage is exit code 2, with the usage on stderr and nothing on stdout.
func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	for _, args := range [][]string{
		{}, {"nope"}, {"runs"}, {"runs", "nope"}, {"crons"}, {"functions"}, {"functions", "nope"},
		{"runs", "list", "--nope"}, {"runs", "get"}, {"enqueue"}, {"crons", "next"},
	} {
		code, out, errw := runCLI(ctx, args...)
		if code != exitUsage || out != "" || !strings.Contains(errw, "usage") {
			t.Errorf("jetflow %s: exit %d, stdout %q, stderr %q; want exit 2 with usage on stderr",
				strings.Join(args, " "), code, out, errw)
		}
	}
}

// runs watch exits 0 on success, 3 when the run ends failed, 4 canceled.
func TestRunsWatchExitCodes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.serveDemo(t)
	ctx := testCtx(t)
	enqueue := func(args ...string) string {
		out, _ := mustCLI(ctx, t, "enqueue", append(args, "--url", e.URL)...)
		return strings.TrimSpace(out)
	}
	ok := enqueue("demo.hello", `{"steps":1}`)
	failed := enqueue("demo.flaky", `{"failures":3}`, "--max-attempts", "1")
	canceled := enqueue("demo.hello", `{}`, "--after", "1h")
	mustCLI(ctx, t, "runs", "cancel", canceled, "--url", e.URL)

	for _, c := range []struct {
		id   string
		code int
		err  string
	}{{ok, exitOK, ""}, {failed, exitRunFailed, "failed: "}, {canceled, exitRunCanceled, "canceled"}} {
		code, out, errw := runCLI(ctx, "runs", "watch", c.id, "--url", e.URL)
		if code != c.code || !strings.Contains(out, c.id) || !strings.Contains(errw, c.err) {
			t.Errorf("runs watch %s: exit %d (want %d)\nstdout %s\nstderr %s", c.id, code, c.code, out, errw)
		}
		code, out, _ = runCLI(ctx, "runs", "watch", c.id, "--json", "--url", e.URL)
		var last map[string]any
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if err := json.Unmarshal([]byte(line), &last); err != nil {
				t.Fatalf("runs watch --json printed %q: %v", line, err)
			}
		}
		if code != c.code || last["id"] != c.id || last["state"] == "" {
			t.Errorf("runs watch --json %s: exit %d, last %v", c.id, code, last)
		}
	}
}

// Every command that prints takes --json, with the dashboard API's field
// names: a run is jetflow.Run's JSON (id, name, state, scheduledTime...).
func TestJSONEverywhere(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.serveDemo(t)
	ctx := testCtx(t)
	u := []string{"--url", e.URL}
	asJSON := func(v any, args ...string) {
		t.Helper()
		out, _ := mustCLI(ctx, t, args[0], append(append(args[1:], "--json"), u...)...)
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("jetflow %s --json printed %q: %v", strings.Join(args, " "), out, err)
		}
	}
	var run map[string]any
	asJSON(&run, "enqueue", "demo.hello", `{"name":"j"}`, "--after", "1h", "--id", "json-1")
	for _, k := range []string{"id", "name", "state", "scheduledTime", "creationTime", "attempts", "args"} {
		if _, ok := run[k]; !ok {
			t.Errorf("enqueue --json lacks %q: %v", k, run)
		}
	}
	if run["id"] != "json-1" || run["state"] != string(jetflow.Pending) {
		t.Errorf("enqueue --json = %v", run)
	}
	var got jetflow.Run
	asJSON(&got, "runs", "get", "json-1")
	if got.ID != "json-1" || got.Name != "demo.hello" {
		t.Errorf("runs get --json = %+v", got)
	}
	var page struct {
		Runs []jetflow.Run `json:"runs"`
	}
	asJSON(&page, "runs", "list")
	if len(page.Runs) != 1 || page.Runs[0].ID != "json-1" {
		t.Errorf("runs list --json = %+v", page)
	}
	var cancel struct {
		Canceled bool        `json:"canceled"`
		Run      jetflow.Run `json:"run"`
	}
	asJSON(&cancel, "runs", "cancel", "json-1")
	if !cancel.Canceled || cancel.Run.State != jetflow.Canceled {
		t.Errorf("runs cancel --json = %+v", cancel)
	}
	asJSON(&cancel, "runs", "cancel", "json-1")
	if cancel.Canceled || cancel.Run.ID != "json-1" {
		t.Errorf("runs cancel --json of an ended run = %+v", cancel)
	}
	var fns []kv.FunctionInfo
	asJSON(&fns, "functions", "list")
	if len(fns) != 3 {
		t.Errorf("functions list --json = %+v", fns)
	}
	var cron kv.CronInfo
	asJSON(&cron, "crons", "add", "nightly", "daily 2:00", "demo.hello", "{}")
	if cron.Name != "nightly" || cron.Function != "demo.hello" || cron.Next.IsZero() {
		t.Errorf("crons add --json = %+v", cron)
	}
	asJSON(&cron, "crons", "pause", "nightly")
	if cron.Enabled {
		t.Errorf("crons pause --json = %+v", cron)
	}
	asJSON(&cron, "crons", "resume", "nightly")
	if !cron.Enabled {
		t.Errorf("crons resume --json = %+v", cron)
	}
	var crons []kv.CronInfo
	asJSON(&crons, "crons", "list")
	if len(crons) != 1 {
		t.Errorf("crons list --json = %+v", crons)
	}
	var del struct {
		Name    string `json:"name"`
		Deleted bool   `json:"deleted"`
	}
	asJSON(&del, "crons", "delete", "nightly")
	if !del.Deleted || del.Name != "nightly" {
		t.Errorf("crons delete --json = %+v", del)
	}
	var prov provisionJSON
	asJSON(&prov, "provision", "--check")
	if !prov.Provisioned || prov.Changed || len(prov.Streams) != 10 {
		t.Errorf("provision --check --json = %+v", prov)
	}
	out, _ := mustCLI(ctx, t, "crons", "next", "every 1h", "--from", "2026-01-01T00:00:00Z", "-n", "2", "--json")
	var next struct {
		Schedule string   `json:"schedule"`
		Times    []string `json:"times"`
	}
	if err := json.Unmarshal([]byte(out), &next); err != nil || len(next.Times) != 2 || next.Schedule == "" {
		t.Errorf("crons next --json = %s (%v)", out, err)
	}
}

// The hint "is jetflow dev running?" comes only with a refused connection
// to the default URL, where jetflow dev listens.
func TestDevHintOnlyWhereItApplies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url  string
		err  error
		hint bool
	}{
		{nats.DefaultURL, nats.ErrNoServers, true},
		{"nats://localhost:4222", nats.ErrNoServers, true},
		{"nats://127.0.0.1:4333", nats.ErrNoServers, false},
		{"nats://nats.example.com:4222", nats.ErrNoServers, false},
		{"tls://127.0.0.1:4222", nats.ErrNoServers, false},
		{nats.DefaultURL, nats.ErrAuthorization, false},
		{nats.DefaultURL, errors.New("x509: certificate signed by unknown authority"), false},
	} {
		if got := devHintApplies(c.url, c.err); got != c.hint {
			t.Errorf("devHintApplies(%s, %v) = %v, want %v", c.url, c.err, got, c.hint)
		}
	}
	ctx := testCtx(t)
	code, _, errw := runCLI(ctx, "runs", "list", "--url", closedURL(t, "u:p"))
	if code != exitError || strings.Contains(errw, "jetflow dev") || !strings.Contains(errw, "connect") {
		t.Errorf("refused on a non-default URL: exit %d, stderr %q", code, errw)
	}
}
