package scheduler

import (
	"context"
	"net/http"
	"sync"

	"github.com/jetflow-dev/jetflow/internal/backlog"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
)

// Backlog is one read of how much work waits: per function the runs ready,
// in flight, the oldest ready run's age and the runs that ended failed;
// for the deployment the delayed runs due within 1 and 10 minutes and the
// runs of functions no worker serves yet (docs/operations.md).
type Backlog = backlog.Figures

// BacklogFunction is one function's part of a Backlog.
type BacklogFunction = backlog.Function

// opsState holds the scheduler's backlog reader, made on first use.
type opsState struct {
	once sync.Once
	r    *backlog.Reader
}

func (s *Scheduler) backlogReader() *backlog.Reader {
	s.ops.once.Do(func() { s.ops.r = backlog.New(s.js, s.scfg) })
	return s.ops.r
}

// Backlog reads the backlog now, at a cost that does not grow with the runs
// kept (a consumer info per function, a message get, two counts of the
// delayed store's keys, one read of the run index). Reads within 5 s share
// one answer. A function whose figures could not be read is left out and
// named in the error, returned with the rest.
func (s *Scheduler) Backlog(ctx context.Context) (*Backlog, error) {
	return s.backlogReader().Cached(ctx)
}

// ScalingHandler is the scaling endpoint for autoscalers (KEDA's
// metrics-api scaler): GET answers the backlog as JSON with desiredWorkers
// for ?target= runs per worker (default 10); ?function=<name> answers one
// function's figures at the top level. It answers 503 when the figures
// cannot be read, so that an outage never reads as an empty backlog.
// Serve it from any scheduler, leader or standby.
func (s *Scheduler) ScalingHandler() http.Handler { return backlog.Handler(s.Backlog) }

// observeBacklog registers the backlog gauges, reported while this
// scheduler leads (one series per deployment); the returned func
// unregisters them.
func (s *Scheduler) observeBacklog() func() {
	stop, err := telemetry.ObserveBacklog(s.Backlog, s.IsLeader)
	if err != nil {
		s.log.Warn("backlog gauges", "error", err)
		return func() {}
	}
	return func() { _ = stop() }
}
