package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

var (
	permBig = jetflow.Define[string]("perm.big")

	// permBigWF: an input, a step's result, an event and a result above
	// the server's max payload.
	permBigWF = workflow.Define("perm.bigwf", func(wf *workflow.Context, in string) (string, error) {
		s, err := workflow.Step(wf, "upper", func(context.Context) (string, error) { return strings.ToUpper(in), nil })
		if err != nil {
			return "", err
		}
		ev, err := workflow.AwaitEvent[string](wf, "doc", 0)
		if err != nil {
			return "", err
		}
		return s + ev, nil
	})
)

// docs/permissions.md's roles, with exactly the documented permissions, on
// a nats-server of the default max payload (1 MB), carry payloads of 2 MB
// through the payloads bucket: the producer enqueues large args and starts
// a workflow with a large input and sends it a large event, the worker
// reads them and stores large results, and every role that reads runs
// (producer, worker, scheduler, dashboard, CLI) gets them back whole from
// Get. None is denied anything.
func TestRolesCarryLargePayloads(t *testing.T) {
	url := startSecuredNATS(t, permissionsConf(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, ajs := connectAs(t, url, "admin")
	if err := streams.Provision(ctx, ajs, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	const size = 2 << 20
	in, out := strings.Repeat("i", size), strings.Repeat("o", size)
	var wv violations
	_, wjs := connectAs(t, url, "worker", wv.option())
	w, err := worker.New(ctx, wjs, worker.Config{Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	worker.Handle(w, permBig, func(ctx context.Context, j *worker.Job[string]) error {
		if j.Args != in {
			return jetflow.Permanent(jetflow.ErrBadArgs)
		}
		return j.SetResult(out)
	})
	if err := workflow.Register(w, permBigWF); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("worker.Start: %v", err)
	}
	t.Cleanup(func() { stopWithin(w.Stop) })

	var pv violations
	_, pjs := connectAs(t, url, "producer", pv.option())
	p, err := producer.New(ctx, pjs, producer.Config{Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatalf("producer.New: %v", err)
	}
	id, err := p.Enqueue(ctx, permBig.With(in))
	if err != nil {
		t.Fatalf("Enqueue of %d bytes of args: %v", size, err)
	}
	r, err := p.Wait(ctx, id)
	if err != nil || r.State != jetflow.Success {
		t.Fatalf("run %s: %v, %+v", id, err, r)
	}
	wfID, err := workflow.Start(ctx, p, permBigWF, in)
	if err != nil {
		t.Fatalf("workflow.Start with %d bytes of input: %v", size, err)
	}
	if err := p.SendEvent(ctx, wfID, "doc", out); err != nil {
		t.Fatalf("SendEvent of %d bytes: %v", size, err)
	}
	got, err := workflow.Result(ctx, p, permBigWF, wfID)
	if err != nil || got != strings.ToUpper(in)+out {
		t.Fatalf("workflow %s: %d bytes, %v; want %d", wfID, len(got), err, 2*size)
	}

	wantArgs, _ := json.Marshal(in)
	wantResult, _ := json.Marshal(out)
	for _, role := range []string{"producer", "worker", "scheduler", "dashboard", "cli"} {
		var v violations
		_, js := connectAs(t, url, role, v.option())
		rp, err := producer.New(ctx, js, producer.Config{Provision: producer.ProvisionOff})
		if err != nil {
			t.Fatalf("%s: producer.New: %v", role, err)
		}
		r, err := rp.Get(ctx, id)
		if err != nil || !bytes.Equal(r.Args, wantArgs) || !bytes.Equal(r.Result, wantResult) {
			t.Fatalf("%s: Get: %v; want %d bytes of args and of result", role, err, size+2)
		}
		if vs := v.list(); len(vs) > 0 {
			t.Fatalf("%s was denied: %v", role, vs)
		}
	}
	if vs := append(wv.list(), pv.list()...); len(vs) > 0 {
		t.Fatalf("the worker or the producer was denied: %v", vs)
	}
}

// The scheduler of docs/permissions.md, with exactly its documented
// rights, sweeps the payloads of runs whose records have expired (a 2 s
// retention): the ended run's args and result objects are deleted, the
// args of a run still pending stay, and the scheduler is denied nothing.
func TestSchedulerSweepsPayloadsWithItsRights(t *testing.T) {
	url := startSecuredNATS(t, permissionsConf(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, ajs := connectAs(t, url, "admin")
	scfg := streams.Config{Retention: 2 * time.Second}
	if err := streams.Provision(ctx, ajs, scfg); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("b", 2<<20)
	_, wjs := connectAs(t, url, "worker")
	w, err := worker.New(ctx, wjs, worker.Config{Streams: scfg, Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, permBig, func(ctx context.Context, j *worker.Job[string]) error { return j.SetResult(j.Args) })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(w.Stop) })
	_, pjs := connectAs(t, url, "producer")
	p, err := producer.New(ctx, pjs, producer.Config{Streams: scfg, Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatal(err)
	}
	ended, err := p.Enqueue(ctx, permBig.With(big))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := p.RunAfter(ctx, time.Hour, permBig.With(big))
	if err != nil {
		t.Fatal(err)
	}
	var sv violations
	_, sjs := connectAs(t, url, "scheduler", sv.option())
	s, err := scheduler.New(ctx, sjs, scheduler.Config{Streams: scfg, PayloadSweep: -1})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := ajs.ObjectStore(ctx, scfg.WithDefaults().PayloadsBucket())
	if err != nil {
		t.Fatal(err)
	}
	owners := func() map[string]int {
		n := map[string]int{}
		infos, _ := obs.List(ctx)
		for _, info := range infos {
			owner, _, _ := strings.Cut(info.Name, "/")
			n[owner]++
		}
		return n
	}
	testserver.Eventually(t, time.Minute, "the ended run's objects swept", func() bool {
		if _, err := s.SweepPayloads(ctx); err != nil {
			t.Fatalf("sweep: %v", err)
		}
		return owners()[ended] == 0
	})
	if n := owners()[pending]; n != 1 {
		t.Errorf("the pending run has %d objects, want 1 (its args)", n)
	}
	if v := sv.list(); len(v) > 0 {
		t.Errorf("the scheduler was denied: %v", v)
	}
}
