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
	b = appendStringField(b, `,"kind":`, string(r.Kind))
	b = appendRawField(b, `,"args":`, r.Args)
	b = append(b, `,"state":`...)
	b = appendString(b, string(r.State))
	b = append(b, `,"scheduledTime":`...)
	b = appendTime(b, r.ScheduledTime)
	b = append(b, `,"creationTime":`...)
	b = appendTime(b, r.CreationTime)
	b = appendTimeField(b, `,"startedTime":`, r.StartedTime)
	b = appendStringField(b, `,"owner":`, r.Owner)
	b = appendTimeField(b, `,"heartbeat":`, r.Heartbeat)
	b = appendTimeField(b, `,"completedTime":`, r.CompletedTime)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	b = appendIntField(b, `,"maxAttempts":`, int64(r.MaxAttempts))
	b = appendIntField(b, `,"timeout":`, int64(r.Timeout))
	b = appendStringField(b, `,"error":`, r.Error)
	if r.Permanent {
		b = append(b, `,"permanent":true`...)
	}
	b = appendStringField(b, `,"parent":`, r.Parent)
	b = appendStringField(b, `,"heldBy":`, r.HeldBy)
	var err error
	if len(r.Children) > 0 {
		if b, err = appendJSONField(b, `,"children":`, r.Children); err != nil {
			return b, err
		}
	}
	if r.Progress != nil {
		if b, err = appendJSONField(b, `,"progress":`, r.Progress); err != nil {
			return b, err
		}
	}
	b = appendRawField(b, `,"result":`, r.Result)
	if r.OnComplete != nil {
		if b, err = appendJSONField(b, `,"onComplete":`, r.OnComplete); err != nil {
			return b, err
		}
	}
	b = appendStringField(b, `,"pool":`, r.Pool)
	b = appendIntField(b, `,"priority":`, int64(r.Priority))
	if len(r.Trace) > 0 {
		if b, err = appendJSONField(b, `,"trace":`, r.Trace); err != nil {
			return b, err
		}
	}
	if len(r.History) > 0 {
		if b, err = appendJSONField(b, `,"history":`, r.History); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// appendStringField appends key and v, unless v is empty.
func appendStringField(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return appendString(append(b, key...), v)
}

// appendRawField appends key and the JSON v, unless v is empty.
func appendRawField(b []byte, key string, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return append(append(b, key...), v...)
}

// appendTimeField appends key and t, unless t is zero.
func appendTimeField(b []byte, key string, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	return appendTime(append(b, key...), t)
}

// appendIntField appends key and n, unless n is 0.
func appendIntField(b []byte, key string, n int64) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), n, 10)
}

// appendJSONField appends key and v encoded.
func appendJSONField(b []byte, key string, v any) ([]byte, error) {
	return appendJSON(append(b, key...), v)
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
		if needsEscape(c) {
			j, _ := json.Marshal(s)
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// needsEscape reports whether byte c of a string is not copied as it is by
// appendString: a control or non-ASCII byte, or one encoding/json escapes.
func needsEscape(c byte) bool {
	if c < 0x20 || c >= 0x7f {
		return true
	}
	switch c {
	case '"', '\\', '<', '>', '&':
		return true
	}
	return false
}
