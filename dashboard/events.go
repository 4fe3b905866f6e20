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
	function, runID, err := eventsQuery(r)
	if err != nil {
		h.fail(w, r, err)
		return
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
	kw, err := h.watchRuns(ctx, runID)
	if err != nil {
		h.fail(w, r, fmt.Errorf("watch runs: %w", err))
		return
	}
	defer func() {
		if err := kw.Stop(); err != nil {
			h.log.DebugContext(ctx, "dashboard: stop watching runs", "error", err)
		}
	}()
	s, err := h.startEvents(ctx, w)
	if err != nil {
		return
	}
	es := &eventStream{h: h, s: s, function: function, withCounts: runID == "", nextCounts: time.Now()}
	if err := es.ready(ctx); err != nil {
		return
	}
	es.run(ctx, kw, lost)
}

// eventsQuery reads the filter of an events request: a function, or one
// run's id.
func eventsQuery(r *http.Request) (function, runID string, err error) {
	q := r.URL.Query()
	f, err := parseFilter(url.Values{"function": q["function"]}, 1)
	if err != nil {
		return "", "", err
	}
	runID = q.Get("run")
	if runID != "" {
		if err := jetflow.ValidateRunID(runID); err != nil {
			return "", "", badRequestf(fmt.Sprintf("run %q: not a valid run id", runID))
		}
	}
	return f.Function, runID, nil
}

// watchRuns watches the changes of run runID's record, or of every
// record when runID is "".
func (h *handler) watchRuns(ctx context.Context, runID string) (jetstream.KeyWatcher, error) {
	runs := engine.Of(h.p).Store().Runs()
	if runID != "" {
		return runs.Watch(ctx, runID, jetstream.UpdatesOnly())
	}
	return runs.WatchAll(ctx, jetstream.UpdatesOnly())
}

// startEvents answers an events request with a stream of Server-Sent
// Events, and sends its reconnection delay.
func (h *handler) startEvents(ctx context.Context, w http.ResponseWriter) (*sseWriter, error) {
	rc := http.NewResponseController(w)
	// A server's WriteTimeout would cut the stream.
	if err := rc.SetWriteDeadline(time.Time{}); err != nil {
		h.log.DebugContext(ctx, "dashboard: events without a write deadline cleared", "error", err)
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: rc}
	return s, s.raw("retry: 2000\n\n")
}

// eventStream is one client's stream of events: the changes of the runs
// (of function, when set), and, withCounts, the counts after changes, at
// most every CountsInterval.
type eventStream struct {
	h          *handler
	s          *sseWriter
	function   string
	withCounts bool
	// dirty: a change was sent since the last counts; nextCounts is when
	// the next counts may be read.
	dirty       bool
	nextCounts  time.Time
	countsTimer *time.Timer
}

// ready sends "ready", with the counts when the stream has them.
func (es *eventStream) ready(ctx context.Context) error {
	var ready any = struct{}{}
	if es.withCounts {
		c, err := es.h.countsWithin(ctx, es.function)
		if err != nil {
			es.h.log.WarnContext(ctx, "dashboard: counts", "error", err)
		}
		ready = c
	}
	return es.s.send("ready", ready)
}

// run sends the changes of kw, the counts and the heartbeats until the
// client goes, the connection to NATS is lost, or a write fails.
func (es *eventStream) run(ctx context.Context, kw jetstream.KeyWatcher, lost <-chan nats.Status) {
	heartbeat := time.NewTicker(es.h.cfg.Heartbeat)
	defer heartbeat.Stop()
	es.countsTimer = time.NewTimer(time.Hour)
	es.countsTimer.Stop()
	defer es.countsTimer.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-lost:
			return
		case <-heartbeat.C:
			err = es.s.raw(": ping\n\n")
		case <-es.countsTimer.C:
			err = es.counts(ctx)
		case e, ok := <-kw.Updates():
			if !ok {
				return // the client reconnects and gets "ready" again
			}
			err = es.change(ctx, e)
		}
		if err != nil {
			return
		}
	}
}

// counts sends the counts; a slow scan (many records kept) is run less
// often.
func (es *eventStream) counts(ctx context.Context) error {
	cfg := es.h.cfg
	es.dirty = false
	start := time.Now()
	c, err := es.h.countsWithin(ctx, es.function)
	if err != nil {
		es.h.log.WarnContext(ctx, "dashboard: counts", "error", err)
		es.nextCounts = time.Now().Add(cfg.CountsInterval)
		return nil
	}
	es.nextCounts = time.Now().Add(max(cfg.CountsInterval, 2*time.Since(start)))
	return es.s.send("counts", c)
}

// change sends a change of the runs bucket (nil: none) as a "removed" or
// a "run" event, and arms the counts.
func (es *eventStream) change(ctx context.Context, e jetstream.KeyValueEntry) error {
	if e == nil {
		return nil
	}
	if e.Operation() != jetstream.KeyValuePut {
		if err := es.s.send("removed", map[string]string{"id": e.Key()}); err != nil {
			return err
		}
	} else {
		run, err := kv.Decode(e.Value(), e.Revision())
		if err != nil {
			es.h.log.WarnContext(ctx, "dashboard: undecodable run record", "run_id", e.Key(), "error", err)
			return nil
		}
		if es.function != "" && run.Name != es.function {
			return nil
		}
		if err := es.s.send("run", summary(run)); err != nil {
			return err
		}
	}
	if es.withCounts && !es.dirty {
		es.dirty = true
		es.countsTimer.Reset(max(0, time.Until(es.nextCounts)))
	}
	return nil
}

// countsWithin bounds one scan by the request timeout.
func (h *handler) countsWithin(ctx context.Context, function string) (counts, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.RequestTimeout)
	defer cancel()
	return h.counts(ctx, function)
}
