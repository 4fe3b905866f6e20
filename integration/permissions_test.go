package integration_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

// rolePasswords are the passwords of docs/permissions.md's users, given to
// nats-server as environment variables.
var rolePasswords = map[string]string{
	"admin": "admin-pw-0123456789", "producer": "producer-pw-0123456789", "worker": "worker-pw-0123456789",
	"scheduler": "scheduler-pw-0123456789", "dashboard": "dashboard-pw-0123456789", "cli": "cli-pw-0123456789",
}

// permissionsConf is the server configuration documented in
// docs/permissions.md, so that the documentation is what is tested.
func permissionsConf(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "permissions.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- permissions.conf[^>]*-->\\s*```\\n(.*?)```\\s*<!-- end permissions.conf -->").FindSubmatch(data)
	if m == nil {
		t.Fatal("docs/permissions.md has no permissions.conf block")
	}
	return string(m[1])
}

// withNoPurgeUser adds a user "nopurge": the producer's permissions
// without the purges of cancel.
func withNoPurgeUser(t *testing.T, conf string) string {
	t.Helper()
	start := strings.Index(conf, "{ user: producer,")
	end := strings.Index(conf, "# A worker")
	if start < 0 || end < start {
		t.Fatal("no producer user in the configuration")
	}
	entry := strings.Replace(conf[start:end], "{ user: producer,", "{ user: nopurge,", 1)
	entry = strings.Replace(entry, "publish: { allow: [", `publish: { deny: ["$JS.API.STREAM.PURGE.>"], allow: [`, 1)
	return conf[:end] + entry + conf[end:]
}

// withCancellerUser adds a user "canceller": the dashboard's permissions
// without publishing runs or pausing (a dashboard that only cancels).
func withCancellerUser(t *testing.T, conf string) string {
	t.Helper()
	start := strings.Index(conf, "{ user: dashboard,")
	end := strings.Index(conf, "# The CLI")
	if start < 0 || end < start {
		t.Fatal("no dashboard user in the configuration")
	}
	entry := strings.Replace(conf[start:end], "{ user: dashboard, password: $DASHBOARD_PASSWORD,", "{ user: canceller, password: $PRODUCER_PASSWORD,", 1)
	entry = strings.Replace(entry, "publish: { allow: [",
		`publish: { deny: ["jetflow.fn.>", "$KV.jetflow_functions.>", "$KV.jetflow_crons.>"], allow: [`, 1)
	return conf[:end] + entry + conf[end:]
}

// startSecuredNATS starts a nats-server process with JetStream and conf's
// authorization, and returns its URL.
func startSecuredNATS(t *testing.T, conf string) string {
	t.Helper()
	_, bin := binaries(t)
	dir := t.TempDir()
	port := freePort(t)
	full := fmt.Sprintf("listen: \"127.0.0.1:%d\"\nserver_name: perms\njetstream { store_dir: %q }\n", port, filepath.Join(dir, "js")) + conf
	path := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", path)
	cmd.Env = os.Environ()
	for role, pw := range rolePasswords {
		cmd.Env = append(cmd.Env, strings.ToUpper(role)+"_PASSWORD="+pw)
	}
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("nats-server log:\n%s", tail(log.String(), 4000))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-done:
			t.Fatalf("nats-server exited at start:\n%s", tail(log.String(), 4000))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server does not accept connections:\n%s", tail(log.String(), 4000))
		}
	}
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}

// connectAs connects as role (its password from rolePasswords, or pw).
func connectAs(t *testing.T, url, role string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	pw, ok := rolePasswords[role]
	if !ok {
		pw = rolePasswords["producer"]
	}
	opts = append([]nats.Option{nats.UserInfo(role, pw), nats.Name(role),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// denied checks that err is the server's permissions violation and came
// at once: a denied request must not wait for its context.
func denied(t *testing.T, what string, start time.Time, err error) {
	t.Helper()
	if !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("%s: %v, want a permissions violation", what, err)
	}
	// At once, not after waiting for a reply that never comes: the error
	// is the server's refusal, not a timeout carrying it.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("%s: %v after %s: it waited for a timeout", what, err, time.Since(start))
	}
}

type permArgs struct {
	N int `json:"n"`
}

var (
	permFn    = jetflow.Define[permArgs]("perm.fn")
	permFlaky = jetflow.Define[permArgs]("perm.flaky")
	permChild = jetflow.Define[permArgs]("perm.child")
	permIdle  = jetflow.Define[permArgs]("perm.idle") // no worker serves it
)

// Each role of docs/permissions.md, with exactly its documented
// permissions on a nats-server process: what the role does works, and
// what it may not do fails at once with the server's permissions
// violation.
func TestRolePermissions(t *testing.T) {
	url := startSecuredNATS(t, withCancellerUser(t, withNoPurgeUser(t, permissionsConf(t))))
	// The CLI is built before the test's deadline starts: a race build on
	// a loaded machine can take minutes.
	cli := goBuild(t, "./cmd/jetflow")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Before provisioning: no role may create the streams, and each says
	// so at once.
	_, pjs := connectAs(t, url, "producer")
	start := time.Now()
	_, err := producer.New(ctx, pjs, producer.Config{})
	denied(t, "producer.New on an unprovisioned server", start, err)
	if !strings.Contains(err.Error(), `Publish to "$JS.API.STREAM.`) || !strings.Contains(err.Error(), "jetflow provision") {
		t.Fatalf("producer.New: %v; want the denied create and the way out", err)
	}
	if _, err := producer.New(ctx, pjs, producer.Config{Provision: producer.ProvisionOff}); !errors.Is(err, streams.ErrNotProvisioned) {
		t.Fatalf("ProvisionOff on an unprovisioned server: %v", err)
	}
	_, wjs := connectAs(t, url, "worker")
	start = time.Now()
	_, err = worker.New(ctx, wjs, worker.Config{})
	denied(t, "worker.New on an unprovisioned server", start, err)
	_, sjs := connectAs(t, url, "scheduler")
	start = time.Now()
	_, err = scheduler.New(ctx, sjs, scheduler.Config{})
	denied(t, "scheduler.New on an unprovisioned server", start, err)

	// Provisioning, by the admin.
	_, ajs := connectAs(t, url, "admin")
	if err := streams.Provision(ctx, ajs, streams.Config{}); err != nil {
		t.Fatal(err)
	}

	// Every role that reads runs may ask the runs stream's leader, and the
	// scheduler the delayed bucket's: where a replica behind would cost a
	// run, jetflow reads from the leader (docs/design/guarantees.md, "Reads
	// from a replica that is behind").
	for _, role := range []string{"producer", "worker", "scheduler", "dashboard", "cli"} {
		_, js := connectAs(t, url, role)
		reads := map[string]string{"KV_jetflow_runs": "$KV.jetflow_runs.>"}
		if role == "scheduler" {
			reads["KV_jetflow_delayed"] = "$KV.jetflow_delayed.>"
		}
		for stream, subj := range reads {
			if _, err := kv.LastFromLeader(ctx, js, stream, subj); !errors.Is(err, jetstream.ErrMsgNotFound) {
				t.Fatalf("%s reads %s from its leader: %v, want no message (allowed)", role, stream, err)
			}
		}
	}

	// A worker on the producer's user may not create its consumer: Start
	// says so at once.
	pw, err := worker.New(ctx, pjs, worker.Config{})
	if err != nil {
		t.Fatalf("worker.New as producer: %v", err)
	}
	worker.Handle(pw, permChild, func(context.Context, *worker.Job[permArgs]) error { return nil })
	start = time.Now()
	denied(t, "worker.Start as producer (no consumer create)", start, pw.Start(ctx))

	// Worker and scheduler with their own users.
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	worker.Handle(w, permFn, func(ctx context.Context, j *worker.Job[permArgs]) error {
		if j.Args.N == 1 {
			if _, err := j.Enqueue(ctx, permChild.With(permArgs{N: 10})); err != nil {
				return err
			}
			if _, err := j.RunAfter(ctx, 500*time.Millisecond, permChild.With(permArgs{N: 11})); err != nil {
				return err
			}
		}
		return j.Progress(ctx, jetflow.Progress{Percent: 100})
	})
	worker.Handle(w, permFlaky, func(ctx context.Context, j *worker.Job[permArgs]) error {
		if j.Attempt() == 1 {
			return jetflow.RetryAfter(100*time.Millisecond, errors.New("first attempt fails"))
		}
		return nil
	})
	worker.Handle(w, permChild, func(context.Context, *worker.Job[permArgs]) error { return nil })
	if err := w.Start(ctx); err != nil {
		t.Fatalf("worker.Start: %v", err)
	}
	t.Cleanup(func() { stopWithin(w.Stop) })
	// The worker's user follows a pause (set here by the admin) and its end.
	if err := kv.SetPaused(ctx, ajs, streams.Config{}, permChild.Name(), true); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 10*time.Second, "worker follows the pause", func() bool { return w.Paused(permChild.Name()) })
	if err := kv.SetPaused(ctx, ajs, streams.Config{}, permChild.Name(), false); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 10*time.Second, "worker follows the resume", func() bool { return !w.Paused(permChild.Name()) })
	s, err := scheduler.New(ctx, sjs, scheduler.Config{})
	if err != nil {
		t.Fatalf("scheduler.New: %v", err)
	}
	if _, err := s.ConfigureCrons(scheduler.CronConfig{Crons: []scheduler.CronDef{
		{Name: "perm-every-second", Schedule: scheduler.Interval(time.Second), Call: permFn.With(permArgs{N: 2})},
	}}); err != nil {
		t.Fatalf("scheduler.ConfigureCrons: %v", err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("scheduler.Start: %v", err)
	}
	t.Cleanup(func() { stopWithin(s.Stop) })

	// The producer: schedules, reads, cancels; New only looks up.
	p, err := producer.New(ctx, pjs, producer.Config{})
	if err != nil {
		t.Fatalf("producer.New on a provisioned server: %v", err)
	}
	if _, err := producer.New(ctx, pjs, producer.Config{Provision: producer.ProvisionOff}); err != nil {
		t.Fatalf("producer.New, ProvisionOff: %v", err)
	}
	var ids []string
	add := func(id string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		ids = append(ids, id)
	}
	add(p.Enqueue(ctx, permFn.With(permArgs{N: 1})))
	add(p.RunAfter(ctx, 300*time.Millisecond, permFn.With(permArgs{N: 3})))
	add(p.Enqueue(ctx, permFn.With(permArgs{N: 4}), producer.WithID("perm-keyed")))
	add(p.Enqueue(ctx, permFlaky.With(permArgs{N: 5})))
	batch, err := p.Batch(ctx, []producer.Item{{Call: permFn.With(permArgs{N: 6})}, {Call: permFn.With(permArgs{N: 7}), At: time.Now().Add(200 * time.Millisecond)}})
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	ids = append(ids, batch...)
	for _, id := range ids {
		r, err := p.Wait(ctx, id)
		if err != nil || r.State != jetflow.Success {
			t.Fatalf("run %s: %+v, %v", id, r, err)
		}
	}
	if r, _ := p.Get(ctx, ids[0]); len(r.Children) != 2 {
		t.Fatalf("parent's children: %v", r.Children)
	}
	for _, child := range func() []string { r, _ := p.Get(ctx, ids[0]); return r.Children }() {
		if r, err := p.Wait(ctx, child); err != nil || r.State != jetflow.Success {
			t.Fatalf("child %s: %+v %v", child, r, err)
		}
	}
	if r, _ := p.Get(ctx, ids[3]); r.Attempts != 2 {
		t.Fatalf("flaky run: %d attempts, want 2 (a retry through the scheduler)", r.Attempts)
	}
	page, err := p.List(ctx, producer.Filter{Function: permFn.Name()})
	if err != nil || len(page.Runs) < 5 {
		t.Fatalf("List: %d runs, %v", len(page.Runs), err)
	}
	// The scheduler's user keeps the run index and the producer's reads
	// it: a page and the counts come from it, not from every record.
	testserverEventually(t, 20*time.Second, "List and counts from the run index", func() bool {
		page, err := p.List(ctx, producer.Filter{Function: permFn.Name(), State: jetflow.Success})
		c, cerr := p.Counts(ctx, "")
		return err == nil && page.Indexed && len(page.Runs) > 0 && cerr == nil && c.Source == "index"
	})
	later, err := p.RunAfter(ctx, time.Hour, permIdle.With(permArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.CancelRun(ctx, later); err != nil || !res.Canceled {
		t.Fatalf("producer cancels a delayed run: %+v %v", res, err)
	}
	now, err := p.Enqueue(ctx, permIdle.With(permArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cancel(ctx, now); err != nil {
		t.Fatalf("producer cancels a waiting run: %v", err)
	}
	testserverEventually(t, 20*time.Second, "a cron tick run by the worker", func() bool {
		page, err := p.List(ctx, producer.Filter{Function: permFn.Name(), State: jetflow.Success})
		if err != nil {
			return false
		}
		for _, r := range page.Runs {
			if strings.HasPrefix(r.ID, "cron-") {
				return true
			}
		}
		return false
	})

	// A producer without the purges of cancel: Cancel says so at once, and
	// the run is canceled all the same.
	_, njs := connectAs(t, url, "nopurge")
	np, err := producer.New(ctx, njs, producer.Config{Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatal(err)
	}
	for _, schedule := range []func() (string, error){
		func() (string, error) { return np.RunAfter(ctx, time.Hour, permIdle.With(permArgs{})) },
		func() (string, error) { return np.Enqueue(ctx, permIdle.With(permArgs{})) },
	} {
		id, err := schedule()
		if err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		err = np.Cancel(ctx, id)
		denied(t, "Cancel whose purge is denied", start, err)
		if !strings.Contains(err.Error(), "will not start") {
			t.Fatalf("Cancel error %v does not say the run is canceled", err)
		}
		if r, err := p.Get(ctx, id); err != nil || r.State != jetflow.Canceled {
			t.Fatalf("run after a denied purge: %+v %v", r, err)
		}
	}

	// The dashboard: reads everything live and cancels.
	_, djs := connectAs(t, url, "dashboard")
	dp, err := producer.New(ctx, djs, producer.Config{Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatalf("dashboard producer: %v", err)
	}
	crons, err := scheduler.NewCrons(ctx, djs, scheduler.CronConfig{})
	if err != nil {
		t.Fatalf("dashboard crons: %v", err)
	}
	srv := httptest.NewServer(dashboard.New(dp, dashboard.Config{Crons: crons}))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/", "/api/runs", "/api/runs?state=success", "/api/runs/" + ids[0], "/runs/" + ids[0], "/api/counts", "/api/functions", "/functions", "/api/crons", "/crons"} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("dashboard GET %s: %d %s", path, res.StatusCode, body)
		}
		if (path == "/api/counts" && !strings.Contains(string(body), `"source":"index"`)) ||
			(path == "/api/runs?state=success" && !strings.Contains(string(body), `"indexed":true`)) {
			t.Fatalf("dashboard GET %s: not from the run index: %s", path, body)
		}
		if path == "/api/functions" && !strings.Contains(string(body), permFlaky.Name()) {
			t.Fatalf("functions: %s", body)
		}
		if path == "/api/crons" && !strings.Contains(string(body), "perm-every-second") {
			t.Fatalf("crons: %s", body)
		}
	}
	ectx, ecancel := context.WithTimeout(ctx, 10*time.Second)
	req, _ := http.NewRequestWithContext(ectx, http.MethodGet, srv.URL+"/api/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for sc := bufio.NewScanner(res.Body); sc.Scan(); {
		if sc.Text() == "event: ready" {
			ready = true
			break
		}
	}
	res.Body.Close()
	ecancel()
	if !ready {
		t.Fatal("dashboard events: no ready event")
	}
	pending, err := p.RunAfter(ctx, time.Hour, permIdle.With(permArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	res, err = http.Post(srv.URL+"/api/runs/"+pending+"/cancel", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"canceled":true`) {
		t.Fatalf("dashboard cancel: %d %s", res.StatusCode, body)
	}
	// Its other buttons, each with the rights the role documents.
	post := func(srv *httptest.Server, path string) (int, string, time.Duration) {
		t.Helper()
		start := time.Now()
		res, err := http.Post(srv.URL+path, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, string(body), time.Since(start)
	}
	for _, b := range []struct {
		path   string
		status int
	}{
		{"/api/functions/" + permFn.Name() + "/pause", http.StatusOK},
		{"/api/functions/" + permFn.Name() + "/resume", http.StatusOK},
		{"/api/crons/perm-every-second/pause", http.StatusOK},
		{"/api/crons/perm-every-second/resume", http.StatusOK},
		{"/api/crons/perm-every-second/trigger", http.StatusOK},
		{"/api/runs/" + pending + "/rerun", http.StatusCreated},
	} {
		if st, body, _ := post(srv, b.path); st != b.status {
			t.Fatalf("dashboard POST %s: %d %s", b.path, st, body)
		}
	}
	// A dashboard whose user may cancel but not publish runs nor pause:
	// its pause buttons fail at once with the violation (403); a re-run
	// or a trigger is recorded at once, pending, for the scheduler's repair
	// sweep to publish (before: every button waited 15 s and said it
	// failed, and a second click re-ran the run twice).
	_, cjs := connectAs(t, url, "canceller")
	cp, err := producer.New(ctx, cjs, producer.Config{Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatalf("canceller producer: %v", err)
	}
	ccrons, err := scheduler.NewCrons(ctx, cjs, scheduler.CronConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// A request that waited out its NATS work would wait RequestTimeout:
	// 2 minutes, far past the bound below, which a loaded machine's
	// record writes stay far within.
	csrv := httptest.NewServer(dashboard.New(cp, dashboard.Config{Crons: ccrons, RequestTimeout: 2 * time.Minute}))
	t.Cleanup(csrv.Close)
	for _, b := range []struct {
		path   string
		status int
	}{
		{"/api/runs/" + pending + "/rerun", http.StatusCreated},
		{"/api/crons/perm-every-second/trigger", http.StatusOK},
		{"/api/functions/" + permFn.Name() + "/pause", http.StatusForbidden},
		{"/api/crons/perm-every-second/pause", http.StatusForbidden},
	} {
		st, body, took := post(csrv, b.path)
		if st != b.status || st == http.StatusForbidden && !strings.Contains(body, "Permissions Violation") {
			t.Fatalf("canceller POST %s: %d %s; want %d", b.path, st, body, b.status)
		}
		if took > time.Minute {
			t.Fatalf("canceller POST %s took %s", b.path, took)
		}
	}
	if r, err := p.Get(ctx, pending+"-rerun-2"); err != nil || r.State != jetflow.Pending {
		t.Fatalf("the canceller's re-run: %+v %v; want it pending", r, err)
	}
	if paused, err := dp.PausedFunctions(ctx); err != nil || paused[permFn.Name()] {
		t.Fatalf("paused after a denied pause: %v %v", paused, err)
	}
	// The producer role may not read the functions bucket: told at once
	// (before: three listings of 10 s each, then kv.ErrListStalled).
	start = time.Now()
	_, err = p.PausedFunctions(ctx)
	denied(t, "PausedFunctions as the producer", start, err)

	// The CLI, read-only: reads work, writes fail at once.
	run := func(args ...string) (string, error) {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		cmd := exec.CommandContext(cctx, cli, args...)
		cmd.Env = append(os.Environ(), "JETFLOW_URL="+url, "NATS_USER=cli", "NATS_PASSWORD="+rolePasswords["cli"])
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, args := range [][]string{
		{"runs", "list"}, {"runs", "get", ids[0]}, {"runs", "watch", ids[0]}, {"functions", "list"},
		{"crons", "list"}, {"provision", "--check"},
	} {
		if out, err := run(args...); err != nil {
			t.Fatalf("jetflow %s as cli: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	waiting, err := p.RunAfter(ctx, time.Hour, permIdle.With(permArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"runs", "cancel", waiting}, {"enqueue", "perm.fn", "{}"}} {
		start := time.Now()
		out, err := run(args...)
		if err == nil || !strings.Contains(out, "Permissions Violation") {
			t.Fatalf("jetflow %s as cli: %v\n%s; want a permissions violation", strings.Join(args, " "), err, out)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("jetflow %s took %s", strings.Join(args, " "), d)
		}
		if strings.Contains(out, rolePasswords["cli"]) {
			t.Fatalf("the password is printed: %s", out)
		}
	}
	if r, err := p.Get(ctx, waiting); err != nil || r.State != jetflow.Pending {
		t.Fatalf("run after a refused CLI cancel: %+v %v", r, err)
	}
}

// startSchedulerAs starts a scheduler as the scheduler user, stopped when
// the test ends.
func startSchedulerAs(ctx context.Context, t *testing.T, url string, opts ...nats.Option) {
	t.Helper()
	_, sjs := connectAs(t, url, "scheduler", opts...)
	s, err := scheduler.New(ctx, sjs, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(s.Stop) })
}

func stopWithin(stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = stop(ctx)
}

func testserverEventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Roles configured before reads from a stream's leader existed (no
// $JS.API.STREAM.MSG.GET on the buckets) work as they did: a leader read
// denied is optional, its fallback is the direct get, and the violation
// ends nothing else on the connection. Cancel of a run waiting without a
// record, and of an id that does not exist, say what they said; a
// scheduler dispatches delayed runs.
func TestRolesWithoutLeaderReads(t *testing.T) {
	conf := permissionsConf(t)
	for _, line := range []string{`"$JS.API.STREAM.MSG.GET.KV_jetflow_runs",`, `"$JS.API.STREAM.MSG.GET.KV_jetflow_delayed",`} {
		conf = strings.ReplaceAll(conf, line, "")
	}
	url := startSecuredNATS(t, conf)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, ajs := connectAs(t, url, "admin")
	if err := streams.Provision(ctx, ajs, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	_, pjs := connectAs(t, url, "producer")
	p, err := producer.New(ctx, pjs, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		id, err := p.Enqueue(ctx, permChild.With(permArgs{N: i}))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Cancel(ctx, id); err != nil {
			t.Fatalf("cancel of a waiting run: %v", err)
		}
		if err := p.Cancel(ctx, fmt.Sprintf("no-such-run-%d", i)); !errors.Is(err, jetflow.ErrNotFound) {
			t.Fatalf("cancel of an unknown id: %v, want ErrNotFound", err)
		}
	}
	_, wjs := connectAs(t, url, "worker")
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	worker.Handle(w, permFn, func(context.Context, *worker.Job[permArgs]) error { ran.Add(1); return nil })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(w.Stop) })
	startSchedulerAs(ctx, t, url)
	const n = 20
	for i := range n {
		if _, err := p.RunAfter(ctx, 300*time.Millisecond, permFn.With(permArgs{N: i})); err != nil {
			t.Fatal(err)
		}
	}
	testserver.Eventually(t, 30*time.Second, "every delayed run handled", func() bool { return ran.Load() >= n })
	if got := ran.Load(); got != n {
		t.Fatalf("%d runs handled, want %d", got, n)
	}
	// The unfiltered page reads the newest records from the leader; denied,
	// it reads them by consumers, as it did.
	page, err := p.List(ctx, producer.Filter{Limit: 5})
	if err != nil {
		t.Fatalf("unfiltered page without leader reads: %v", err)
	}
	if len(page.Runs) != 5 {
		t.Fatalf("unfiltered page of %d runs, want 5", len(page.Runs))
	}
}

// Users whose replies are narrowed to an inbox prefix of their own
// (nats.CustomInboxPrefix, as docs/permissions.md advises) work as the
// others do, and are denied nothing: the worker takes the replies to its
// claims and outcomes under that prefix too, and the scheduler starts
// delayed runs.
func TestRolesWithNarrowedInboxes(t *testing.T) {
	const prefix = "_INBOX_jf"
	conf := strings.ReplaceAll(permissionsConf(t), `"_INBOX.>"`, `"`+prefix+`.>"`)
	url := startSecuredNATS(t, conf)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var denials atomic.Int64
	var lastDenial atomic.Value
	opts := []nats.Option{nats.CustomInboxPrefix(prefix), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			denials.Add(1)
			lastDenial.Store(err.Error())
		}
	})}
	_, ajs := connectAs(t, url, "admin", opts...)
	if err := streams.Provision(ctx, ajs, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	_, wjs := connectAs(t, url, "worker", opts...)
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var late, first atomic.Int64
	worker.Handle(w, permFn, func(context.Context, *worker.Job[permArgs]) error { late.Add(1); return nil })
	worker.Handle(w, permChild, func(context.Context, *worker.Job[permArgs]) error { first.Add(1); return nil },
		worker.Options{ClaimAfter: -1})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(w.Stop) })
	_, pjs := connectAs(t, url, "producer", opts...)
	p, err := producer.New(ctx, pjs, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	startSchedulerAs(ctx, t, url, opts...)
	const n = 20 // of each function, half of them delayed
	var ids []string
	for i := range n {
		for _, fn := range []jetflow.Function[permArgs]{permFn, permChild} {
			var id string
			var err error
			if i%2 == 0 {
				id, err = p.Enqueue(ctx, fn.With(permArgs{N: i}))
			} else {
				id, err = p.RunAfter(ctx, 200*time.Millisecond, fn.With(permArgs{N: i}))
			}
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		r, err := p.Wait(ctx, id)
		if err != nil {
			t.Fatalf("run %s: %v", id, err)
		}
		if r.State != jetflow.Success {
			t.Fatalf("run %s ended %s: %s", id, r.State, r.Error)
		}
	}
	if late.Load() != n || first.Load() != n {
		t.Fatalf("handled %d claimed late and %d claimed first, want %d each", late.Load(), first.Load(), n)
	}
	if d := denials.Load(); d != 0 {
		t.Fatalf("%d permission violations; the last: %v", d, lastDenial.Load())
	}
}

// An index stream an earlier version provisioned (a two-minute duplicate
// window) that the scheduler's user may not update: the scheduler indexes
// with it, and a page and the counts still come from the run index.
func TestSchedulerIndexesWithAnOlderIndexStream(t *testing.T) {
	url := startSecuredNATS(t, permissionsConf(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, ajs := connectAs(t, url, "admin")
	if err := streams.Provision(ctx, ajs, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	scfg := streams.Config{}.WithDefaults()
	st, err := ajs.Stream(ctx, scfg.IndexStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Duplicates = 2 * time.Minute
	if _, err := ajs.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, pjs := connectAs(t, url, "producer")
	p, err := producer.New(ctx, pjs, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, wjs := connectAs(t, url, "worker")
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, permFn, func(context.Context, *worker.Job[permArgs]) error { return nil })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(w.Stop) })
	startSchedulerAs(ctx, t, url)
	for i := range 5 {
		if _, err := p.Enqueue(ctx, permFn.With(permArgs{N: i})); err != nil {
			t.Fatal(err)
		}
	}
	testserver.Eventually(t, 30*time.Second, "a page and the counts from the run index", func() bool {
		page, err := p.List(ctx, producer.Filter{Function: permFn.Name(), State: jetflow.Success})
		c, cerr := p.Counts(ctx, "")
		return err == nil && page.Indexed && len(page.Runs) == 5 && cerr == nil && c.Source == "index" && c.Success == 5
	})
}
