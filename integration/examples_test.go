package integration_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
)

// exampleSpec says how the test runs one program of examples/: the flags
// that shorten its delays, and the lines its output must hold.
type exampleSpec struct {
	args []string
	// url: the program takes --url, and is run a second time against a
	// separate server.
	url bool
	// want are lines the output must contain, in this order.
	want []string
	// check inspects the whole output for what want cannot say.
	check func(t *testing.T, out string)
}

var exampleSpecs = map[string]exampleSpec{
	"progress": {
		args: []string{"--items", "6", "--step", "50ms"},
		url:  true,
		want: []string{"job: pending", "job: inProgress", "6/6", `done: success, result {"imported":6}, attempts 1`},
	},
	// Alice's event is sent once her workflow sleeps, and must come
	// before the sleep ends: the polls of its state and the event's
	// writes in between can take seconds on a loaded machine; 10 s leave
	// a wide margin.
	"onboarding": {args: []string{"--wait", "10s"}, url: true, want: []string{"alice activated her account", "alice: acct-alice@example.com activated via email link; no follow-up", "bob: acct-bob@example.com not activated; follow-up sent", "emails sent: 3"}},
	"cart": {url: true, want: []string{
		"opened the cart: started by 1 of 2 calls",
		"add book x1: 1 item(s)", "add pen x3: 4 item(s)",
		"add lamp x-2: rejected (errors.Is ErrUpdateRejected: true)",
		"add mug x2: 6 item(s)", "add card x1: 7 item(s)",
		"query: alice has 7 item(s), in run 2 of the cart",
		"result: alice paid for 7 item(s) over 2 run(s)",
	}},
	"ordersaga": {url: true, want: []string{"order A done: res-A, ch-A", "order B canceled: card declined; compensated 1 step(s)", "release          done"}},
	"nightlyny": {url: true, want: []string{"daily 02:00 (America/New_York), next fires:", "Sun 02:00 EST",
		`success, result "report-demo.pdf (1200 rows)"`, "definition paused: fire cron-demo-report-", "definition active again"}},
	"dailydigest":     {want: []string{"send-daily-digest: daily 09:00 (UTC); next fires:"}},
	"intervalcleanup": {want: []string{"cleanup-expired-sessions: every 1s, fired"}},
	"weekdayny":       {want: []string{"register again: errors.Is ErrCronExists: true"}},
	"pool": {want: []string{
		"summary: 100 succeeded, 0 failed, 0 canceled",
	}},
	// Version 1 gets SIGTERM with its two slow runs (5 s) running and a
	// grace of 2 s: it hands them back, and version 2 runs them.
	"gracefulworker": {
		url: true,
		want: []string{
			"enqueued 20 runs, 2 of them slow (5s)",
			"deploy: SIGTERM to version 1",
			"version 1 stopped: readiness unavailable: draining: stopping: takes no new runs;",
			"summary: 20 of 20 succeeded, each attempted once: true, ran 20 times in all",
		},
		check: func(t *testing.T, out string) {
			if !strings.Contains(out, "2 handed back") {
				t.Errorf("version 1 did not hand back its 2 slow runs:\n%s", out)
			}
		},
	},
	"retrier": {
		args: []string{"--failures", "2"},
		want: []string{
			"payments.charge charge-order-1-a3: accepted, ch_order-1_3",
			"payments.charged: order order-1 success after 3 attempts, charge ch_order-1_3",
			"retrier charge-order-1: success, 3 attempts",
		},
	},
	"webhook": {
		want: []string{
			"signed request: 200 OK",
			"badly signed request: 401 Unauthorized",
			"success after 1 attempt(s); 1 event(s) stored",
		},
	},
	"selfdestruct": {
		// The list "before" is printed after the sending run's outcome
		// is written, two waits see it and the messages are listed (a
		// watch each, a consumer for the list): a loaded machine can take
		// seconds; 10 s leave a wide margin before the message goes.
		args: []string{"--after", "10s"},
		url:  true,
		want: []string{
			"messages.send: success; messages.destruct scheduled in 10s",
			"messages before: 2",
			"  alice: this message self-destructs in 10s",
			"  bob: this message stays",
			"messages.destruct run: success",
			"messages after: 1",
			"  bob: this message stays",
		},
		check: func(t *testing.T, out string) {
			_, after, _ := strings.Cut(out, "messages after:")
			if strings.Contains(after, "alice") {
				t.Errorf("alice's message is still listed after the destruct:\n%s", after)
			}
		},
	},
	"triggers": {
		url: true,
		want: []string{
			"trigger ship: 5 messages, 2 runs, 1 found existing, 1 skipped, 1 failed",
			"order X-9: failed, not JSON: true",
			"order C-3 published while no runner ran: shipped after the restart",
			"orders.ship: 1 x book", "orders.ship: 2 x lamp", "orders.ship: 3 x pen",
			"users.welcome: ann@example.com", "users.welcome: bob@example.com",
			"trigger ship -> orders.ship, origin code, stream ORDERS",
			"trigger welcome -> users.welcome, origin code, stream JETFLOW_TRIGGER_welcome",
		},
		check: func(t *testing.T, out string) {
			if n := strings.Count(out, "orders.ship: 1 x book"); n != 1 {
				t.Errorf("order A-1, published twice, shipped %d times:\n%s", n, out)
			}
			if strings.Contains(out, "test") {
				t.Errorf("the skipped test order ran:\n%s", out)
			}
		},
	},
	"orderpayment": {
		// Order 1 is paid after order 2 is created and a check scheduled
		// again, a dozen reads and writes that a loaded machine can
		// stretch to seconds; 10 s leave its check a wide margin before
		// it is due.
		args: []string{"--after", "10s"},
		url:  true,
		want: []string{
			"order-1 created (a book, pending); order-1-payment-check scheduled in 10s",
			"order-2 created (a lamp, pending); order-2-payment-check scheduled in 10s",
			"(errors.Is ErrAlreadyExists: true)",
			"order-1 paid; order-1-payment-check is canceled",
			"orders.paymentCheck order-2: no payment, order expired",
			"order-1-payment-check: canceled (handler runs: 0)",
			"order-2-payment-check: success (handler runs: 1)",
			"  order-1 (a book): paid",
			"  order-2 (a lamp): expired",
		},
		check: func(t *testing.T, out string) {
			if strings.Contains(out, "orders.paymentCheck order-1") {
				t.Errorf("order 1's canceled check ran:\n%s", out)
			}
		},
	},
}

// TestExamples builds every program in examples/ and runs it as its own
// process, with short delays and a deadline: it must exit 0 and print what
// its story promises. A new directory in examples/ is picked up by itself;
// without an entry in exampleSpecs it runs with no flags and only its exit
// code is checked.
func TestExamples(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	entries, err := os.ReadDir(filepath.Join(root, "examples"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && hasGoFiles(t, filepath.Join(root, "examples", e.Name())) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatal("no programs in examples/")
	}
	for name := range exampleSpecs {
		if !slices.Contains(names, name) {
			t.Errorf("examples/%s is gone; remove it from exampleSpecs", name)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			spec, known := exampleSpecs[name]
			if !known {
				t.Logf("examples/%s has no entry in exampleSpecs: run without flags, exit code checked only", name)
			}
			bin := goBuild(t, "./examples/"+name)
			t.Run("embedded", func(t *testing.T) {
				t.Parallel()
				out := runExample(t, bin, spec.args...)
				checkExample(t, spec, out)
			})
			if spec.url {
				t.Run("url", func(t *testing.T) {
					t.Parallel()
					out := runExample(t, bin, append([]string{"--url", exampleServer(t)}, spec.args...)...)
					checkExample(t, spec, out)
				})
			}
		})
	}
}

// exampleServer starts a server for an example run with --url and returns
// its URL. Its fsync interval is 1 s, not the default 10 ms: nats-server
// v2.15.2 assigns a new file store's sync timer without its lock
// (filestore.go, setSyncTimer), and a timer that fires within 10 ms lets the
// race detector of this test binary catch that upstream race.
func exampleServer(t *testing.T) string {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{Dir: t.TempDir(), SyncEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv.ClientURL()
}

// runExample runs bin with args under a deadline and returns its stdout; it
// fails the test unless the program exits 0 by itself.
func runExample(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 5 * time.Second
	// Race reports are judged below, so that the exit code is the
	// program's own.
	cmd.Env = append(os.Environ(), "GORACE=exitcode=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	ours, upstream := dataRaces(stderr.String())
	for _, r := range ours {
		t.Errorf("%s: data race:\n%s", filepath.Base(bin), r)
	}
	for _, r := range upstream {
		t.Logf("%s: data race inside nats-server (the embedded server's own code, not jetflow's); ignored:\n%s", filepath.Base(bin), r)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not exit within the deadline\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), args, stdout.String(), stderr.String())
	}
	if err != nil {
		t.Fatalf("%s %v: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), args, err, stdout.String(), stderr.String())
	}
	t.Logf("%s %v:\n%s", filepath.Base(bin), args, stdout.String())
	return stdout.String()
}

// checkExample finds spec.want in out, line by line and in order, then runs
// spec.check.
func checkExample(t *testing.T, spec exampleSpec, out string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	i := 0
	for _, want := range spec.want {
		for i < len(lines) && !strings.Contains(lines[i], want) {
			i++
		}
		if i == len(lines) {
			t.Errorf("output lacks %q (or has it out of order):\n%s", want, out)
			return
		}
		i++
	}
	if spec.check != nil {
		spec.check(t, out)
	}
}

func hasGoFiles(t *testing.T, dir string) bool {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m) > 0
}

// dataRaces splits the race detector's reports in stderr into those with a
// jetflow frame in a racing access, and those entirely inside nats-server
// (the embedded server the examples run in-process).
func dataRaces(stderr string) (ours, upstream []string) {
	const sep = "==================\nWARNING: DATA RACE"
	parts := strings.Split(stderr, sep)
	for _, p := range parts[1:] {
		report, _, _ := strings.Cut(p, "==================")
		// The racing accesses come before the stacks that created the goroutines.
		access, _, _ := strings.Cut(report, "\nGoroutine ")
		if strings.Contains(access, "github.com/jetflow-dev/jetflow") || !strings.Contains(access, "github.com/nats-io/nats-server/") {
			ours = append(ours, "WARNING: DATA RACE"+report)
		} else {
			upstream = append(upstream, "WARNING: DATA RACE"+report)
		}
	}
	return ours, upstream
}
