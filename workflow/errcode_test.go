package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

var errOutOfStock = errors.New("shop: out of stock")

func init() {
	if err := workflow.RegisterError("shop.outOfStock", errOutOfStock); err != nil {
		panic(err)
	}
}

// A workflow that fails with a registered sentinel (wrapped), with a
// step's typed error, or with an error nobody coded: Result and Get return
// an error that errors.Is matches against the sentinel (and the record's
// text), and nothing for the uncoded one.
func TestFailedWorkflowKeepsItsErrorIdentity(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.errcode", func(wf *workflow.Context, how string) (string, error) {
		switch how {
		case "sentinel":
			_, err := workflow.Step(wf, "reserve", func(context.Context) (int, error) {
				return 0, fmt.Errorf("item 7: %w", errOutOfStock)
			})
			return "", fmt.Errorf("order: %w", err)
		case "timeout":
			_, err := workflow.AwaitEvent[string](wf, "paid", -1)
			return "", err
		}
		return "", errors.New("plain failure")
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	for _, tc := range []struct {
		how  string
		want error
	}{
		{"sentinel", errOutOfStock},
		{"timeout", workflow.ErrEventTimeout},
		{"plain", nil},
	} {
		id, err := workflow.Start(ctx, e.P, def, tc.how)
		must(t, err)
		_, err = workflow.Result(ctx, e.P, def, id)
		var werr *workflow.Error
		if !errors.As(err, &werr) || werr.ID != id || werr.Msg == "" {
			t.Fatalf("%s: Result: %v (%T), want a *workflow.Error", tc.how, err, err)
		}
		st := e.status(t, id)
		switch {
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: Result %v does not match %v", tc.how, err, tc.want)
		case tc.want != nil && !errors.Is(st.Err(), tc.want):
			t.Errorf("%s: Get's Err %v (code %q) does not match %v", tc.how, st.Err(), st.ErrorCode, tc.want)
		case tc.want == nil && (werr.Code != "" || st.ErrorCode != "" || errors.Unwrap(err) != nil):
			t.Errorf("%s: an uncoded failure got code %q / %q", tc.how, werr.Code, st.ErrorCode)
		}
	}
}

// RegisterError refuses a code taken by another error, and empty input.
func TestRegisterError(t *testing.T) {
	if err := workflow.RegisterError("shop.outOfStock", errOutOfStock); err != nil {
		t.Errorf("same pair again: %v", err)
	}
	if err := workflow.RegisterError("shop.outOfStock", errors.New("other")); !errors.Is(err, workflow.ErrCodeTaken) {
		t.Errorf("taken code: %v", err)
	}
	if err := workflow.RegisterError("nondeterministic", errors.New("mine")); !errors.Is(err, workflow.ErrCodeTaken) {
		t.Errorf("built-in code: %v", err)
	}
	if err := workflow.RegisterError("", errOutOfStock); !errors.Is(err, jetflow.ErrBadArgs) {
		t.Errorf("empty code: %v", err)
	}
}
