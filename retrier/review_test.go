package retrier_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/retrier"
)

// A MaxBackoff or InitialBackoff near the largest Duration caps the delay:
// it never wraps to a negative delay (an immediate retry).
func TestDelayHugeValues(t *testing.T) {
	t.Parallel()
	for _, o := range []retrier.Options{
		{NoJitter: true, MaxBackoff: math.MaxInt64},
		{MaxBackoff: math.MaxInt64},
		{NoJitter: true, InitialBackoff: math.MaxInt64, MaxBackoff: math.MaxInt64},
		{InitialBackoff: math.MaxInt64},
		{NoJitter: true, InitialBackoff: math.MaxInt64 / 4, MaxBackoff: math.MaxInt64 - 1},
	} {
		for _, k := range []int{1, 2, 60, 200, math.MaxInt} {
			if d := o.Delay(k); d <= 0 {
				t.Errorf("%+v Delay(%d) = %s, want positive", o, k, d)
			}
		}
	}
}

// Status and Cancel of an id whose "<id>-start" is a plain run (not a
// retrier's start run) say so, and Cancel leaves that run alone.
func TestStatusCancelOfPlainStartLookalike(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{})
	ctx := context.Background()
	if _, err := e.P.RunAfter(ctx, time.Hour, Flaky.With(FlakyArgs{Key: "k"}), producer.WithID("foo-start")); err != nil {
		t.Fatal(err)
	}
	if st, err := e.R.Status(ctx, "foo"); !errors.Is(err, jetflow.ErrNotFound) && !errors.Is(err, retrier.ErrBadRecord) {
		t.Fatalf("status of foo = %+v, %v; want ErrNotFound or ErrBadRecord", st, err)
	}
	if err := e.R.Cancel(ctx, "foo"); !errors.Is(err, jetflow.ErrNotFound) && !errors.Is(err, retrier.ErrBadRecord) {
		t.Fatalf("cancel of foo = %v; want ErrNotFound or ErrBadRecord", err)
	}
	if r := e.get(t, "foo-start"); r.State != jetflow.Pending {
		t.Fatalf("plain run foo-start is %s, want pending", r.State)
	}
	if _, err := e.P.Get(ctx, "foo"); !isNotFound(err) {
		t.Fatalf("record foo: %v, want none written", err)
	}
}

// Status of ids that are not valid run ids, of plain runs and of unknown
// ids: typed errors.
func TestStatusOfNonRetriers(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{})
	ctx := context.Background()
	id, err := e.P.RunAfter(ctx, time.Hour, Flaky.With(FlakyArgs{Key: "k"}), producer.WithID("plain"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.R.Status(ctx, id); !errors.Is(err, retrier.ErrBadRecord) {
		t.Fatalf("status of a plain run: %v, want ErrBadRecord", err)
	}
	for _, bad := range []string{"", "a.b", "a b", "a*", ">", string(make([]byte, 300))} {
		if _, err := e.R.Status(ctx, bad); !errors.Is(err, jetflow.ErrInvalidRunID) {
			t.Errorf("status of %q: %v, want ErrInvalidRunID", bad, err)
		}
		if err := e.R.Cancel(ctx, bad); !errors.Is(err, jetflow.ErrInvalidRunID) {
			t.Errorf("cancel of %q: %v, want ErrInvalidRunID", bad, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := e.R.Wait(wctx, bad)
		cancel()
		if !errors.Is(err, jetflow.ErrInvalidRunID) {
			t.Errorf("wait of %q: %v, want ErrInvalidRunID", bad, err)
		}
	}
	if _, err := e.R.Status(ctx, "nope"); !isNotFound(err) {
		t.Fatalf("status of unknown: %v", err)
	}
}
