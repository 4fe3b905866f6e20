package integration_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The password of docs/triggers.md's user "trigger".
func init() { rolePasswords["trigger"] = "trigger-pw-0123456789" }

// withTriggerUser adds docs/triggers.md's user "trigger" to the server
// configuration conf.
func withTriggerUser(t *testing.T, conf string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "triggers.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- trigger-user.conf[^>]*-->\\s*```\\n(.*?)```\\s*<!-- end trigger-user.conf -->").FindSubmatch(data)
	if m == nil {
		t.Fatal("docs/triggers.md has no trigger-user.conf block")
	}
	i := strings.Index(conf, "users = [")
	if i < 0 {
		t.Fatal("no users list in the permissions configuration")
	}
	i += len("users = [")
	return conf[:i] + "\n" + string(m[1]) + conf[i:]
}

// The user docs/triggers.md documents runs a worker and a trigger on the
// user's stream ORDERS with exactly those permissions; a trigger on a
// stream it has no rights on fails at once with the server's violation.
func TestTriggerPermissions(t *testing.T) {
	url := startSecuredNATS(t, withTriggerUser(t, permissionsConf(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, ajs := connectAs(t, url, "admin")
	if err := streams.Provision(ctx, ajs, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ORDERS", "OTHER"} {
		if _, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"}}); err != nil {
			t.Fatal(err)
		}
	}
	_, tjs := connectAs(t, url, "trigger")
	w, err := worker.New(ctx, tjs, worker.Config{})
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	done := make(chan string, 10)
	worker.Handle(w, permFn, func(ctx context.Context, j *worker.Job[permArgs]) error { done <- j.ID(); return nil })
	if err := w.Start(ctx); err != nil {
		t.Fatalf("worker.Start: %v", err)
	}
	t.Cleanup(func() { stopWithin(w.Stop) })

	// A trigger on a stream the user may not read: Start fails at once.
	bad := trigger.New(w.Producer(), trigger.Config{})
	if err := trigger.Bind(bad, trigger.Func(permFn), trigger.Spec[permArgs]{Name: "other", Stream: "OTHER"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	denied(t, "trigger on a stream without rights", start, bad.Start(ctx))

	r := trigger.New(w.Producer(), trigger.Config{})
	if err := trigger.Bind(r, trigger.Func(permFn), trigger.Spec[permArgs]{Name: "ship", Stream: "ORDERS", Subjects: []string{"orders.created"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatalf("trigger Start: %v", err)
	}
	t.Cleanup(func() { stopWithin(r.Stop) })
	for i := 0; i < 3; i++ {
		if _, err := ajs.PublishMsg(ctx, &nats.Msg{Subject: "orders.created", Data: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ajs.PublishMsg(ctx, &nats.Msg{Subject: "orders.created", Data: []byte(`not json`)}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 3 {
		select {
		case id := <-done:
			seen[id] = true
		case <-ctx.Done():
			t.Fatalf("%d of 3 triggered runs ran", len(seen))
		}
	}
	testserver.Eventually(t, 30*time.Second, "counters: 3 runs, 1 failed record", func() bool {
		st := r.Stats("ship")
		return st.Runs == 3 && st.Failed == 1 && st.Messages == 4
	})
}
