// Package health is the one implementation of the liveness and readiness
// handlers that the worker, the scheduler and the CLI's long-running
// commands serve (docs/operations.md).
//
// Liveness says the process's loops are alive: each loop marks a Beat as it
// goes round, and liveness reads those marks and nothing else. It never
// asks NATS, so a NATS outage does not get healthy processes restarted.
// Readiness says the process can do its work now (connected, consumers
// bound, lease known, not draining): it reads the client's own state and
// what the loops last learned, and sends nothing either, so a probe costs
// no round trip.
package health

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// Paths the handlers answer, relative to where they are mounted.
const (
	LivePath  = "/livez"
	ReadyPath = "/readyz"
)

// base makes Beat monotonic: time.Since reads the monotonic clock, so a
// wall clock jump neither fakes nor hides a stuck loop.
var base = time.Now()

// Beat is the last moment a loop went round. The zero value has never
// beaten.
type Beat struct{ n atomic.Int64 }

// Mark records that the loop is alive now.
func (b *Beat) Mark() { b.n.Store(int64(time.Since(base)) + 1) }

// Age is how long ago the loop last went round; ok is false before the
// first Mark.
func (b *Beat) Age() (age time.Duration, ok bool) {
	n := b.n.Load()
	if n == 0 {
		return 0, false
	}
	return time.Since(base) - time.Duration(n-1), true
}

// Check is one line of a report.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Report is what a probe answers: status "ok" (HTTP 200) when every check
// passes, "unavailable" (HTTP 503) otherwise.
type Report struct {
	Status string  `json:"status"`
	Checks []Check `json:"checks"`
}

// Status values of a Report.
const (
	StatusOK          = "ok"
	StatusUnavailable = "unavailable"
)

// NewReport builds a report of checks.
func NewReport(checks ...Check) Report {
	r := Report{Status: StatusOK, Checks: checks}
	for _, c := range checks {
		if !c.OK {
			r.Status = StatusUnavailable
		}
	}
	return r
}

// OK reports whether every check passed.
func (r Report) OK() bool { return r.Status == StatusOK }

// Err is nil when r passed, else an error naming the checks that failed.
func (r Report) Err() error {
	if r.OK() {
		return nil
	}
	var failed []string
	for _, c := range r.Checks {
		if !c.OK {
			s := c.Name
			if c.Detail != "" {
				s += ": " + c.Detail
			}
			failed = append(failed, s)
		}
	}
	return &Error{Failed: failed}
}

// Error is a failed report as an error.
type Error struct{ Failed []string }

func (e *Error) Error() string { return "unavailable: " + strings.Join(e.Failed, "; ") }

// Source answers the two probes.
type Source interface {
	Live() Report
	Ready() Report
}

// Funcs adapts two functions to a Source.
type Funcs struct{ LiveFunc, ReadyFunc func() Report }

// Live calls LiveFunc.
func (f Funcs) Live() Report { return f.LiveFunc() }

// Ready calls ReadyFunc.
func (f Funcs) Ready() Report { return f.ReadyFunc() }

// Handler serves GET (and HEAD) requests whose path ends in /livez or
// /readyz from src, as JSON with 200 or 503; other paths are 404. Mounted
// under a prefix (http.StripPrefix or not), it still answers by suffix.
func Handler(src Source) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep Report
		switch {
		case strings.HasSuffix(r.URL.Path, LivePath):
			rep = src.Live()
		case strings.HasSuffix(r.URL.Path, ReadyPath):
			rep = src.Ready()
		default:
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		Write(w, rep)
	})
}

// Write writes rep as JSON with its status code.
func Write(w http.ResponseWriter, rep Report) {
	code := http.StatusOK
	if !rep.OK() {
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(rep)
}

// Combine merges several sources into one: live when all are live, ready
// when all are ready (jetflow dev serves a worker and a scheduler). Each
// check's name is prefixed with its source's name.
func Combine(named map[string]Source) Source {
	pick := func(f func(Source) Report) Report {
		var checks []Check
		for _, name := range sortedKeys(named) {
			for _, c := range f(named[name]).Checks {
				c.Name = name + "." + c.Name
				checks = append(checks, c)
			}
		}
		return NewReport(checks...)
	}
	return Funcs{
		LiveFunc:  func() Report { return pick(Source.Live) },
		ReadyFunc: func() Report { return pick(Source.Ready) },
	}
}

func sortedKeys(m map[string]Source) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// LoopCheck is the liveness check of a loop that beats b and may go at most
// after between two beats. A loop that has not started yet passes (the
// process is starting: readiness says it cannot serve); one that stopped
// (stopped true) fails.
func LoopCheck(name string, b *Beat, after time.Duration, stopped bool) Check {
	age, ok := b.Age()
	switch {
	case stopped:
		return Check{Name: name, OK: false, Detail: "stopped"}
	case !ok:
		return Check{Name: name, OK: true, Detail: "not started"}
	case age > after:
		return Check{Name: name, OK: false, Detail: "no progress for " + age.Round(time.Second).String()}
	}
	return Check{Name: name, OK: true}
}

// FromErrors is a Source whose reports hold one check, name, failed with
// the error live or ready returns: a part that reports its health as errors
// (worker.Worker.Live and Ready) inside a combined handler.
func FromErrors(name string, live, ready func() error) Source {
	rep := func(f func() error) func() Report {
		return func() Report {
			if err := f(); err != nil {
				return NewReport(Check{Name: name, OK: false, Detail: err.Error()})
			}
			return NewReport(Check{Name: name, OK: true})
		}
	}
	return Funcs{LiveFunc: rep(live), ReadyFunc: rep(ready)}
}
