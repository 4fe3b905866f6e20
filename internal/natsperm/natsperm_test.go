package natsperm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

func TestViolation(t *testing.T) {
	t.Parallel()
	pv := func(s string) error { return fmt.Errorf("%w: %s", nats.ErrPermissionViolation, s) }
	pub := pv(`Permissions Violation for Publish to "$JS.API.STREAM.CREATE.JETFLOW_FN"`)
	sub := pv(`Permissions Violation for Subscription to "_INBOX.abc.*"`)
	other := pv(`Permissions Violation for Publish to "app.orders"`)
	probe := pv(`Permissions Violation for Publish to "$KV.jetflow_crons.def.` + ProbeKey + `"`)
	for _, tc := range []struct {
		name         string
		last, before error
		prefixes     []string
		want         bool
	}{
		{"none", nil, nil, nil, false},
		{"not a violation", errors.New("x"), nil, nil, false},
		{"any subject", pub, nil, nil, true},
		{"watched prefix", pub, nil, []string{"$JS."}, true},
		{"other prefix", other, nil, []string{"$JS.", "$KV."}, false},
		{"inbox subscription", sub, nil, []string{"$JS."}, true},
		{"seen before", pub, pub, nil, false},
		{"new one of the same text", pv(`Permissions Violation for Publish to "$JS.API.STREAM.CREATE.JETFLOW_FN"`), pub, nil, true},
		{"unknown form", pv("something else"), nil, []string{"$JS."}, true},
		// A rights probe's violation answers the probe only, never a call
		// running beside it on the connection.
		{"probe, any subject", probe, nil, nil, false},
		{"probe, a call watching $KV.", probe, nil, []string{"$KV."}, false},
		{"probe, the probe itself", probe, nil, []string{"$KV.jetflow_crons.def." + ProbeKey}, true},
	} {
		got := violation(tc.last, tc.before, "_INBOX", tc.prefixes) != nil
		if got != tc.want {
			t.Errorf("%s: %t, want %t", tc.name, got, tc.want)
		}
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	pv := func(s string) error { return fmt.Errorf("%w: %s", nats.ErrPermissionViolation, s) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{pv(`Permissions Violation for Publish to "$KV.jetflow_runs.` + ProbeKey + `"`), true},
		{pv(`Permissions Violation for Publish to "$KV.jetflow_runs.abc"`), false},
		{pv(`Permissions Violation for Subscription to "$KV.jetflow_runs.` + ProbeKey + `"`), false},
		{errors.New(ProbeKey), false},
		{nil, false},
	} {
		if got := Probe(tc.err); got != tc.want {
			t.Errorf("Probe(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}

func TestDoWithoutConn(t *testing.T) {
	t.Parallel()
	want := errors.New("boom")
	if err := Do(context.Background(), nil, func(context.Context) error { return want }); err != want {
		t.Fatal(err)
	}
}

// A request whose publish the server denies ends at once with the
// violation, not at its deadline; a permitted one is unaffected.
func TestDoEndsADeniedRequestAtOnce(t *testing.T) {
	t.Parallel()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "u", Password: "p", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"ok.>", "_INBOX.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "ok.>"}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("server not ready")
	}
	defer s.Shutdown()
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("u", "p"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.Subscribe("ok.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	// The deadline lies far past the bound below: a call that waited for
	// it fails, and a slow answer on a loaded machine does not.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = Do(ctx, nc, func(ctx context.Context) error {
		_, err := nc.RequestWithContext(ctx, "denied.api", nil)
		return err
	}, "denied.")
	if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "denied.api") {
		t.Fatalf("err = %v, want the permissions violation", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %s: it waited for the deadline", d)
	}
	// The old violation does not end the next call.
	err = Do(ctx, nc, func(ctx context.Context) error {
		_, err := nc.RequestWithContext(ctx, "ok.echo", []byte("hi"))
		return err
	}, "denied.")
	if err != nil {
		t.Fatalf("permitted request: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	v := fmt.Errorf("%w: Permissions Violation for Publish to \"x\"", nats.ErrPermissionViolation)
	e := &violationError{v: v, msg: describe(fmt.Errorf("provision: %w", context.Canceled), v)}
	if e.Error() != "provision: "+v.Error() || !errors.Is(e, nats.ErrPermissionViolation) || errors.Is(e, context.Canceled) {
		t.Fatalf("%v", e)
	}
	if got := describe(errors.New("other"), v); got != v.Error()+" (other)" {
		t.Fatal(got)
	}
}

// A denied read from a stream's leader is optional: it ends only the call
// that made it (a prefix as long as OptionalPrefix), not an enclosing Do
// that watches all of $JS., and Optional says so.
func TestOptionalViolation(t *testing.T) {
	t.Parallel()
	pv := func(s string) error { return fmt.Errorf("%w: %s", nats.ErrPermissionViolation, s) }
	leader := pv(`Permissions Violation for Publish to "$JS.API.STREAM.MSG.GET.KV_jetflow_runs"`)
	fn := pv(`Permissions Violation for Publish to "$JS.API.STREAM.MSG.GET.JETFLOW_FN"`)
	if v := violation(leader, nil, "_INBOX", []string{"$JS.", "$KV."}); v != nil {
		t.Fatalf("an enclosing call ended on an optional read: %v", v)
	}
	if v := violation(leader, nil, "_INBOX", nil); v != nil {
		t.Fatalf("a call watching every subject ended on an optional read: %v", v)
	}
	if v := violation(leader, nil, "_INBOX", []string{"$JS.API.STREAM.MSG.GET.KV_jetflow_runs"}); v == nil {
		t.Fatal("the read itself did not end on its violation")
	}
	if v := violation(fn, nil, "_INBOX", []string{"$JS."}); v == nil {
		t.Fatal("a read that is not optional did not end the call")
	}
	if !Optional(leader) || Optional(fn) || Optional(errors.New("other")) {
		t.Fatal("Optional misclassifies")
	}
}
