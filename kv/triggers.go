package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Triggers live in the functions bucket (<prefix>_functions), beside what
// workers say about the functions they serve, under keys that begin with
// '=' (no worker id does):
//
//	=trigger.<name>            the definition (TriggerDef), no TTL
//	=tstat.<name>.<runner id>  a runner's counters (TriggerStats), TTL FunctionTTL, renewed
//
// The trigger package writes them; the CLI and the dashboard read them with
// ReadTriggers.
const (
	triggerPrefix = "=trigger."
	tstatPrefix   = "=tstat."
)

// TriggerKey is the key of trigger name's definition.
func TriggerKey(name string) string { return triggerPrefix + name }

// TriggerName returns the trigger a key of the functions bucket defines,
// and false for any other key.
func TriggerName(key string) (string, bool) { return strings.CutPrefix(key, triggerPrefix) }

// TriggerStatsKey is the key of runner's counters of trigger name.
func TriggerStatsKey(name, runner string) string { return tstatPrefix + name + "." + runner }

// Origins of a trigger definition.
const (
	// TriggerOriginCode: declared in a program (trigger.Bind); the processes
	// that declare it run it, with its Go mapping and filter.
	TriggerOriginCode = "code"
	// TriggerOriginRuntime: added at run time (trigger.Add, `jetflow
	// triggers add`); every trigger runner that runs run-time triggers runs
	// it, with the message's JSON as the args.
	TriggerOriginRuntime = "runtime"
)

// TriggerDef is a trigger's definition: which messages start runs of which
// function.
type TriggerDef struct {
	Name string `json:"name"`
	// Function is the function each message runs (for a workflow, its
	// start function "<workflow>.start").
	Function string `json:"function"`
	Kind     string `json:"kind,omitempty"`
	// Workflow names the workflow the function starts, if it is one.
	Workflow string `json:"workflow,omitempty"`
	// Stream is the user's stream the trigger reads; "" for a trigger on
	// plain subjects, captured into the stream CaptureStream names.
	Stream string `json:"stream,omitempty"`
	// Subjects filter Stream's messages, or are the subjects captured.
	Subjects []string `json:"subjects"`
	// IDHeader names the header whose value makes the run id; "" derives
	// it from the stream and sequence.
	IDHeader string `json:"idHeader,omitempty"`
	// Window is the most runs of Function waiting or running before the
	// trigger holds off.
	Window int `json:"window"`
	// DeliverNew: only messages stored after the trigger's consumer was
	// created (else every message the stream holds).
	DeliverNew bool      `json:"deliverNew,omitempty"`
	Paused     bool      `json:"paused,omitempty"`
	Origin     string    `json:"origin"`
	Created    time.Time `json:"created"`
	Updated    time.Time `json:"updated"`
	// Revision is the entry's revision (not stored).
	Revision uint64 `json:"-"`
}

// TriggerConsumer is the durable consumer a trigger reads through:
// <prefix>_trigger_<name>, on the user's stream or on its capture stream.
func TriggerConsumer(cfg streams.Config, name string) string {
	return cfg.WithDefaults().Prefix + "_trigger_" + name
}

// CaptureStream is the stream jetflow manages for a trigger on plain
// subjects: <PREFIX>_TRIGGER_<name>.
func CaptureStream(cfg streams.Config, name string) string {
	return strings.ToUpper(cfg.WithDefaults().Prefix) + "_TRIGGER_" + name
}

// SourceStream is the stream trigger d reads.
func (d *TriggerDef) SourceStream(cfg streams.Config) string {
	if d.Stream != "" {
		return d.Stream
	}
	return CaptureStream(cfg, d.Name)
}

// TriggerStats are one runner's counters of one trigger since the runner
// started.
type TriggerStats struct {
	Trigger string `json:"trigger"`
	Runner  string `json:"runner"`
	// Messages handled (acked): each made a run, found its run, was
	// skipped or made a failed record.
	Messages int64 `json:"messages"`
	// Runs created.
	Runs int64 `json:"runs"`
	// Existing: messages whose run existed already (redeliveries).
	Existing int64 `json:"existing"`
	// Skipped by the filter.
	Skipped int64 `json:"skipped"`
	// Failed: messages recorded as failed runs (mapping, id or args errors).
	Failed int64 `json:"failed"`
	// Held: the runner waits because the function has Window runs waiting
	// or running.
	Held   bool      `json:"held,omitempty"`
	Paused bool      `json:"paused,omitempty"`
	Seen   time.Time `json:"seen"`
}

// TriggerStatsMsg is the write of st into the functions bucket of cfg, with
// its TTL.
func TriggerStatsMsg(cfg streams.Config, st TriggerStats) *nats.Msg {
	data, _ := json.Marshal(st) // plain fields: never fails
	return PutMsg(cfg.WithDefaults().FunctionsBucket(), TriggerStatsKey(st.Trigger, st.Runner), data, PutTTL(FunctionTTL))
}

// TriggerInfo is a trigger as ReadTriggers returns it: its definition, the
// counters of the runners running it now (those gone have expired) and
// what its consumer holds.
type TriggerInfo struct {
	TriggerDef
	Runners []TriggerStats `json:"runners"`
	// Totals sums the live runners' counters (each since it started).
	Totals TriggerStats `json:"totals"`
	// Waiting: messages of the source not yet delivered to the trigger;
	// InFlight: delivered, their runs not yet accepted. -1 when the
	// consumer could not be read (ConsumerError says why).
	Waiting       int64  `json:"waiting"`
	InFlight      int    `json:"inFlight"`
	ConsumerError string `json:"consumerError,omitempty"`
	// Unreadable says why the stored definition cannot be read (not a
	// definition's JSON, or it names another trigger than its key, written
	// by hand): no runner runs it, and only Name (the key's) and Revision
	// are set; trigger.Delete removes it.
	Unreadable string `json:"unreadable,omitempty"`
}

// readTriggerDef is the listing of the definition entry e of trigger name,
// flagged Unreadable when it is not one.
func readTriggerDef(name string, e jetstream.KeyValueEntry) *TriggerInfo {
	var d TriggerDef
	err := json.Unmarshal(e.Value(), &d)
	why := ""
	switch {
	case err != nil:
		why = "definition unreadable: " + err.Error()
	case d.Name != name:
		why = fmt.Sprintf("definition names trigger %.80q, not its key's", d.Name)
	}
	if why != "" {
		d = TriggerDef{Name: name}
	}
	d.Revision = e.Revision()
	return &TriggerInfo{TriggerDef: d, Runners: []TriggerStats{}, Unreadable: why}
}

// State is what a trigger does now: "unreadable" (its definition, see
// Unreadable), "paused", "held" (its window of
// unstarted runs is full), "no runner" (no process runs it) or "running".
func (ti TriggerInfo) State() string {
	switch {
	case ti.Unreadable != "":
		return "unreadable"
	case ti.Paused:
		return "paused"
	case ti.Totals.Held:
		return "held"
	case len(ti.Runners) == 0:
		return "no runner"
	}
	return "running"
}

// sum adds up the counters of the runners.
func (ti *TriggerInfo) sum() TriggerStats {
	var t TriggerStats
	t.Trigger = ti.Name
	for _, r := range ti.Runners {
		t.Messages += r.Messages
		t.Runs += r.Runs
		t.Existing += r.Existing
		t.Skipped += r.Skipped
		t.Failed += r.Failed
		t.Held = t.Held || r.Held
		if r.Seen.After(t.Seen) {
			t.Seen = r.Seen
		}
	}
	return t
}

// ReadTriggers reads every trigger of the functions bucket of cfg, with the
// counters of its live runners and its consumer's counts, sorted by name. A bucket that does not
// exist is an error matching jetstream.ErrBucketNotFound.
func ReadTriggers(ctx context.Context, js jetstream.JetStream, cfg streams.Config) ([]TriggerInfo, error) {
	b, err := js.KeyValue(ctx, cfg.WithDefaults().FunctionsBucket())
	if err != nil {
		return nil, fmt.Errorf("functions bucket: %w", err)
	}
	w, err := b.WatchFiltered(ctx, []string{triggerPrefix + ">", tstatPrefix + ">"}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("functions bucket: %w", err)
	}
	defer func() { _ = w.Stop() }()
	defs := map[string]*TriggerInfo{}
	var stats []TriggerStats
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if ok && e != nil {
				if e.Operation() != jetstream.KeyValuePut {
					continue
				}
				if name, ok := TriggerName(e.Key()); ok {
					defs[name] = readTriggerDef(name, e)
					continue
				}
				var st TriggerStats
				if json.Unmarshal(e.Value(), &st) == nil && st.Trigger != "" {
					stats = append(stats, st)
				}
				continue
			}
			for _, st := range stats {
				if ti := defs[st.Trigger]; ti != nil {
					ti.Runners = append(ti.Runners, st)
				}
			}
			out := make([]TriggerInfo, 0, len(defs))
			for _, ti := range defs {
				sort.Slice(ti.Runners, func(i, j int) bool { return ti.Runners[i].Runner < ti.Runners[j].Runner })
				ti.Totals = ti.sum()
				ti.Waiting, ti.InFlight = -1, -1
				if ti.Unreadable != "" {
					out = append(out, *ti)
					continue
				}
				c, err := js.Consumer(ctx, ti.SourceStream(cfg), TriggerConsumer(cfg, ti.Name))
				if err != nil {
					ti.ConsumerError = err.Error()
				} else {
					ci := c.CachedInfo()
					ti.Waiting, ti.InFlight = int64(ci.NumPending), ci.NumAckPending
				}
				out = append(out, *ti)
			}
			sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
			return out, nil
		}
	}
}
