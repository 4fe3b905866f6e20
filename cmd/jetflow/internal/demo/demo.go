package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
)

// HelloArgs are the arguments of demo.hello.
type HelloArgs struct {
	Name string `json:"name"`
	// Steps is the number of progress steps, 100 ms each. Default 3.
	Steps int `json:"steps,omitempty"`
}

// FlakyArgs are the arguments of demo.flaky.
type FlakyArgs struct {
	// Failures is how many attempts fail before one succeeds. Default 2.
	Failures int `json:"failures,omitempty"`
}

// ReportArgs are the arguments of demo.report.
type ReportArgs struct {
	Title string `json:"title"`
}

// The demo functions.
var (
	// Hello greets, reporting progress at every step.
	Hello = jetflow.Define[HelloArgs]("demo.hello")
	// Flaky fails its first attempts, then succeeds: it shows retries.
	Flaky = jetflow.Define[FlakyArgs]("demo.flaky")
	// Report is at-most-once: it is claimed before it runs and never runs twice.
	Report = jetflow.Define[ReportArgs]("demo.report", jetflow.WithKind(jetflow.AtMostOnce))
)

// ErrOnPurpose is the error demo.flaky fails with.
var ErrOnPurpose = errors.New("demo: failing on purpose")

// StepDelay is how long one step of demo.hello (and demo.report) takes.
const StepDelay = 100 * time.Millisecond

// Names are the names of the demo functions.
var Names = []string{Hello.Name(), Flaky.Name(), Report.Name()}

// Register registers the demo handlers on w. demo.flaky retries fast
// (backoff from 200 ms) so that its retries show within seconds.
func Register(w *worker.Worker) error {
	if err := worker.Register(w, Hello, hello, worker.Options{}); err != nil {
		return err
	}
	if err := worker.Register(w, Flaky, flaky, worker.Options{
		MaxAttempts: 5,
		Backoff:     jetflow.Backoff{Initial: 200 * time.Millisecond, Max: 2 * time.Second},
	}); err != nil {
		return err
	}
	return worker.Register(w, Report, report, worker.Options{Timeout: 30 * time.Second})
}

func hello(ctx context.Context, j *worker.Job[HelloArgs]) error {
	name, steps := j.Args.Name, j.Args.Steps
	if name == "" {
		name = "world"
	}
	if steps <= 0 {
		steps = 3
	}
	for i := 1; i <= steps; i++ {
		if err := sleep(ctx, StepDelay); err != nil {
			return err
		}
		err := j.Progress(ctx, jetflow.Progress{
			Percent: float64(100*i) / float64(steps), Processed: int64(i), Total: int64(steps),
			Message: fmt.Sprintf("step %d of %d", i, steps),
		})
		if err != nil {
			return err
		}
	}
	return j.SetResult(map[string]string{"greeting": "hello, " + name})
}

func flaky(ctx context.Context, j *worker.Job[FlakyArgs]) error {
	failures := j.Args.Failures
	if failures <= 0 {
		failures = 2
	}
	if j.Attempt() <= failures {
		return fmt.Errorf("attempt %d of %d: %w", j.Attempt(), j.MaxAttempts(), ErrOnPurpose)
	}
	return j.SetResult(map[string]int{"succeededOnAttempt": j.Attempt()})
}

func report(ctx context.Context, j *worker.Job[ReportArgs]) error {
	if err := sleep(ctx, StepDelay); err != nil {
		return err
	}
	return j.SetResult(map[string]string{"report": j.Args.Title + ": 42 rows"})
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Scheduled is one run Seed scheduled.
type Scheduled struct {
	ID       string
	Function string
	Delay    time.Duration
}

// Seed schedules the demo runs `jetflow dev` starts with: demo.hello now,
// after 2 s and after 5 s, demo.flaky now (two failed attempts, then
// success) and demo.report now.
func Seed(ctx context.Context, p *producer.Producer) ([]Scheduled, error) {
	plan := []struct {
		delay time.Duration
		call  jetflow.Call
	}{
		{0, Hello.With(HelloArgs{Name: "jetflow"})},
		{2 * time.Second, Hello.With(HelloArgs{Name: "later"})},
		{5 * time.Second, Hello.With(HelloArgs{Name: "even later", Steps: 5})},
		{0, Flaky.With(FlakyArgs{Failures: 2})},
		{0, Report.With(ReportArgs{Title: "daily sales"})},
	}
	out := make([]Scheduled, 0, len(plan))
	for _, it := range plan {
		if err := ctx.Err(); err != nil {
			return out, err // stopped: schedule no more
		}
		id, err := p.RunAfter(ctx, it.delay, it.call)
		if err != nil {
			return out, fmt.Errorf("demo: schedule %s: %w", it.call.Name, err)
		}
		out = append(out, Scheduled{ID: id, Function: it.call.Name, Delay: it.delay})
	}
	return out, nil
}
