package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// putRaw writes val under key straight into bucket, as a hostile client
// (or an operator with the nats CLI) can.
func putRaw(t *testing.T, js jetstream.JetStream, bucket, key, val string) {
	t.Helper()
	ctx := context.Background()
	b, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("%s: %v", bucket, err)
	}
	if _, err := b.Put(ctx, key, []byte(val)); err != nil {
		t.Fatal(err)
	}
}

// Cron records written by hand: one that is not JSON, one whose schedule
// does not validate, one stored under a key that is no cron name. Each is
// listed (API and page) as a row naming why it cannot be used; Trigger now
// refuses them with 422 and the reason, starting no run (it ran the call
// of the invalid schedule before), and so do Pause and Resume (the key
// that is no cron name answered 500). The crons page left the record that
// is not JSON off.
func TestCronBadRecordsRefused(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	crons, err := scheduler.NewCrons(ctx, ts.JS, scheduler.CronConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crons.Register(ctx, scheduler.CronDef{Name: "nightly", Schedule: scheduler.Daily(3, 0), Call: idleFn.With(testArgs{N: 9})}); err != nil {
		t.Fatal(err)
	}
	e := setupOn(t, ts, dashboard.Config{Crons: crons})
	bucket := streams.Config{}.WithDefaults().CronsBucket()
	putRaw(t, ts.JS, bucket, "def.garbage", `not json`)
	putRaw(t, ts.JS, bucket, "def.badsched", `{"name":"badsched","origin":"runtime","spec":{"kind":"cron","expr":"99 99 * * *"},"function":"test.idle","args":{"n":1},"enabled":false}`)
	putRaw(t, ts.JS, bucket, "def.bad.name", `{"name":"bad.name","origin":"runtime","spec":{"kind":"daily","hour":3},"function":"test.idle","enabled":false}`)

	var list struct {
		Crons []*kv.CronInfo `json:"crons"`
	}
	getJSON(t, "GET", e.URL+"/api/crons", http.StatusOK, &list)
	why := map[string]string{}
	for _, c := range list.Crons {
		why[c.Name] = c.Unreadable
	}
	if len(why) != 4 || why["nightly"] != "" || !strings.Contains(why["garbage"], "invalid character") ||
		!strings.Contains(why["badsched"], "99") || !strings.Contains(why["bad.name"], "not a cron name") {
		t.Fatalf("/api/crons: %q", why)
	}
	page := getPage(t, e.URL+"/crons")
	for _, name := range []string{"garbage", "badsched", "bad.name"} {
		row := pageRow(page, `data-cron="`+name+`"`)
		if !strings.Contains(row, `data-unreadable="true"`) || !strings.Contains(row, "unreadable cron record") || strings.Contains(row, "<form") {
			t.Fatalf("crons page row of %s:\n%s\n(page:\n%s)", name, row, page)
		}
	}
	if !strings.Contains(pageRow(page, `data-cron="garbage"`), "invalid character") {
		t.Fatalf("the row of garbage does not say why:\n%s", page)
	}

	for _, c := range []struct{ name, action, want string }{
		{"badsched", "trigger", "99"},
		{"garbage", "trigger", "invalid character"},
		{"bad.name", "trigger", "not a cron name"},
		{"bad.name", "pause", "not a cron name"},
		{"bad.name", "resume", "not a cron name"},
		{"badsched", "resume", "99"},
	} {
		msg := apiError(t, "POST", e.URL+"/api/crons/"+c.name+"/"+c.action, http.StatusUnprocessableEntity)
		// Said once: not "...cron record: jetflow: unreadable run record: ...".
		if !strings.Contains(msg, "unreadable cron record") || !strings.Contains(msg, c.want) || strings.Count(msg, "unreadable") != 1 {
			t.Fatalf("%s of %s: %q", c.action, c.name, msg)
		}
	}
	// No run of the bad crons: every run there is, is none of theirs.
	runs, err := e.P.List(ctx, producer.Filter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs.Runs {
		if strings.HasPrefix(r.ID, "trigger-") {
			t.Fatalf("a bad cron was triggered: %+v", r)
		}
	}
	// The good cron still triggers.
	var res cronResult
	getJSON(t, "POST", e.URL+"/api/crons/nightly/trigger", http.StatusOK, &res)
	if res.Run == nil || !strings.HasPrefix(res.Run.ID, "trigger-nightly-") {
		t.Fatalf("trigger nightly: %+v", res)
	}
}

// pageRow returns the <tr ...> of page whose start tag holds attr.
func pageRow(page, attr string) string {
	i := strings.Index(page, attr)
	if i < 0 {
		return ""
	}
	start := strings.LastIndex(page[:i], "<tr")
	end := strings.Index(page[i:], "</tr>")
	if start < 0 || end < 0 {
		return ""
	}
	return page[start : i+end]
}

// A run record that cannot be read has a page of its own that answers 422
// and names the reason, with the layout of the other error pages.
func TestRunPageOfBadRecord(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	bucket := streams.Config{}.WithDefaults().RunsBucket()
	putRaw(t, e.JS, bucket, "badjson", `{not json`)
	putRaw(t, e.JS, bucket, "badstate", `{"id":"badstate","state":"sleeping"}`)
	for id, want := range map[string]string{"badjson": "invalid character", "badstate": "sleeping"} {
		st, _, body := do(t, "GET", e.URL+"/runs/"+id, nil)
		page := string(body)
		if st != http.StatusUnprocessableEntity || !strings.Contains(page, `<main class="error-page">`) ||
			!strings.Contains(page, "jetflow: unreadable run record") || !strings.Contains(page, want) {
			t.Fatalf("/runs/%s: %d\n%s", id, st, page)
		}
	}
}

// The triggers page says why a trigger definition cannot be read, on its
// row (it said "unreadable" only).
func TestTriggersPageSaysWhyUnreadable(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{})
	fb := streams.Config{}.WithDefaults().FunctionsBucket()
	if _, err := e.JS.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: fb}); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
		t.Fatal(err)
	}
	putRaw(t, e.JS, fb, "=trigger.badtrig", `garbage`)
	putRaw(t, e.JS, fb, "=trigger.other", `{"name":"someone-else"}`)
	page := getPage(t, e.URL+"/triggers")
	for name, want := range map[string]string{"badtrig": "definition unreadable: invalid character", "other": "definition names trigger &#34;someone-else&#34;"} {
		row := pageRow(page, `data-trigger="`+name+`"`)
		if !strings.Contains(row, `data-state="unreadable"`) || !strings.Contains(row, want) {
			t.Fatalf("row of %s lacks %q:\n%s", name, want, row)
		}
	}
}

// A dashboard whose NATS user may not write the crons bucket does not show
// Pause and Resume (they would answer 403); Trigger now stays. One whose
// user may shows them.
func TestCronButtonsHiddenFromReadOnlyUser(t *testing.T) {
	t.Parallel()
	url := startWithUsers(t,
		&server.User{Username: "admin", Password: "admin-pass-0123"},
		&server.User{Username: "reader", Password: "reader-pass-0123", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Deny: []string{"$KV.jetflow_crons.>", "$JS.API.STREAM.PURGE.KV_jetflow_crons"}},
		}})
	ctx := context.Background()
	adminURL := serveAs(t, url, "admin")
	adminCrons, err := scheduler.NewCrons(ctx, connectUser(t, url, "admin"), scheduler.CronConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adminCrons.Register(ctx, scheduler.CronDef{Name: "nightly", Schedule: scheduler.Daily(3, 0), Call: idleFn.With(testArgs{})}); err != nil {
		t.Fatal(err)
	}
	readerURL := serveAs(t, url, "reader")

	page := getPage(t, readerURL+"/crons")
	if strings.Contains(page, `/pause"`) || strings.Contains(page, `/resume"`) || !strings.Contains(page, `id="crons-readonly"`) ||
		!strings.Contains(page, `action="/api/crons/nightly/trigger"`) {
		t.Fatalf("the read-only user's crons page:\n%s", page)
	}
	// What the hidden button would have answered.
	apiError(t, "POST", readerURL+"/api/crons/nightly/pause", http.StatusForbidden)
	page = getPage(t, adminURL+"/crons")
	if !strings.Contains(page, `action="/api/crons/nightly/pause"`) || strings.Contains(page, `id="crons-readonly"`) {
		t.Fatalf("the admin's crons page:\n%s", page)
	}
	if c, err := adminCrons.Get(ctx, "nightly"); err != nil || !c.Enabled {
		t.Fatalf("nightly after the probes: %+v %v", c, err)
	}
}
