package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
)

// startSecured starts an embedded server with o (Dir and SyncEvery set
// here) and provisions jetflow's streams on it.
func startSecured(t *testing.T, o embedded.Options, connOpts ...nats.Option) *embedded.Server {
	t.Helper()
	o.Dir, o.SyncEvery = t.TempDir(), testSyncEvery
	s, err := embedded.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	nc, err := s.Connect(connOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(context.Background(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// closedURL is a URL of a port nothing listens on.
func closedURL(t *testing.T, userinfo string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "nats://" + userinfo + "@" + addr
}

// Passwords and tokens given in --url, --password or --user never appear
// in an error or in what a command prints.
func TestCredentialsRedacted(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const pw, tok = "S3cretPassw0rd", "T0kenABCDEF123"
	srv := startSecured(t, embedded.Options{User: "alice", Password: pw})
	good := strings.Replace(srv.ClientURL(), "nats://", "nats://alice:"+pw+"@", 1)
	bad := strings.Replace(srv.ClientURL(), "nats://", "nats://alice:"+pw+"x@", 1)
	cases := []struct {
		name string
		args []string
	}{
		{"password in a URL, no server", []string{"--url", closedURL(t, "alice:"+pw)}},
		{"token in a URL, no server", []string{"--url", closedURL(t, tok)}},
		{"URL list", []string{"--url", closedURL(t, "alice:"+pw) + "," + closedURL(t, tok)}},
		{"wrong password in a URL", []string{"--url", bad}},
		{"wrong password flag", []string{"--url", srv.ClientURL(), "--user", "alice", "--password", pw + "x"}},
		{"token flag, wrong", []string{"--url", srv.ClientURL(), "--user", tok}},
		{"unparsable URL", []string{"--url", "nats://alice:" + pw + "@bad host:4222"}},
	}
	for _, tc := range cases {
		out, errw, err := cli(ctx, t, "runs", append([]string{"list"}, tc.args...)...)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, s := range []string{err.Error(), out, errw} {
			if strings.Contains(s, pw) || strings.Contains(s, tok) {
				t.Errorf("%s: a secret is printed: %q", tc.name, s)
			}
		}
		if !strings.Contains(err.Error(), "xxxxx") && strings.Contains(strings.Join(tc.args, " "), "@") && !strings.Contains(tc.name, "wrong password in a URL") {
			t.Errorf("%s: error without the redacted URL: %v", tc.name, err)
		}
	}
	// With the right credentials the command works, and the dashboard's
	// banner shows the URL without the password.
	mustCLI(ctx, t, "runs", "list", "--url", good)
	mustCLI(ctx, t, "runs", "list", "--url", srv.ClientURL(), "--user", "alice", "--password", pw)
	out, stop := startCommand(t, "dashboard", "--url", good, "--listen", "127.0.0.1:0")
	waitDashboard(t, out)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "reading runs from") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Contains(s, pw) || !strings.Contains(s, "nats://alice:xxxxx@") {
		t.Fatalf("dashboard output:\n%s", s)
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":       "nats://127.0.0.1:4222",
		"nats://a:b@h:1":              "nats://a:xxxxx@h:1",
		"nats://tok@h:1":              "nats://xxxxx@h:1",
		"nats://a:b@h:1,nats://t@h:2": "nats://a:xxxxx@h:1,nats://xxxxx@h:2",
		"tls://a:p%40ss@h:1":          "tls://a:xxxxx@h:1",
		"nats://a:b c@bad host:1":     "nats://xxxxx@bad host:1",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// The nats CLI's connection flags: --user/--password, --tlsca, --tlscert,
// --tlskey, --nkey, --creds and --context.
func TestConnectionFlags(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := t.TempDir()
	c := testserver.WriteCerts(t, dir)
	tlsSrv := startSecured(t, embedded.Options{TLSCert: c.ServerCert, TLSKey: c.ServerKey, TLSCA: c.CA, Token: "tls-token-0123456789"},
		nats.ClientCert(c.ClientCert, c.ClientKey))
	u := tlsSrv.ClientURL()
	mustCLI(ctx, t, "runs", "list", "--url", u, "--user", "tls-token-0123456789", "--tlsca", c.CA, "--tlscert", c.ClientCert, "--tlskey", c.ClientKey)
	if _, _, err := cli(ctx, t, "runs", "list", "--url", u, "--user", "tls-token-0123456789", "--tlsca", c.CA); err == nil {
		t.Error("no client certificate: connected")
	}
	if _, _, err := cli(ctx, t, "runs", "list", "--url", u, "--tlscert", c.ClientCert); err == nil || !strings.Contains(err.Error(), "--tlskey") {
		t.Errorf("--tlscert alone: %v", err)
	}

	// A nats CLI context file, and flags over it.
	ctxFile := filepath.Join(dir, "prod.json")
	data, _ := json.Marshal(map[string]any{"url": u, "token": "tls-token-0123456789", "cert": c.ClientCert, "key": c.ClientKey, "ca": c.CA, "description": "test"})
	if err := os.WriteFile(ctxFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	mustCLI(ctx, t, "runs", "list", "--context", ctxFile)
	if _, _, err := cli(ctx, t, "runs", "list", "--context", ctxFile, "--user", "wrong-token"); err == nil {
		t.Error("--user over the context's token: connected")
	}
	if _, _, err := cli(ctx, t, "runs", "list", "--context", filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing context: %v", err)
	}

	// An NKey user.
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nkey server not ready")
	}
	t.Cleanup(ns.Shutdown)
	if _, _, err := cli(ctx, t, "provision", "--url", ns.ClientURL()); err == nil {
		t.Error("no nkey: connected")
	}
	mustCLI(ctx, t, "provision", "--url", ns.ClientURL(), "--nkey", seedFile)
	mustCLI(ctx, t, "runs", "list", "--url", ns.ClientURL(), "--nkey", seedFile)
	if _, _, err := cli(ctx, t, "runs", "list", "--url", ns.ClientURL(), "--creds", filepath.Join(dir, "none.creds")); err == nil || !strings.Contains(err.Error(), "none.creds") {
		t.Errorf("missing creds file: %v", err)
	}
}

// --context NAME reads $XDG_CONFIG_HOME/nats/context/NAME.json, as the
// nats CLI does.
func TestNamedContext(t *testing.T) {
	e := setup(t)
	ctx := testCtx(t)
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	if err := os.MkdirAll(filepath.Join(cfg, "nats", "context"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(map[string]string{"url": e.URL})
	if err := os.WriteFile(filepath.Join(cfg, "nats", "context", "dev.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	mustCLI(ctx, t, "runs", "list", "--context", "dev", "--url", closedURL(t, "x"), "--url", e.URL)
	out, _ := mustCLI(ctx, t, "runs", "list", "--context", "dev")
	if !strings.Contains(out, "no runs") && !strings.Contains(out, "ID") {
		t.Logf("runs list printed %q", out)
	}
	if _, _, err := cli(ctx, t, "runs", "list", "--context", "nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown context: %v", err)
	}
}

// Provisioning is an explicit step: client commands never create streams,
// and say how to provision them.
func TestProvisionCommand(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s, err := embedded.Start(embedded.Options{Dir: t.TempDir(), SyncEvery: testSyncEvery})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	u := s.ClientURL()
	_, _, err = cli(ctx, t, "runs", "list", "--url", u)
	if !errors.Is(err, streams.ErrNotProvisioned) || !strings.Contains(err.Error(), "jetflow provision") {
		t.Fatalf("runs list on an empty server: %v", err)
	}
	if _, _, err := cli(ctx, t, "provision", "--check", "--url", u); !errors.Is(err, streams.ErrNotProvisioned) {
		t.Fatalf("provision --check on an empty server: %v", err)
	}
	out, _ := mustCLI(ctx, t, "provision", "--url", u)
	if !strings.Contains(out, "to do:") || !strings.Contains(out, "provisioned: JETFLOW_FN") {
		t.Fatalf("provision printed %q", out)
	}
	out, _ = mustCLI(ctx, t, "provision", "--check", "--url", u)
	if !strings.HasPrefix(out, "provisioned:") {
		t.Fatalf("provision --check printed %q", out)
	}
	out, _ = mustCLI(ctx, t, "provision", "--url", u)
	if !strings.HasPrefix(out, "already provisioned") {
		t.Fatalf("second provision printed %q", out)
	}
	mustCLI(ctx, t, "runs", "list", "--url", u)
}

// A CLI user without a permission a command needs gets the server's
// permissions violation at once, not a hang.
// readerServer starts a nats-server with JetStream and two users: admin,
// and reader, who may not purge streams, write buckets or publish runs. It
// provisions the streams as admin and enqueues one run due in an hour,
// whose id it returns with the server's URL.
func readerServer(ctx context.Context, t *testing.T) (url, id string) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), Users: []*server.User{
			{Username: "admin", Password: "admin-pass-0123"},
			{Username: "reader", Password: "reader-pass-0123", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Deny: []string{"$JS.API.STREAM.PURGE.>", "$KV.>", "jetflow.fn.>"}},
			}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("not ready")
	}
	t.Cleanup(ns.Shutdown)
	url = ns.ClientURL()
	mustCLI(ctx, t, "provision", "--url", url, "--user", "admin", "--password", "admin-pass-0123")
	out, _ := mustCLI(ctx, t, "enqueue", "x.y", "{}", "--after", "1h", "--url", url, "--user", "admin", "--password", "admin-pass-0123")
	return url, strings.TrimSpace(out)
}

func TestPermissionViolationEndsCommandAtOnce(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	u, id := readerServer(ctx, t)
	mustCLI(ctx, t, "runs", "get", id, "--url", u, "--user", "reader", "--password", "reader-pass-0123")
	// A command that waited for a reply that never comes would wait for
	// its context: one of 2 minutes of its own, far past the bound below,
	// while a loaded machine's connects and reads stay far within it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	_, _, err := cli(ctx, t, "runs", "cancel", id, "--url", u, "--user", "reader", "--password", "reader-pass-0123")
	if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "$KV.jetflow_runs") {
		t.Fatalf("cancel without write rights: %v", err)
	}
	_, _, err = cli(ctx, t, "enqueue", "x.y", "{}", "--url", u, "--user", "reader", "--password", "reader-pass-0123")
	if !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("enqueue without publish rights: %v", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("took %s: waited for a timeout", d)
	}
}

// `jetflow dashboard` run by a NATS user that may not write asks the
// server which buttons to show with writes that cannot succeed: their
// denials are answers, not faults, and are not printed (a read-only
// dashboard printed three permission violations a minute). A real denial
// still is.
func TestDashboardProbesPrintNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	u, id := readerServer(ctx, t)

	stdout, stderr, stop := startCommandStderr(t, "dashboard", "--url", u, "--user", "reader", "--password", "reader-pass-0123", "--listen", "127.0.0.1:0")
	url := waitDashboard(t, stdout)
	for _, page := range []string{"runs/" + id, "functions", "crons"} {
		res, err := http.Get(url + page)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", page, res.StatusCode, body)
		}
		if strings.Contains(string(body), `action="`) && strings.Contains(string(body), "/cancel") {
			t.Errorf("%s shows a Cancel button to a user that may not write runs", page)
		}
	}
	// A real denial after the probes: the connection reports errors in
	// order, so once it is printed, any probe's would have been too.
	req, _ := http.NewRequest(http.MethodPost, url+"api/runs/"+id+"/cancel", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("cancel as reader: %d, want 403", res.StatusCode)
	}
	testserver.Eventually(t, 10*time.Second, "the cancel's violation printed", func() bool {
		return strings.Contains(stderr.String(), "$KV.jetflow_runs."+id)
	})
	if strings.Contains(stderr.String(), natsperm.ProbeKey) {
		t.Fatalf("a rights probe's denial was printed:\n%s", stderr.String())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// `jetflow dev` on a non-loopback host without a login warns loudly.
func TestDevWarnsWithoutLoginBeyondLoopback(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, errw, err := cli(ctx, t, "dev", "--host", "0.0.0.0", "--port", "0", "--no-demo", "--for", "200ms", "--data", t.TempDir(), "--sync-every", testSyncEvery.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errw, "WARNING") || !strings.Contains(errw, "every interface") || !strings.Contains(errw, "WITHOUT ANY LOGIN") {
		t.Fatalf("stderr without the warning:\n%s", errw)
	}
	out, errw, err := cli(ctx, t, "dev", "--host", "0.0.0.0", "--port", "0", "--no-demo", "--for", "200ms", "--data", t.TempDir(), "--sync-every", testSyncEvery.String(),
		"--user", "dev", "--password", "dev-pass-0123456")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(errw, "WARNING") || strings.Contains(out+errw, "dev-pass-0123456") || !strings.Contains(out, "--user dev") {
		t.Fatalf("with a login:\nstdout:\n%s\nstderr:\n%s", out, errw)
	}
	if _, _, err := cli(ctx, t, "dev", "--password", "x", "--port", "0", "--data", t.TempDir()); err == nil {
		t.Fatal("--password without --user accepted")
	}
}

// The dashboard command refuses a non-loopback address without a login,
// checks the Host header, and requires its token.
func TestDashboardCommandSecurity(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	if _, _, err := cli(ctx, t, "dashboard", "--url", e.URL, "--listen", "0.0.0.0:0"); err == nil || !strings.Contains(err.Error(), "--token") {
		t.Fatalf("non-loopback without a login: %v", err)
	}
	if _, _, err := cli(ctx, t, "dashboard", "--url", e.URL, "--listen", ":0"); err == nil {
		t.Fatal(":0 (every interface) without a login accepted")
	}
	if _, _, err := cli(ctx, t, "dashboard", "--url", e.URL, "--token", "a", "--basic-auth", "u:p"); err == nil {
		t.Fatal("--token with --basic-auth accepted")
	}
	out, stop := startCommand(t, "dashboard", "--url", e.URL, "--listen", "127.0.0.1:0", "--token", "dash-token-0123456789", "--allow-host", "jetflow.example")
	url := waitDashboard(t, out)
	get := func(host, auth string) int {
		req, _ := http.NewRequest("GET", url+"api/runs", nil)
		if host != "" {
			req.Host = host
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if c := get("", ""); c != http.StatusUnauthorized {
		t.Errorf("no token: %d", c)
	}
	if c := get("", "dash-token-0123456789"); c != http.StatusOK {
		t.Errorf("token: %d", c)
	}
	if c := get("evil.example", "dash-token-0123456789"); c != http.StatusMisdirectedRequest {
		t.Errorf("evil Host: %d", c)
	}
	if c := get("jetflow.example:8080", "dash-token-0123456789"); c != http.StatusOK {
		t.Errorf("allowed Host: %d", c)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "dash-token-0123456789") {
		t.Fatalf("the token is printed:\n%s", out.String())
	}
	// --insecure serves beyond loopback anyway, with a warning; the
	// listen address's own name is allowed as Host.
	out, stop = startCommand(t, "dashboard", "--url", e.URL, "--listen", "0.0.0.0:0", "--insecure")
	url = waitDashboard(t, out)
	if c := get("", ""); c != http.StatusOK {
		t.Errorf("--insecure on 0.0.0.0: %d (%s)", c, url)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
