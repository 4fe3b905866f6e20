package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

type doctorReport struct {
	Result   string `json:"result"`
	Findings []struct {
		Check, Level, Message, Fix string
	} `json:"findings"`
}

func (r doctorReport) level(check string) string {
	for _, f := range r.Findings {
		if f.Check == check {
			return f.Level
		}
	}
	return ""
}

func (r doctorReport) failed() map[string]string {
	out := map[string]string{}
	for _, f := range r.Findings {
		if f.Level == "fail" {
			out[f.Check] = f.Message
		}
	}
	return out
}

func runDoctorJSON(ctx context.Context, t *testing.T, url string, args ...string) (doctorReport, error) {
	t.Helper()
	out, errw, err := cli(ctx, t, "doctor", append([]string{"--json", "--url", url}, args...)...)
	var r doctorReport
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Fatalf("doctor --json printed %q (stderr %q): %v", out, errw, jerr)
	}
	return r, err
}

// A deployment set up as jetflow sets it up, with a scheduler and a worker
// serving its function, has no failing check and exits 0.
func TestDoctorPassesAWellConfiguredDeployment(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	_, js := e.Connect()
	w, err := worker.New(context.Background(), js, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fn := jetflow.Define[int]("doc.ok")
	worker.Handle(w, fn, func(context.Context, *worker.Job[int]) error { return nil })
	s, err := scheduler.New(context.Background(), js, scheduler.Config{LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
		_ = s.Stop(sctx)
	})
	if _, err := e.P.Enqueue(ctx, fn.With(1)); err != nil {
		t.Fatal(err)
	}
	var r doctorReport
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err = runDoctorJSON(ctx, t, e.URL, "--role", "admin")
		if err == nil && r.level("run index") == "pass" && r.level("scheduler") == "pass" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || r.Result == "fail" {
		t.Fatalf("doctor on a sound deployment: %v; failed: %v\n%+v", err, r.failed(), r)
	}
	for _, check := range []string{"stream JETFLOW_FN", "stream KV_jetflow_runs", "clock", "scheduler", "run index", "function doc.ok", "permissions"} {
		if l := r.level(check); l != "pass" {
			t.Errorf("%s: %q, want pass (%+v)", check, l, r)
		}
	}
	// Text output: one line per finding, level first.
	out, _, err := cli(ctx, t, "doctor", "--url", e.URL, "--role", "admin")
	if err != nil || !strings.Contains(out, "pass  server version") {
		t.Errorf("doctor's text: %v\n%s", err, out)
	}
}

// Planted problems each fail their check, and the exit code is 5: memory
// storage, a runs bucket without LimitMarkerTTL, a short duplicate window,
// no scheduler, runs of a function no worker serves,
// and a user of the producer role with admin rights.
func TestDoctorFindsPlantedProblems(t *testing.T) {
	t.Parallel()
	s, err := embedded.Start(embedded.Options{Dir: t.TempDir(), SyncEvery: testSyncEvery})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	e := &cliEnv{S: s, URL: s.ClientURL(), t: t}
	ctx := testCtx(t)
	_, js := e.Connect()
	// The runs bucket made by hand, without LimitMarkerTTL: Provision
	// keeps it as it is.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "jetflow_runs"}); err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, js, streams.Config{Replicas: 1, Storage: jetstream.MemoryStorage, DuplicateWindow: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// A scheduler ran once (its index stored counts), then went away.
	sch, err := scheduler.New(context.Background(), js, scheduler.Config{LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		idx, err := js.Stream(ctx, streams.Config{}.IndexStream())
		if err == nil {
			if _, err := idx.GetLastMsgForSubject(ctx, streams.Config{}.IndexCheckpointSubject()); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no index checkpoint")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := sch.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(ctx, js, producer.Config{Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, jetflow.Define[int]("doc.orphan").With(1)); err != nil {
		t.Fatal(err)
	}
	r, err := runDoctorJSON(ctx, t, e.URL, "--role", "producer")
	var ce *exitCodeError
	if !errors.As(err, &ce) || ce.code != exitDoctorFailed || r.Result != "fail" {
		t.Fatalf("doctor on a bad deployment: %v, result %q", err, r.Result)
	}
	failed := r.failed()
	for check, want := range map[string]string{
		"stream JETFLOW_FN":      "memory storage",
		"stream KV_jetflow_runs": "LimitMarkerTTL",
		"scheduler":              "no scheduler",
		"functions":              "no worker has ever served",
		"permissions":            "may change streams",
	} {
		if !strings.Contains(failed[check], want) {
			t.Errorf("%s: %q, want a failure saying %q", check, failed[check], want)
		}
	}
	if l := r.level("stream JETFLOW_FN"); l != "fail" {
		t.Errorf("duplicate window: %q", l)
	}
	if !hasFinding(r, "stream JETFLOW_FN", "warn", "duplicate window") {
		t.Errorf("no warning of the 5 s duplicate window: %+v", r)
	}
}

func hasFinding(r doctorReport, check, level, text string) bool {
	for _, f := range r.Findings {
		if f.Check == check && f.Level == level && strings.Contains(f.Message, text) {
			return true
		}
	}
	return false
}

// functions stats --json prints the scaling endpoint's figures.
func TestFunctionsStatsJSON(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	e.serveDemo(t)
	if _, err := e.P.RunAfter(ctx, 30*time.Second, jetflow.Define[int]("doc.later").With(1)); err != nil {
		t.Fatal(err)
	}
	out, _ := mustCLI(ctx, t, "functions", "stats", "--json", "--target", "5", "--url", e.URL)
	var f struct {
		Functions []struct {
			Function string `json:"function"`
		} `json:"functions"`
		Due1m  int `json:"due1m"`
		Target int `json:"targetPerWorker"`
	}
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if f.Due1m != 1 || f.Target != 5 || len(f.Functions) == 0 {
		t.Fatalf("functions stats --json: %s", out)
	}
	text, _ := mustCLI(ctx, t, "functions", "stats", "--url", e.URL)
	if !strings.Contains(text, "DESIRED WORKERS") || !strings.Contains(text, "due within 1 min: 1") {
		t.Fatalf("functions stats: %s", text)
	}
}
