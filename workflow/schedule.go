package workflow

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
)

// StartFunction is the internal function whose run starts workflow name:
// "<name>.start". A cron (or any producer) that calls it starts one
// workflow per run.
func StartFunction(name string) string { return name + ".start" }

// StartCall is the call that starts workflow def with input in when it
// runs: the target of a cron, so that a workflow runs on a schedule.
//
//	s.ConfigureCrons(scheduler.CronConfig{Crons: []scheduler.CronDef{{Name: "nightly-report",
//		Schedule: scheduler.Daily(2, 0), TZ: "America/New_York", Call: workflow.StartCall(Report, ReportArgs{})}}})
//
// Each run of it starts the workflow with id "<run id>-wf" (so a cron
// fire, whose run id is derived from the cron and the fire time, starts
// exactly one workflow however many schedulers fire it) and the run as its
// parent: the workflow's record names the trigger
// ("cron-<name>-<unix time>"). The definition must be registered on a
// worker (Register serves StartFunction).
func StartCall[In, Out any](def *Workflow[In, Out], in In) jetflow.Call {
	return jetflow.Call{Name: StartFunction(def.name), Kind: jetflow.Retryable, Args: in}
}

// TriggeredID is the id of the workflow a run of StartFunction with id
// runID starts.
func TriggeredID(runID string) string { return jetflow.DerivedID(runID + "-wf") }

func (d *driver) startRun(ctx context.Context, j *worker.Job[json.RawMessage]) error {
	// A fire whose definition is not active is skipped (the schedule
	// advances all the same); the run's result says why.
	if st, err := DefinitionStateOf(ctx, d.p, d.def.Name()); err != nil {
		return err
	} else if st != DefinitionActive {
		return j.SetResult(map[string]string{"skipped": "definition " + string(st)})
	}
	id := TriggeredID(j.ID())
	_, err := start(ctx, d.p, d.def.Name(), j.Args, WithID(id), withParent(j.ID()))
	if err != nil && !errors.Is(err, producer.ErrAlreadyExists) {
		return err
	}
	return j.SetResult(id)
}
