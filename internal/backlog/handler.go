package backlog

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// DefaultTarget is the runs per worker the scaling endpoint divides by when
// the request names no target.
const DefaultTarget = 10

// Handler is the scaling endpoint: GET answers the figures as JSON, each
// with desiredWorkers for ?target= runs per worker (default DefaultTarget).
// With ?function=<name> it answers that function's figures alone, at the
// top level, so that KEDA's metrics-api scaler reads
// valueLocation: desiredWorkers (or waiting, with its own target). A
// function without a consumer yet answers zeros. read is Reader.Cached.
func Handler(read func(ctx context.Context) (*Figures, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		target := DefaultTarget
		if v := r.URL.Query().Get("target"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				http.Error(w, "target: a whole number of runs per worker, at least 1", http.StatusBadRequest)
				return
			}
			target = n
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		f, err := read(ctx)
		if f == nil {
			// No figures: an autoscaler must not read zeros and scale to
			// zero on an outage.
			http.Error(w, "backlog: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		g := f.WithTarget(target)
		var body any = g
		if name := r.URL.Query().Get("function"); name != "" {
			fn, ok := g.Function(name)
			if !ok {
				fn = Function{Name: name, Failed: -1}
			}
			body = struct {
				Function
				Target int       `json:"targetPerWorker"`
				At     time.Time `json:"at"`
			}{fn, target, g.At}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(body)
	})
}
