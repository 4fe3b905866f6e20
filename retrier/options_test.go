package retrier_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/retrier"
)

// MaxFailures NoRetries runs the call once: its failure is not retried.
// It works as the retrier's default and for one run (WithOptions).
func TestNoRetries(t *testing.T) {
	t.Parallel()
	for _, perRun := range []bool{false, true} {
		name := "retrier default"
		if perRun {
			name = "WithOptions"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := retrier.Options{MaxFailures: retrier.NoRetries, InitialBackoff: time.Millisecond, NoJitter: true}
			var runOpts []retrier.RunOption
			if perRun {
				o = retrier.Options{InitialBackoff: time.Millisecond, NoJitter: true} // default 4 failures
				runOpts = append(runOpts, retrier.WithOptions(retrier.Options{MaxFailures: retrier.NoRetries}))
			}
			e := setup(t, o)
			e.startProcess(t)
			ctx := context.Background()
			runOpts = append(runOpts, retrier.WithOnComplete(jetflow.Call{Name: Done.Name()}))
			id, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: "k", Always: true}), runOpts...)
			if err != nil {
				t.Fatal(err)
			}
			st := e.wait(t, id)
			if st.State != jetflow.Failed || st.Attempts != 1 || st.Error != "boom 1" {
				t.Fatalf("status %+v, want failed after 1 attempt with boom 1", st)
			}
			e.waitCallback(t, id)
			e.quiet(t)
			if n := e.tg.nCalls("k"); n != 1 {
				t.Fatalf("target called %d times, want 1", n)
			}
			if _, err := e.P.Get(ctx, retrier.AttemptID(id, 2)); !isNotFound(err) {
				t.Fatalf("attempt 2: %v, want none", err)
			}
			if got := e.tg.completions(id); len(got) != 1 || got[0].Run.State != jetflow.Failed {
				t.Fatalf("callbacks %v, want one failed", got)
			}
		})
	}
}

// A MaxFailures below NoRetries or above MaxFailuresLimit is refused by
// Run with ErrInvalidOptions, whether it is the retrier's default or one
// run's; nothing is scheduled. NoRetries, 0 (the default) and
// MaxFailuresLimit are taken.
func TestInvalidMaxFailures(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{})
	ctx := context.Background()
	call := Flaky.With(FlakyArgs{Key: "k"})
	for _, n := range []int{-2, -100, math.MinInt, retrier.MaxFailuresLimit + 1, math.MaxInt} {
		bad := retrier.Options{MaxFailures: n}
		if id, err := retrier.New(e.P, bad).Run(ctx, call); !errors.Is(err, retrier.ErrInvalidOptions) || id != "" {
			t.Errorf("Run with default MaxFailures %d = %q, %v; want ErrInvalidOptions", n, id, err)
		}
		if id, err := e.R.Run(ctx, call, retrier.WithOptions(bad), retrier.WithID("bad")); !errors.Is(err, retrier.ErrInvalidOptions) || id != "" {
			t.Errorf("Run WithOptions MaxFailures %d = %q, %v; want ErrInvalidOptions", n, id, err)
		}
	}
	if _, err := e.P.Get(ctx, retrier.StartID("bad")); !isNotFound(err) {
		t.Fatalf("a refused Run left a start run: %v", err)
	}
	for _, n := range []int{retrier.NoRetries, 0, 1, retrier.MaxFailuresLimit} {
		if _, err := e.R.RunAfter(ctx, time.Hour, call, retrier.WithOptions(retrier.Options{MaxFailures: n})); err != nil {
			t.Errorf("Run with MaxFailures %d: %v", n, err)
		}
	}
}

// The retrier's record lists every attempt: Run refuses, with
// ErrArgsTooLarge, a MaxFailures whose attempts' ids would not fit the
// record in the server's max payload (long ids, a small max payload),
// rather than accept a retrier whose record cannot grow to its last
// attempt.
func TestMaxFailuresOutgrowingTheRecord(t *testing.T) {
	t.Parallel()
	ts := testserver.StartMaxPayload(t, 64<<10)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := retrier.New(p, retrier.Options{})
	ctx := context.Background()
	id := strings.Repeat("i", 190) // attempt ids of about 195 bytes
	call := Flaky.With(FlakyArgs{Key: "k"})
	_, err = r.Run(ctx, call, retrier.WithID(id), retrier.WithOptions(retrier.Options{MaxFailures: retrier.MaxFailuresLimit}))
	if !errors.Is(err, producer.ErrArgsTooLarge) {
		t.Fatalf("Run with %d attempts of %d-byte ids on a 64 KiB max payload: %v, want ErrArgsTooLarge",
			retrier.MaxFailuresLimit+1, len(retrier.AttemptID(id, 1000)), err)
	}
	if _, err := r.Run(ctx, call, retrier.WithID(id), retrier.WithOptions(retrier.Options{MaxFailures: 100})); err != nil {
		t.Fatalf("Run with 101 attempts: %v", err)
	}
}
