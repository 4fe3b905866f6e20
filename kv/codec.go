package kv

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/streams"
)

// The record codec. Every state change encodes a record, so this is on the
// hot path: a hand-written encoder producing exactly what encoding/json
// would (same field names and omit rules, RFC 3339 times), without
// reflection or the re-compaction of raw fields. Decoding uses
// encoding/json. TestCodecMatchesEncodingJSON keeps the two in step.

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// EncodeRun returns the JSON of r.
func EncodeRun(r *jetflow.Run) ([]byte, error) {
	bp := bufPool.Get().(*[]byte)
	b := (*bp)[:0]
	b, err := appendRun(b, r)
	out := make([]byte, len(b))
	copy(out, b)
	*bp = b
	bufPool.Put(bp)
	return out, err
}

func appendRun(b []byte, r *jetflow.Run) ([]byte, error) {
	for _, t := range [...]time.Time{r.ScheduledTime, r.CreationTime, r.StartedTime, r.Heartbeat, r.CompletedTime} {
		if !streams.TimeFits(t) {
			return b, fmt.Errorf("time %s: %w", t.UTC().Format(time.RFC3339), errTimeRange)
		}
	}
	b = append(b, `{"id":`...)
	b = appendString(b, r.ID)
	b = append(b, `,"name":`...)
	b = appendString(b, r.Name)
	if r.Kind != "" {
		b = append(b, `,"kind":`...)
		b = appendString(b, string(r.Kind))
	}
	if len(r.Args) > 0 {
		b = append(b, `,"args":`...)
		b = append(b, r.Args...)
	}
	b = append(b, `,"state":`...)
	b = appendString(b, string(r.State))
	b = append(b, `,"scheduledTime":`...)
	b = appendTime(b, r.ScheduledTime)
	b = append(b, `,"creationTime":`...)
	b = appendTime(b, r.CreationTime)
	if !r.StartedTime.IsZero() {
		b = append(b, `,"startedTime":`...)
		b = appendTime(b, r.StartedTime)
	}
	if r.Owner != "" {
		b = append(b, `,"owner":`...)
		b = appendString(b, r.Owner)
	}
	if !r.Heartbeat.IsZero() {
		b = append(b, `,"heartbeat":`...)
		b = appendTime(b, r.Heartbeat)
	}
	if !r.CompletedTime.IsZero() {
		b = append(b, `,"completedTime":`...)
		b = appendTime(b, r.CompletedTime)
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	if r.MaxAttempts != 0 {
		b = append(b, `,"maxAttempts":`...)
		b = strconv.AppendInt(b, int64(r.MaxAttempts), 10)
	}
	if r.Timeout != 0 {
		b = append(b, `,"timeout":`...)
		b = strconv.AppendInt(b, int64(r.Timeout), 10)
	}
	if r.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, r.Error)
	}
	if r.Permanent {
		b = append(b, `,"permanent":true`...)
	}
	if r.Parent != "" {
		b = append(b, `,"parent":`...)
		b = appendString(b, r.Parent)
	}
	if r.HeldBy != "" {
		b = append(b, `,"heldBy":`...)
		b = appendString(b, r.HeldBy)
	}
	var err error
	if len(r.Children) > 0 {
		b = append(b, `,"children":`...)
		if b, err = appendJSON(b, r.Children); err != nil {
			return b, err
		}
	}
	if r.Progress != nil {
		b = append(b, `,"progress":`...)
		if b, err = appendJSON(b, r.Progress); err != nil {
			return b, err
		}
	}
	if len(r.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, r.Result...)
	}
	if r.OnComplete != nil {
		b = append(b, `,"onComplete":`...)
		if b, err = appendJSON(b, r.OnComplete); err != nil {
			return b, err
		}
	}
	if r.Pool != "" {
		b = append(b, `,"pool":`...)
		b = appendString(b, r.Pool)
	}
	if r.Priority != 0 {
		b = append(b, `,"priority":`...)
		b = strconv.AppendInt(b, int64(r.Priority), 10)
	}
	if len(r.Trace) > 0 {
		b = append(b, `,"trace":`...)
		if b, err = appendJSON(b, r.Trace); err != nil {
			return b, err
		}
	}
	if len(r.History) > 0 {
		b = append(b, `,"history":`...)
		if b, err = appendJSON(b, r.History); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

func appendJSON(b []byte, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, j...), nil
}

// errTimeRange: a time a record cannot hold (streams.TimeFits).
var errTimeRange = errors.New("outside years 0 through 9999")

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendString writes s as a JSON string: plain printable ASCII directly,
// anything else through encoding/json (escapes, invalid UTF-8).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s)
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
