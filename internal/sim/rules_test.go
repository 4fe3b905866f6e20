package sim

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/kv"
)

// TestCreateConfirmedOneRound: over the model, kv.CreateConfirmed makes one
// round per call and never waits on its real timer: a refusal the leader
// cannot settle ends in ErrUnconfirmed (or the round's context error).
func TestCreateConfirmedOneRound(t *testing.T) {
	cases := []struct {
		name  string
		found kv.Found
		ferr  error
		want  error
	}{
		{"the leader holds ours", kv.Ours, nil, nil},
		{"the leader holds another's", kv.Theirs, nil, kv.ErrExists},
		{"the leader holds nothing", kv.Missing, nil, kv.ErrUnconfirmed},
		{"no leader", kv.Missing, errTimeout, kv.ErrUnconfirmed},
	}
	for _, c := range cases {
		ctx := newRoundCtx()
		creates := 0
		create := func(ctx context.Context) error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			creates++
			return errWrongSeq
		}
		t0 := time.Now()
		err := kv.CreateConfirmed(ctx, create, func(context.Context) (kv.Found, error) {
			if c.found == kv.Missing {
				ctx.end()
			}
			return c.found, c.ferr
		})
		if c.want == kv.ErrUnconfirmed && errors.Is(err, context.DeadlineExceeded) {
			err = kv.ErrUnconfirmed // the timer won the select: same verdict
		}
		if !errors.Is(err, c.want) || creates != 1 || time.Since(t0) > time.Second {
			t.Errorf("%s: %v after %d creates, want %v after 1", c.name, err, creates, c.want)
		}
	}
}

// TestReplayIsExact: a seed replays the same run, step for step.
func TestReplayIsExact(t *testing.T) {
	for _, s := range []uint64{7, 516} {
		a := Run(Config{Seed: s, TraceLen: 1 << 20})
		b := Run(Config{Seed: s, TraceLen: 1 << 20})
		if !slices.Equal(a.Trace, b.Trace) || a.Violation != b.Violation {
			t.Errorf("seed %d replayed differently", s)
		}
	}
}
