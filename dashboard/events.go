package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// sseWriter writes Server-Sent Events and flushes each one.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *sseWriter) send(event string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// json.Marshal output holds no raw newline: one data line is enough.
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sseWriter) raw(line string) error {
	if _, err := fmt.Fprint(s.w, line); err != nil {
		return err
	}
	return s.rc.Flush()
}

// summary is what a "run" event carries: the record without its
// arguments, result and trace context, which can be large.
func summary(r *jetflow.Run) *jetflow.Run {
	s := *r
	s.Args, s.Result, s.Trace = nil, nil, nil
	return &s
}

// events streams the changes of the runs bucket as Server-Sent Events (see
// the package documentation). One KV watch per connection, stopped when the
// client goes.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := parseFilter(url.Values{"function": q["function"]}, 1)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	runID := q.Get("run")
	if runID != "" {
		if err := jetflow.ValidateRunID(runID); err != nil {
			h.fail(w, r, badRequestf(fmt.Sprintf("run %q: not a valid run id", runID)))
			return
		}
	}
	ctx := r.Context()
	// A stream ends when the connection to NATS is lost: the page shows it
	// is not live and reconnects, and its "ready" (after the server is
	// back) reloads what it shows. Kept open, the stream said nothing of
	// the outage, and the watch's changes resumed only once its consumer
	// had missed heartbeats and been made again.
	nc := engine.Of(h.p).Conn()
	lost := nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	defer nc.RemoveStatusListener(lost)
	if st := nc.Status(); st != nats.CONNECTED {
		writeError(w, http.StatusServiceUnavailable, "the dashboard is not connected to NATS ("+st.String()+")")
		return
	}
	// The watch is in place before "ready" is sent: a client that reloads
	// what it shows on "ready" misses no change.
	var kw jetstream.KeyWatcher
	if runID != "" {
		kw, err = engine.Of(h.p).Store().Runs().Watch(ctx, runID, jetstream.UpdatesOnly())
	} else {
		kw, err = engine.Of(h.p).Store().Runs().WatchAll(ctx, jetstream.UpdatesOnly())
	}
	if err != nil {
		h.fail(w, r, fmt.Errorf("watch runs: %w", err))
		return
	}
	defer func() { _ = kw.Stop() }()

	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a server's WriteTimeout would cut the stream
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: rc}
	if err := s.raw("retry: 2000\n\n"); err != nil {
		return
	}

	withCounts := runID == ""
	var ready any = struct{}{}
	if withCounts {
		c, err := h.countsWithin(ctx, f.Function)
		if err != nil {
			h.log.WarnContext(ctx, "dashboard: counts", "error", err)
		}
		ready = c
	}
	if err := s.send("ready", ready); err != nil {
		return
	}

	heartbeat := time.NewTicker(h.cfg.Heartbeat)
	defer heartbeat.Stop()
	countsTimer := time.NewTimer(time.Hour)
	countsTimer.Stop()
	defer countsTimer.Stop()
	dirty := false
	nextCounts := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lost:
			return
		case <-heartbeat.C:
			if err := s.raw(": ping\n\n"); err != nil {
				return
			}
		case <-countsTimer.C:
			dirty = false
			start := time.Now()
			c, err := h.countsWithin(ctx, f.Function)
			if err != nil {
				h.log.WarnContext(ctx, "dashboard: counts", "error", err)
				nextCounts = time.Now().Add(h.cfg.CountsInterval)
				continue
			}
			// A slow scan (many records kept) is run less often.
			nextCounts = time.Now().Add(max(h.cfg.CountsInterval, 2*time.Since(start)))
			if err := s.send("counts", c); err != nil {
				return
			}
		case e, ok := <-kw.Updates():
			if !ok {
				return // the client reconnects and gets "ready" again
			}
			if e == nil {
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				if err := s.send("removed", map[string]string{"id": e.Key()}); err != nil {
					return
				}
			} else {
				run, err := kv.Decode(e.Value(), e.Revision())
				if err != nil {
					h.log.WarnContext(ctx, "dashboard: undecodable run record", "run_id", e.Key(), "error", err)
					continue
				}
				if f.Function != "" && run.Name != f.Function {
					continue
				}
				if err := s.send("run", summary(run)); err != nil {
					return
				}
			}
			if withCounts && !dirty {
				dirty = true
				countsTimer.Reset(max(0, time.Until(nextCounts)))
			}
		}
	}
}

// countsWithin bounds one scan by the request timeout.
func (h *handler) countsWithin(ctx context.Context, function string) (counts, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.RequestTimeout)
	defer cancel()
	return h.counts(ctx, function)
}
