package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/cronspec"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Crons bucket (<prefix>_crons), written by the scheduler package:
//
//	def.<name>                  the cron: definition and state (CronRecord)
//	due.<hour>.<second>.<name>  index entry: the cron is due at <second>
//	                            (unix seconds; <hour> is second/3600)
//	meta.watermark              unix second up to which the leader has read
//	                            the index
//	meta.code                   names of the code-defined crons (JSON list)

// CronDefPrefix is the key prefix of the cron records (def.<name>).
const CronDefPrefix = "def."

// CronOrigin says where a cron was defined.
type CronOrigin string

const (
	// CronOriginCode: defined in code and synced by the scheduler's leader
	// at the start of its term; removed when it leaves the code.
	CronOriginCode CronOrigin = "code"
	// CronOriginRuntime: registered at run time; stays until deleted.
	CronOriginRuntime CronOrigin = "runtime"
)

// CronRecord is the value of def.<name>: a cron's definition and state.
type CronRecord struct {
	Name     string          `json:"name"`
	Origin   CronOrigin      `json:"origin"`
	Spec     cronspec.Spec   `json:"spec"`
	Function string          `json:"function"`
	Kind     jetflow.Kind    `json:"kind,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Overlap  bool            `json:"overlap,omitempty"`
	CatchUp  int             `json:"catchUp,omitempty"`

	Enabled bool `json:"enabled"`
	// Next is the next scheduled fire time (zero while paused).
	Next time.Time `json:"next,omitzero"`
	// Due is the unix second of the index entry the cron is filed under
	// (0: none). It is Next's second, or later while a replay waits.
	Due int64 `json:"due,omitempty"`
	// Replay counts missed fires still to replay (CatchUp policy).
	Replay int `json:"replay,omitempty"`

	LastTime time.Time `json:"lastTime,omitzero"`
	LastRun  string    `json:"lastRun,omitempty"`
	Fired    int64     `json:"fired,omitempty"`
	Skipped  int64     `json:"skipped,omitempty"`
	Missed   int64     `json:"missed,omitempty"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
}

// CronRun is the last run a cron started.
type CronRun struct {
	// Time is the scheduled fire time.
	Time time.Time `json:"time"`
	// RunID is the run's id: "cron-<name>-<unix seconds of Time>".
	RunID string `json:"runId"`
	// State and Error are the run's outcome, read from its record. State
	// is "" when the record has expired.
	State jetflow.State `json:"state,omitempty"`
	Error string        `json:"error,omitempty"`
}

// CronInfo is what a cron is and what it did (scheduler.CronInfo is this
// type).
type CronInfo struct {
	Name     string          `json:"name"`
	Origin   CronOrigin      `json:"origin"`
	Schedule cronspec.Spec   `json:"schedule"`
	Function string          `json:"function"`
	Kind     jetflow.Kind    `json:"kind,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Overlap  bool            `json:"overlap,omitempty"`
	CatchUp  int             `json:"catchUp,omitempty"`
	// Enabled is false while paused.
	Enabled bool `json:"enabled"`
	// Next is the next scheduled fire time; zero while paused.
	Next time.Time `json:"next,omitzero"`
	// Last is the last run started, nil before the first.
	Last *CronRun `json:"last,omitempty"`
	// Fired counts runs started, Skipped fires skipped because the previous
	// run had not ended, Missed fires lost to downtime and not replayed.
	Fired   int64     `json:"fired"`
	Skipped int64     `json:"skipped"`
	Missed  int64     `json:"missed"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// CronInfo turns cron record r into a CronInfo; withOutcome reads the
// outcome of its last run from the runs bucket (an expired record leaves
// it empty).
func (s *Store) CronInfo(ctx context.Context, r *CronRecord, withOutcome bool) (*CronInfo, error) {
	ci := &CronInfo{
		Name: r.Name, Origin: r.Origin, Schedule: r.Spec, Function: r.Function, Kind: r.Kind,
		Args: r.Args, Overlap: r.Overlap, CatchUp: r.CatchUp, Enabled: r.Enabled, Next: r.Next,
		Fired: r.Fired, Skipped: r.Skipped, Missed: r.Missed, Created: r.Created, Updated: r.Updated,
	}
	if r.LastRun == "" {
		return ci, nil
	}
	ci.Last = &CronRun{Time: r.LastTime, RunID: r.LastRun}
	if !withOutcome {
		return ci, nil
	}
	run, err := s.Get(ctx, r.LastRun)
	switch {
	case err == nil:
		ci.Last.State, ci.Last.Error = run.State, run.Error
	case !errors.Is(err, ErrNotFound):
		return nil, err
	}
	return ci, nil
}

// Crons reads every cron of the crons bucket, by name, with the outcome of
// each one's last run: the one reader of the bucket's crons (the
// scheduler's Crons.List, the dashboard, the CLI). Its cost is proportional
// to the crons registered. A bucket that does not exist (no scheduler ran
// yet) has no crons.
func (s *Store) Crons(ctx context.Context) ([]*CronInfo, error) {
	bucket := s.cfg.CronsBucket()
	pfx := streams.KVSubject(bucket, CronDefPrefix)
	var recs []*CronRecord
	err := s.scan(ctx, streams.KVStream(bucket), pfx+">", false, func(m jetstream.Msg, _ *jetstream.MsgMetadata) {
		r := new(CronRecord)
		if isMarker(m.Headers()) || json.Unmarshal(m.Data(), r) != nil {
			return // deleted, or undecodable: skipped, as the evaluator skips it
		}
		recs = append(recs, r)
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return []*CronInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kv: read crons: %w", err)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	out := make([]*CronInfo, 0, len(recs))
	for _, r := range recs {
		ci, err := s.CronInfo(ctx, r, true)
		if err != nil {
			return out, err
		}
		out = append(out, ci)
	}
	return out, nil
}
