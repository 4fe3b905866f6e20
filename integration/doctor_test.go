package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

// doctorResult is `jetflow doctor --json`'s output and exit code.
type doctorResult struct {
	Result   string `json:"result"`
	Findings []struct {
		Check, Level, Message string
	} `json:"findings"`
	code int
	raw  string
}

// level is the worst level of check's findings ("" if none).
func (r doctorResult) level(check string) string {
	worst := ""
	rank := map[string]int{"": 0, "pass": 1, "warn": 2, "fail": 3}
	for _, f := range r.Findings {
		if f.Check == check && rank[f.Level] > rank[worst] {
			worst = f.Level
		}
	}
	return worst
}

func (r doctorResult) message(check, level string) string {
	for _, f := range r.Findings {
		if f.Check == check && f.Level == level {
			return f.Message
		}
	}
	return ""
}

func runDoctorBin(t *testing.T, bin, url, user, role string) doctorResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pw, ok := rolePasswords[user]
	if !ok {
		pw = rolePasswords["producer"] // badproducer
	}
	cmd := exec.CommandContext(ctx, bin, "doctor", "--json", "--url", url, "--user", user, "--password", pw, "--role", role)
	cmd.Env = append(os.Environ(), "GORACE=exitcode=0")
	out, err := cmd.Output()
	var r doctorResult
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		t.Fatalf("doctor --json printed %q: %v (%v)", out, jerr, err)
	}
	r.raw = string(out)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// startSecuredCluster starts three clustered nats-server processes with
// docs/permissions.md's users, and one more: badproducer, a producer's
// service given no permissions (so admin rights).
func startSecuredCluster(t *testing.T) []*natsServer {
	t.Helper()
	conf := permissionsConf(t)
	for role, pw := range rolePasswords {
		conf = strings.ReplaceAll(conf, "$"+strings.ToUpper(role)+"_PASSWORD", fmt.Sprintf("%q", pw))
	}
	const admin = "{ user: admin, password: "
	if !strings.Contains(conf, admin) {
		t.Fatal("no admin user in docs/permissions.md's configuration")
	}
	conf = strings.Replace(conf, admin, fmt.Sprintf("{ user: badproducer, password: %q }\n    ", rolePasswords["producer"])+admin, 1)
	path := filepath.Join(t.TempDir(), "auth.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := make([]*natsServer, 3)
	routes := make([]string, 3)
	for i := range nodes {
		nodes[i] = newNATS(t, fmt.Sprintf("doc%d", i+1), freePort(t))
		nodes[i].args = []string{"-c", path}
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", nodes[i].clusterPort)
	}
	for i, n := range nodes {
		for j, r := range routes {
			if j != i {
				n.routes = append(n.routes, r)
			}
		}
	}
	for _, n := range nodes {
		n.start()
	}
	return nodes
}

// jetflow doctor on the 3-node cluster of docs/permissions.md's users: a
// deployment set up as docs/deploy.md says (R3, a scheduler, a worker
// serving its function) is reported clean (exit 0, no check failing). Then
// five problems are planted, and doctor (exit 5) fails the check of each:
// a bucket scaled down to R1, a producer's user with admin rights, no
// scheduler, a stale run index (no scheduler stored counts for over a
// minute), and functions no worker serves (one never served, one whose
// worker went away).
func TestDoctorOnACluster(t *testing.T) {
	t.Parallel()
	nodes := startSecuredCluster(t)
	url := clusterURL(nodes)
	bin := goBuild(t, "./cmd/jetflow")
	_, js := connectAs(t, url, "admin")
	waitJetStream(t, js)
	retry(t, time.Minute, "provision R3", func(ctx context.Context) error {
		return streams.Provision(ctx, js, streams.Config{Replicas: 3})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sch, err := scheduler.New(ctx, js, scheduler.Config{LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, js, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	served := jetflow.Define[int]("doc.served")
	worker.Handle(w, served, func(context.Context, *worker.Job[int]) error { return nil })
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Enqueue(ctx, served.With(1))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := p.Wait(ctx, id); err != nil || r.State != jetflow.Success {
		t.Fatalf("a run on the clean deployment: %v %v", r, err)
	}

	// Clean: no check fails, as admin and as the documented producer user.
	// Clean: no check fails, and the checks of what is planted below pass
	// (once the scheduler's index has stored its first counts).
	cleanChecks := []string{"cluster", "stream JETFLOW_FN", "stream JETFLOW_RUNIDX", "stream KV_jetflow_runs",
		"stream KV_jetflow_crons", "scheduler", "run index", "function doc.served", "permissions"}
	var clean doctorResult
	deadline := time.Now().Add(time.Minute)
	for {
		clean = runDoctorBin(t, bin, url, "admin", "admin")
		ok := clean.code == 0 && clean.Result != "fail"
		for _, check := range cleanChecks {
			ok = ok && clean.level(check) == "pass"
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("doctor on the clean deployment: exit %d, want 0 and %v passing:\n%s", clean.code, cleanChecks, clean.raw)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Plant the problems.
	retry(t, time.Minute, "scale the crons bucket down to R1", func(ctx context.Context) error {
		st, err := js.Stream(ctx, "KV_jetflow_crons")
		if err != nil {
			return err
		}
		cfg := st.CachedInfo().Config
		cfg.Replicas = 1
		_, err = js.UpdateStream(ctx, cfg)
		return err
	})
	stopWithin(sch.Stop)
	stopWithin(w.Stop)
	if _, err := p.Enqueue(ctx, jetflow.Define[int]("doc.never").With(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, served.With(2)); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"stream KV_jetflow_crons": "R1 on a cluster",
		"permissions":             "may change streams",
		"scheduler":               "",
		"run index":               "stale",
		"functions":               "no worker has ever served",
		"function doc.served":     "no live worker serves it",
	}
	var bad doctorResult
	// The index goes stale a minute after its last counts; the worker's
	// registry entry lives 30 s.
	testserver.Eventually(t, 3*time.Minute, "doctor fails each planted problem", func() bool {
		bad = runDoctorBin(t, bin, url, "badproducer", "producer")
		for check := range want {
			if bad.level(check) != "fail" {
				return false
			}
		}
		return true
	})
	if bad.code != 5 || bad.Result != "fail" {
		t.Errorf("doctor on the planted problems: exit %d, result %q, want 5 and fail", bad.code, bad.Result)
	}
	for check, text := range want {
		if msg := bad.message(check, "fail"); !strings.Contains(msg, text) {
			t.Errorf("%s: %q, want a failure saying %q", check, msg, text)
		}
	}
	// What was not planted still passes.
	for _, check := range []string{"stream JETFLOW_FN", "stream KV_jetflow_runs", "cluster"} {
		if l := bad.level(check); l != "pass" {
			t.Errorf("%s: %q after the planting, want pass", check, l)
		}
	}
}
