package worker

import (
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/jetflow-dev/jetflow/internal/health"
	"github.com/nats-io/nats.go"
)

// workerHealth is what the worker's loops tell its probes.
type workerHealth struct {
	// loop beats each time the worker's upkeep loop goes round (heartbeats,
	// late claims, outcome retries: at least every second).
	loop health.Beat
}

// liveAfter is how long the upkeep loop may go without a round before
// liveness fails: long enough that a loop waiting on NATS requests through
// an outage (each bounded by its own timeout) is not taken for a stuck one.
func (w *Worker) liveAfter() time.Duration { return max(10*w.cfg.AckWait, 5*time.Minute) }

// Health is the worker's liveness and readiness handler: GET <mount>/livez
// and GET <mount>/readyz answer 200 with {"status":"ok",...} or 503 with
// {"status":"unavailable",...} and the checks that failed.
//
// Liveness says the worker's upkeep loop is alive (it went round within
// max(10*AckWait, 5 min)); it never asks NATS, so an outage of the server
// does not get the process restarted. Before Start it passes (starting);
// after the worker has stopped it fails.
//
// Readiness says the worker takes runs now: started, connected to NATS,
// every function it serves (and has not paused) has a bound consumer, and
// it is not draining (Stop and StopAndCancel make it fail first, before
// anything else). It reads the client's state only: a probe sends nothing.
func (w *Worker) Health() http.Handler { return health.Handler(w.healthSource()) }

// Live is the liveness report of Health as an error (nil when live).
func (w *Worker) Live() error { return w.liveReport().Err() }

// Ready is the readiness report of Health as an error (nil when ready).
func (w *Worker) Ready() error { return w.readyReport().Err() }

// healthSource is the worker as a health.Source (jetflow dev combines it).
func (w *Worker) healthSource() health.Source {
	return health.Funcs{LiveFunc: w.liveReport, ReadyFunc: w.readyReport}
}

func (w *Worker) stopped() bool {
	select {
	case <-w.life.Stopped():
		return true
	default:
		return false
	}
}

func (w *Worker) liveReport() health.Report {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	return health.NewReport(health.LoopCheck("loop", &w.health.loop, w.liveAfter(), started && w.stopped()))
}

func (w *Worker) readyReport() health.Report {
	// The upkeep loop starts once Start has bound every consumer: its first
	// beat also makes what Start wrote visible here.
	_, started := w.health.loop.Age()
	w.mu.Lock()
	stopping := w.stopping
	var unbound []string
	for name, e := range w.fns {
		if started && !e.paused && (e.cc == nil || e.consumeStopped.Load()) {
			unbound = append(unbound, name)
		}
	}
	w.mu.Unlock()
	sort.Strings(unbound)
	checks := []health.Check{
		{Name: "started", OK: started},
		connCheck(w.nc),
		{Name: "consumers", OK: started && len(unbound) == 0},
		{Name: "draining", OK: !stopping},
	}
	if len(unbound) > 0 {
		checks[2].Detail = fmt.Sprintf("not bound: %v", unbound)
	}
	if stopping {
		checks[3].Detail = "stopping: takes no new runs"
	}
	if !started {
		checks[0].Detail = "starting: consumers not bound yet"
	}
	return health.NewReport(checks...)
}

// connCheck says whether nc is connected, from its own state.
func connCheck(nc *nats.Conn) health.Check {
	st := nc.Status()
	c := health.Check{Name: "connected", OK: st == nats.CONNECTED}
	if !c.OK {
		c.Detail = "NATS connection " + st.String()
	}
	return c
}
