package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startWithUsers starts an embedded nats-server with JetStream whose only
// users are users, and returns its URL.
func startWithUsers(t *testing.T, users ...*server.User) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(ns.Shutdown)
	return ns.ClientURL()
}

// connectUser connects to url as user (password user+"-pass-0123").
func connectUser(t *testing.T, url, user string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(user, user+"-pass-0123"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// serveAs serves a dashboard whose NATS user is user, with the crons of a
// *scheduler.Crons (a CronController).
func serveAs(t *testing.T, url, user string) string {
	t.Helper()
	ctx := context.Background()
	js := connectUser(t, url, user)
	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		t.Fatalf("producer as %s: %v", user, err)
	}
	crons, err := scheduler.NewCrons(ctx, js, scheduler.CronConfig{})
	if err != nil {
		t.Fatalf("crons as %s: %v", user, err)
	}
	srv := httptest.NewServer(dashboard.New(p, dashboard.Config{Crons: crons}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// dashboardRole is the publish allow list of the dashboard user of
// docs/permissions.md; readOnly cuts it where the document says to for a
// read-only dashboard ("leave these and the ones below out").
func dashboardRole(t *testing.T, readOnly bool) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "docs", "permissions.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	start := strings.Index(doc, "{ user: dashboard,")
	end := strings.Index(doc, "# The CLI")
	if start < 0 || end < start {
		t.Fatal("docs/permissions.md: no dashboard user")
	}
	role := doc[start:end]
	if readOnly {
		cut := strings.Index(role, "(leave these and the ones below out for a read-only dashboard)")
		if cut < 0 {
			t.Fatal("docs/permissions.md: the dashboard user does not say what a read-only dashboard leaves out")
		}
		role = role[:strings.LastIndex(role[:cut], "\n")]
	}
	var allow []string
	for _, line := range strings.Split(role, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, m := range regexp.MustCompile(`"([^"]+)"`).FindAllStringSubmatch(line, -1) {
			if m[1] != "_INBOX.>" {
				allow = append(allow, m[1])
			}
		}
	}
	if len(allow) < 10 {
		t.Fatalf("docs/permissions.md: the dashboard user allows %q", allow)
	}
	return allow
}

// Each page shows the buttons of what the dashboard's NATS user may do,
// and no other: a button the server would refuse could only answer 403.
// The dashboard role of docs/permissions.md sees them all; the read-only
// dashboard it documents (the role without its cancel block and what
// follows) sees none, and each hidden button's POST still answers 403; a
// dashboard that may cancel but not pause (the integration test's
// "canceller") sees Cancel, Re-run and Trigger now only. The probes store
// nothing and change no record.
func TestButtonsFollowRights(t *testing.T) {
	t.Parallel()
	user := func(name string, allow, deny []string) *server.User {
		return &server.User{Username: name, Password: name + "-pass-0123", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: allow, Deny: deny},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}}
	}
	full := dashboardRole(t, false)
	url := startWithUsers(t,
		&server.User{Username: "admin", Password: "admin-pass-0123"},
		user("dashboard", full, nil),
		user("readonly", dashboardRole(t, true), nil),
		user("canceller", full, []string{"jetflow.fn.>", "$KV.jetflow_functions.>", "$KV.jetflow_crons.>"}),
	)
	ctx := context.Background()

	// What the buttons act on, written by the admin: a function a worker
	// serves, a pending run, a canceled one and a cron.
	ajs := connectUser(t, url, "admin")
	ap, err := producer.New(ctx, ajs, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, ajs, worker.Config{ID: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, okFn, func(ctx context.Context, j *worker.Job[testArgs]) error { return nil })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	for _, id := range []string{"pend", "gone"} {
		if _, err := ap.Enqueue(ctx, idleFn.With(testArgs{N: 1}), producer.WithID(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ap.Cancel(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	acrons, err := scheduler.NewCrons(ctx, ajs, scheduler.CronConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acrons.Register(ctx, scheduler.CronDef{Name: "nightly", Schedule: scheduler.Daily(3, 0), Call: idleFn.With(testArgs{})}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		user                   string
		runs, paused, cronsBkt bool // the rights: write run records, pause marks, cron records
	}{
		{"dashboard", true, true, true},
		{"readonly", false, false, false},
		{"canceller", true, false, false},
	} {
		u := serveAs(t, url, c.user)
		testserver.Eventually(t, 10*time.Second, c.user+": the functions page lists test.ok", func() bool {
			return strings.Contains(getPage(t, u+"/functions"), `href="/?function=test.ok"`)
		})
		pages := map[string]string{}
		for _, p := range []string{"/runs/pend", "/runs/gone", "/functions", "/crons"} {
			pages[p] = getPage(t, u+p)
		}
		for _, b := range []struct {
			page, button, note string
			shown              bool
		}{
			{"/runs/pend", `id="cancel-form"`, `id="run-readonly"`, c.runs},
			{"/runs/gone", `id="rerun-form"`, `id="run-readonly"`, c.runs},
			{"/functions", `action="/api/functions/test.ok/pause"`, `id="functions-readonly"`, c.paused},
			{"/crons", `action="/api/crons/nightly/pause"`, `id="crons-readonly"`, c.cronsBkt},
			{"/crons", `action="/api/crons/nightly/trigger"`, `id="crons-notrigger"`, c.runs},
		} {
			page := pages[b.page]
			if strings.Contains(page, b.button) != b.shown || strings.Contains(page, b.note) == b.shown {
				t.Fatalf("%s: %s: button %s shown %v, want %v (note %s):\n%s", c.user, b.page, b.button,
					strings.Contains(page, b.button), b.shown, b.note, page)
			}
		}
		if !c.runs && (strings.Contains(pages["/runs/pend"], `/cancel"`) || strings.Contains(pages["/runs/gone"], `/rerun"`)) {
			t.Fatalf("%s: a run page has an action:\n%s\n%s", c.user, pages["/runs/pend"], pages["/runs/gone"])
		}
		if !c.runs && !c.paused && !c.cronsBkt {
			// The read-only dashboard: no page has a button that posts.
			for p, page := range pages {
				if strings.Contains(page, `method="post"`) {
					t.Fatalf("%s: %s has an action:\n%s", c.user, p, page)
				}
			}
		}
		// What each hidden button would have answered.
		var denied []string
		if !c.runs {
			denied = append(denied, "/api/runs/pend/cancel", "/api/runs/gone/rerun", "/api/crons/nightly/trigger")
		}
		if !c.paused {
			denied = append(denied, "/api/functions/test.ok/pause", "/api/functions/test.ok/resume")
		}
		if !c.cronsBkt {
			denied = append(denied, "/api/crons/nightly/pause")
		}
		for _, p := range denied {
			apiError(t, "POST", u+p, http.StatusForbidden)
		}
	}

	// Nothing changed: the runs, the function, the cron; and no probe
	// left a key.
	if r, err := ap.Get(ctx, "pend"); err != nil || r.State != jetflow.Pending {
		t.Fatalf("pend after the probes: %+v %v", r, err)
	}
	if _, err := ap.Get(ctx, "gone-rerun-1"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("gone was re-run: %v", err)
	}
	if paused, err := ap.PausedFunctions(ctx); err != nil || len(paused) != 0 {
		t.Fatalf("paused functions: %v %v", paused, err)
	}
	if c, err := acrons.Get(ctx, "nightly"); err != nil || !c.Enabled {
		t.Fatalf("nightly after the probes: %+v %v", c, err)
	}
	cfg := streams.Config{}.WithDefaults()
	for bucket, key := range map[string]string{
		cfg.RunsBucket():      "jetflow-dashboard-probe",
		cfg.FunctionsBucket(): kv.PausedKey("jetflow-dashboard-probe"),
		cfg.CronsBucket():     kv.CronDefPrefix + "jetflow-dashboard-probe",
	} {
		b, err := ajs.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.History(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("%s %s: a probe left something: %v", bucket, key, err)
		}
	}
}
