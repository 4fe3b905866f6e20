package main

import (
	"context"
	"net/http"
	"sync"

	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/health"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
)

// The probes of `jetflow dev` and `jetflow dashboard`: /livez and /readyz
// under the server's root, beside the dashboard (docs/operations.md). The
// dashboard is live while it serves and ready while its NATS connection is
// up; jetflow dev adds its worker's and scheduler's own checks.

type healthKey struct{}

// withHealth returns ctx carrying src, the checks a served dashboard's
// probes add to its own.
func withHealth(ctx context.Context, src health.Source) context.Context {
	return context.WithValue(ctx, healthKey{}, src)
}

// withProbes serves /livez and /readyz in front of h.
func withProbes(ctx context.Context, p *producer.Producer, h http.Handler) http.Handler {
	nc := engine.Of(p).JetStream().Conn()
	own := health.Funcs{
		LiveFunc: func() health.Report { return health.NewReport(health.Check{Name: "http", OK: true}) },
		ReadyFunc: func() health.Report {
			c := health.Check{Name: "connected", OK: nc.Status() == nats.CONNECTED}
			if !c.OK {
				c.Detail = "NATS connection " + nc.Status().String()
			}
			return health.NewReport(c)
		},
	}
	parts := map[string]health.Source{"dashboard": own}
	if src, ok := ctx.Value(healthKey{}).(health.Source); ok {
		parts["dev"] = src
	}
	probes := health.Handler(health.Combine(parts))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == health.LivePath || r.URL.Path == health.ReadyPath {
			probes.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// devProbes holds the probes of each running jetflow dev's worker and
// scheduler, by its scheduler (startDevRoles starts both, startDevDashboard
// serves them).
var devProbes sync.Map // *scheduler.Scheduler -> health.Source

// registerDevHealth keeps the probes of jetflow dev's worker and scheduler
// until the scheduler stops.
func registerDevHealth(w *worker.Worker, s *scheduler.Scheduler) {
	devProbes.Store(s, health.Combine(map[string]health.Source{
		"worker":    health.FromErrors("checks", w.Live, w.Ready),
		"scheduler": health.FromErrors("checks", s.Live, s.Ready),
	}))
	go func() { <-s.Stopped(); devProbes.Delete(s) }()
}

// devHealthOf is the probes registerDevHealth kept for s (none: the
// scheduler's alone).
func devHealthOf(s *scheduler.Scheduler) health.Source {
	if src, ok := devProbes.Load(s); ok {
		return src.(health.Source)
	}
	return health.FromErrors("checks", s.Live, s.Ready)
}
