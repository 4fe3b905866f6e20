package scheduler

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-dev/jetflow/internal/health"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
)

// schedHealth is what the scheduler's election loop tells its probes.
type schedHealth struct {
	// loop beats at each try to take or renew the lease (every LeaseTTL/5).
	loop health.Beat
	// known beats at each try that learned who holds the lease: this
	// scheduler (nil) or another (kv.ErrNotLeader).
	known    health.Beat
	draining atomic.Bool
	mu       sync.Mutex
	lastErr  error // of the last try that did not learn who holds the lease
}

// attempt is the elector's OnAttempt.
func (h *schedHealth) attempt(err error) {
	h.loop.Mark()
	if err == nil || errors.Is(err, kv.ErrNotLeader) {
		h.known.Mark()
		return
	}
	h.mu.Lock()
	h.lastErr = err
	h.mu.Unlock()
}

func (h *schedHealth) drain() { h.draining.Store(true) }

// liveAfter is how long the election loop may go without a try before
// liveness fails: a try waits at most LeaseTTL/2 and a term's end for its
// work to stop, so minutes mean a stuck loop, not a slow server.
func (s *Scheduler) liveAfter() time.Duration { return max(20*s.cfg.LeaseTTL, 2*time.Minute) }

// Health is the scheduler's liveness and readiness handler: GET
// <mount>/livez and GET <mount>/readyz answer 200 with {"status":"ok",...}
// or 503 with {"status":"unavailable",...} and the checks that failed.
//
// Liveness says the election loop is alive (it tried to take or renew the
// lease within max(20*LeaseTTL, 2 min)); it never asks NATS. Before Start
// it passes; once stopped it fails.
//
// Readiness says the scheduler knows who holds the lease (itself or a
// standby's leader), learned within LeaseTTL, its NATS connection is up,
// and it is not stopping. A standby is ready: it takes over when the leader
// goes. The "lease" check's detail says whether this one leads.
func (s *Scheduler) Health() http.Handler {
	return health.Handler(health.Funcs{LiveFunc: s.liveReport, ReadyFunc: s.readyReport})
}

// Live is the liveness report of Health as an error (nil when live).
func (s *Scheduler) Live() error { return s.liveReport().Err() }

// Ready is the readiness report of Health as an error (nil when ready).
func (s *Scheduler) Ready() error { return s.readyReport().Err() }

func (s *Scheduler) stopped() bool {
	select {
	case <-s.life.Stopped():
		return true
	default:
		return false
	}
}

func (s *Scheduler) liveReport() health.Report {
	_, began := s.health.loop.Age()
	return health.NewReport(health.LoopCheck("loop", &s.health.loop, s.liveAfter(), began && s.stopped()))
}

func (s *Scheduler) readyReport() health.Report {
	_, began := s.health.loop.Age()
	lease := health.Check{Name: "lease"}
	age, ok := s.health.known.Age()
	switch {
	case !ok:
		lease.Detail = "not known yet"
	case age > s.cfg.LeaseTTL:
		s.health.mu.Lock()
		err := s.health.lastErr
		s.health.mu.Unlock()
		lease.Detail = "not known for " + age.Round(100*time.Millisecond).String()
		if err != nil {
			lease.Detail += ": " + err.Error()
		}
	case s.IsLeader():
		lease.OK, lease.Detail = true, "leader"
	default:
		lease.OK, lease.Detail = true, "standby"
	}
	nc := s.js.Conn()
	conn := health.Check{Name: "connected", OK: nc.Status() == nats.CONNECTED}
	if !conn.OK {
		conn.Detail = "NATS connection " + nc.Status().String()
	}
	stopping := s.health.draining.Load() || began && s.stopped()
	drain := health.Check{Name: "draining", OK: !stopping}
	if !drain.OK {
		drain.Detail = "stopping"
	}
	return health.NewReport(conn, lease, drain)
}
