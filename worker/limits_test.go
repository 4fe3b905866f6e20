package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/worker"
)

var atLimit = jetflow.Define[string]("test.atlimit")

// A run whose args are at the producer's limit (the server's max payload
// less 4096 bytes) can still succeed with a small result: the producer
// accepts nothing a worker cannot finish.
func TestArgsAtTheLimitLeaveRoomForAResult(t *testing.T) {
	t.Parallel()
	const max = 64 << 10
	e := setupOn(t, testserver.StartMaxPayload(t, max), worker.Config{})
	worker.Handle(e.W, atLimit, func(ctx context.Context, j *worker.Job[string]) error {
		return j.SetResult("done")
	})
	e.start(t)
	args := strings.Repeat("a", max-4096-2) // with its quotes: exactly the limit
	id, err := e.P.Enqueue(context.Background(), atLimit.With(args))
	if err != nil {
		t.Fatal(err)
	}
	r := e.wait(t, id)
	if r.State != jetflow.Success || string(r.Result) != `"done"` {
		t.Fatalf("%s %q (result %s), want success with its result", r.State, r.Error, r.Result)
	}
}
