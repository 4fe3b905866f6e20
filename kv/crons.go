package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/cronspec"
	"github.com/jetflow-dev/jetflow/internal/sentinel"
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

// ErrBadCronRecord: a stored cron record that cannot be used (written by
// hand or by something else than jetflow): see CheckCronRecord. It also
// matches jetflow.ErrBadRecord. scheduler.ErrBadCronRecord is this error.
var ErrBadCronRecord = sentinel.Kind("jetflow: unreadable cron record", jetflow.ErrBadRecord)

// ValidCronName reports whether name is a cron's name: 1-128 ASCII
// letters, digits, '_' or '-' (scheduler.ValidateCronName says why not).
func ValidCronName(name string) bool {
	if len(name) == 0 || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if !jetflow.IsNameByte(ch) {
			return false
		}
	}
	return true
}

// MaxCatchUp bounds a cron's catch-up and replay counts
// (scheduler.MaxCatchUp is this).
const MaxCatchUp = 10000

// DecodeCronRecord reads the record stored under def.<name> and checks
// that it can be used (CheckCronRecord). Errors: ErrBadCronRecord (JSON
// that is no record, or one CheckCronRecord refuses), an error matching
// cronspec's unknown zone with the record (not necessarily the record's
// fault: another process's zone database may have a zone this one lacks).
func DecodeCronRecord(name string, data []byte) (*CronRecord, error) {
	r := new(CronRecord)
	if err := json.Unmarshal(data, r); err != nil {
		return nil, badCronRecord(name, "%v", err)
	}
	if err := CheckCronRecord(r, name); err != nil {
		if errors.Is(err, cronspec.ErrUnknownZone) {
			return r, err
		}
		return nil, err
	}
	return r, nil
}

// CheckCronRecord refuses a decoded record stored under def.<name> that
// the scheduler cannot use (one written by hand, or by something else
// than jetflow): a name that is no cron name, another cron's name, a
// schedule that does not validate, counts out of range, or an enabled
// cron without a next time and index entry. Errors: ErrBadCronRecord, or
// for a zone this process does not know one matching
// cronspec.ErrUnknownZone.
func CheckCronRecord(r *CronRecord, name string) error {
	switch {
	case !ValidCronName(name):
		return badCronRecord(name, "%.140q is not a cron name (1-128 letters, digits, '_' or '-')", name)
	case r.Name != name:
		return badCronRecord(name, "it holds cron %.140q", r.Name)
	case !inRange(r.CatchUp, 0, MaxCatchUp) || !inRange(r.Replay, 0, MaxCatchUp):
		return badCronRecord(name, "catchUp %d or replay %d out of range 0-%d", r.CatchUp, r.Replay, MaxCatchUp)
	case r.Enabled && (r.Next.Unix() <= 0 || r.Due <= 0):
		return badCronRecord(name, "enabled with next time %s and due second %d", r.Next.Format(time.RFC3339), r.Due)
	}
	if err := cronspec.ValidateCached(r.Spec, 0); err != nil {
		if errors.Is(err, cronspec.ErrUnknownZone) {
			// Not necessarily the record's fault: this process's zoneinfo
			// may lack a zone another process has (an older tzdata). Its
			// evaluation fails and is retried, the cron kept.
			return fmt.Errorf("cron %s: %w", name, err)
		}
		return badCronRecord(name, "%v", err)
	}
	return nil
}

func badCronRecord(name, format string, args ...any) error {
	return fmt.Errorf("%w: %.140q: %s", ErrBadCronRecord, name, fmt.Sprintf(format, args...))
}

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
	// Unreadable says why the stored record cannot be used (see
	// CheckCronRecord: not a record's JSON, another cron's name, a name
	// that is no cron name, a schedule that does not validate, ...),
	// written by hand or by something else than jetflow: the scheduler
	// does not fire it, and only Name (the key's) is set. Pause, Resume
	// and Trigger refuse it (ErrBadCronRecord); Delete removes it.
	Unreadable string `json:"unreadable,omitempty"`
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
	run, err := s.Show(ctx, r.LastRun)
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
// scheduler's Crons.List, the dashboard, the CLI). A record that cannot be
// used (DecodeCronRecord) is listed with its key's name and Unreadable
// saying why. Its cost is proportional to the crons registered. A bucket
// that does not exist (no scheduler ran yet) has no crons.
func (s *Store) Crons(ctx context.Context) ([]*CronInfo, error) {
	bucket := s.cfg.CronsBucket()
	pfx := streams.KVSubject(bucket, CronDefPrefix)
	var recs []*CronRecord
	var bad []*CronInfo
	err := s.scan(ctx, streams.KVStream(bucket), pfx+">", false, func(m jetstream.Msg, _ *jetstream.MsgMetadata) {
		if isMarker(m.Headers()) {
			return // deleted
		}
		name := strings.TrimPrefix(m.Subject(), pfx)
		r, err := DecodeCronRecord(name, m.Data())
		if r == nil {
			bad = append(bad, &CronInfo{Name: name, Unreadable: err.Error()})
			return
		}
		recs = append(recs, r)
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return []*CronInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kv: read crons: %w", err)
	}
	out := make([]*CronInfo, 0, len(recs)+len(bad))
	for _, r := range recs {
		ci, err := s.CronInfo(ctx, r, true)
		if err != nil {
			return out, err
		}
		out = append(out, ci)
	}
	out = append(out, bad...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// inRange reports whether lo <= n <= hi.
func inRange(n, lo, hi int) bool { return n >= lo && n <= hi }
