package integration_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/retrier"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/webhook"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

var (
	permDouble = jetflow.Define[permArgs]("perm.double")
	permPooled = jetflow.Define[permArgs]("perm.pooled")

	// permWF: an inline step, an event, then a call of permDouble.
	permWF = workflow.Define("perm.wf", func(wf *workflow.Context, in permArgs) (int, error) {
		a, err := workflow.Step(wf, "one", func(context.Context) (int, error) { return in.N + 1, nil })
		if err != nil {
			return 0, err
		}
		ev, err := workflow.AwaitEvent[permArgs](wf, "go", 0)
		if err != nil {
			return 0, err
		}
		return workflow.Call[int](wf, permDouble.With(permArgs{N: a + ev.N}))
	})
)

// violations counts the permissions violations a connection is told of.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) option() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			v.mu.Lock()
			v.errs = append(v.errs, err.Error())
			v.mu.Unlock()
		}
	})
}

func (v *violations) list() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.errs...)
}

// docs/permissions.md's worker and producer roles, with exactly the
// documented permissions and after provisioning by the admin, run durable
// workflows (docs/workflows.md) and work pools: the worker runs a workflow
// of a step, an event and a call, and a pool's dispatcher and items; the
// producer starts the workflow, sends it its event and enqueues into the
// pool. Neither is denied anything. A role without those rights (the CLI)
// is refused at once.
func TestRolesRunWorkflowsAndPools(t *testing.T) {
	url := startSecuredNATS(t, permissionsConf(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, ajs := connectAs(t, url, "admin")
	if err := streams.Provision(ctx, ajs, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	var wv, pv, sv violations
	defer func() {
		for role, v := range map[string]*violations{"worker": &wv, "producer": &pv, "scheduler": &sv} {
			if errs := v.list(); len(errs) > 0 {
				t.Errorf("%s was denied %d times: %v", role, len(errs), errs)
			}
		}
	}()

	// The worker: the workflow, the function it calls, the pool's items,
	// the pool's done function and its dispatcher.
	_, wjs := connectAs(t, url, "worker", wv.option())
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	if err := workflow.Register(w, permWF); err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, permDouble, func(_ context.Context, j *worker.Job[permArgs]) error { return j.SetResult(2 * j.Args.N) })
	const maxPar = 2
	var running, most atomic.Int64
	worker.Handle(w, permPooled, func(ctx context.Context, j *worker.Job[permArgs]) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		// Hold the slot a moment, so that items overlap.
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
		return j.SetResult(j.Args.N)
	})
	if err := pool.Register(w); err != nil {
		t.Fatal(err)
	}
	wpl, err := pool.New(ctx, w.Producer(), pool.Config{Name: "perm_pool", MaxParallelism: maxPar})
	if err != nil {
		t.Fatalf("pool.New as worker: %v", err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("worker.Start: %v", err)
	}
	t.Cleanup(func() { stopWithin(w.Stop) })
	if err := wpl.Start(ctx); err != nil {
		t.Fatalf("pool dispatcher as worker: %v", err)
	}
	t.Cleanup(func() { stopWithin(wpl.Stop) })
	startSchedulerAs(ctx, t, url, sv.option())

	// The producer: starts the workflow, sends its event, enqueues.
	_, pjs := connectAs(t, url, "producer", pv.option())
	p, err := producer.New(ctx, pjs, producer.Config{Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatalf("producer.New: %v", err)
	}
	id, err := workflow.Start(ctx, p, permWF, permArgs{N: 1}, workflow.WithID("perm-wf-1"))
	if err != nil {
		t.Fatalf("workflow.Start as producer: %v", err)
	}
	testserver.Eventually(t, 30*time.Second, "the workflow waits for its event", func() bool {
		st, err := workflow.Get(ctx, p, id)
		if err != nil {
			t.Fatalf("workflow.Get as producer: %v", err)
		}
		if st.Run.State.Terminal() {
			t.Fatalf("workflow %s before its event: %s", st.Run.State, st.Run.Error)
		}
		return st.Waiting
	})
	if err := workflow.SendEvent(ctx, p, id, "go", permArgs{N: 3}); err != nil {
		t.Fatalf("workflow.SendEvent as producer: %v", err)
	}
	if out, err := workflow.Result(ctx, p, permWF, id); err != nil || out != 10 {
		t.Fatalf("workflow result: %d, %v; want 10", out, err)
	}
	if st, err := workflow.Get(ctx, p, id); err != nil || len(st.Steps) != 3 {
		t.Fatalf("workflow.Get as producer: %+v, %v", st, err)
	}

	ppl, err := pool.New(ctx, p, pool.Config{Name: "perm_pool"})
	if err != nil {
		t.Fatalf("pool.New as producer: %v", err)
	}
	var ids []string
	for i := range 6 {
		id, err := ppl.Enqueue(ctx, permPooled.With(permArgs{N: i}), pool.WithPriority(pool.Priority(i%3)))
		if err != nil {
			t.Fatalf("pool Enqueue as producer: %v", err)
		}
		ids = append(ids, id)
	}
	batch, err := ppl.EnqueueBatch(ctx, []pool.Entry{
		{Call: permPooled.With(permArgs{N: 6})}, {Call: permPooled.With(permArgs{N: 7}), Options: []pool.Option{pool.WithID("perm-item-7")}},
	})
	if err != nil {
		t.Fatalf("pool EnqueueBatch as producer: %v", err)
	}
	ids = append(ids, batch...)
	for _, id := range ids {
		testserver.Eventually(t, 60*time.Second, "pool item "+id+" succeeds", func() bool {
			it, err := ppl.Status(ctx, id)
			if err != nil {
				t.Fatalf("pool Status as producer: %v", err)
			}
			if it.Finished() && it.State != jetflow.Success {
				t.Fatalf("pool item %s: %s %s", id, it.State, it.Error)
			}
			return it.State == jetflow.Success
		})
	}
	if m := most.Load(); m > maxPar {
		t.Fatalf("%d pool items ran at once, max parallelism %d", m, maxPar)
	}

	// The CLI's user may do none of it: told at once, not after a timeout.
	_, cjs := connectAs(t, url, "cli")
	cp, err := producer.New(ctx, cjs, producer.Config{Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatalf("producer.New as cli: %v", err)
	}
	start := time.Now()
	_, err = workflow.Start(ctx, cp, permWF, permArgs{N: 1})
	denied(t, "workflow.Start as cli", start, err)
	start = time.Now()
	_, err = pool.New(ctx, cp, pool.Config{Name: "perm_pool"})
	denied(t, "pool.New as cli", start, err)
}

var (
	permOnce = jetflow.Define[permArgs]("perm.once", jetflow.WithKind(jetflow.AtMostOnce))
	permHook = jetflow.Define[webhook.Event]("perm.hook")
)

// The retrier and webhook packages need no rights beyond the worker's,
// producer's and scheduler's of docs/permissions.md: a retrier's attempts
// (delayed, then the step that schedules the next) and its Cancel, a
// webhook's event stored by the producer and run by the worker.
func TestRolesRunRetriersAndWebhooks(t *testing.T) {
	url := startSecuredNATS(t, permissionsConf(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, ajs := connectAs(t, url, "admin")
	if err := streams.Provision(ctx, ajs, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	var wv, pv, sv violations
	defer func() {
		for role, v := range map[string]*violations{"worker": &wv, "producer": &pv, "scheduler": &sv} {
			if errs := v.list(); len(errs) > 0 {
				t.Errorf("%s was denied %d times: %v", role, len(errs), errs)
			}
		}
	}()
	verifier, err := webhook.GitHub("perm-webhook-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	hcfg := webhook.Config{Function: permHook, Verifier: verifier, EventID: "X-GitHub-Delivery"}

	_, wjs := connectAs(t, url, "worker", wv.option())
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int64
	worker.Handle(w, permOnce, func(context.Context, *worker.Job[permArgs]) error {
		if tries.Add(1) == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	hooks := make(chan string, 1)
	if err := webhook.Register(w, hcfg, func(_ context.Context, j *worker.Job[webhook.Event]) error {
		hooks <- string(j.Args.Body)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, pjs := connectAs(t, url, "producer", pv.option())
	p, err := producer.New(ctx, pjs, producer.Config{Provision: producer.ProvisionOff})
	if err != nil {
		t.Fatal(err)
	}
	r := retrier.New(p, retrier.Options{InitialBackoff: 10 * time.Millisecond})
	if err := r.Register(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(w.Stop) })
	startSchedulerAs(ctx, t, url, sv.option())

	id, err := r.Run(ctx, permOnce.With(permArgs{N: 1}))
	if err != nil {
		t.Fatalf("retrier Run as producer: %v", err)
	}
	if st, err := r.Wait(ctx, id); err != nil || st.State != jetflow.Success {
		t.Fatalf("retrier: %+v, %v", st, err)
	}
	later, err := r.RunAfter(ctx, time.Hour, permOnce.With(permArgs{N: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Cancel(ctx, later); err != nil {
		t.Fatalf("retrier Cancel as producer: %v", err)
	}

	h, err := webhook.New(p, hcfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	body := `{"action":"opened"}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(body))
	req.Header.Set("X-Hub-Signature-256", verifier.Sign([]byte(body)))
	req.Header.Set("X-GitHub-Delivery", "perm-delivery-1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("webhook as producer: %d", res.StatusCode)
	}
	select {
	case got := <-hooks:
		if got != body {
			t.Fatalf("webhook body %q", got)
		}
	case <-ctx.Done():
		t.Fatal("the webhook's event did not run")
	}
}
