// Package payload keeps large payloads (args, results, event payloads) out
// of records and messages: a payload above Threshold goes to the
// deployment's object store bucket (streams.Config.PayloadsBucket), and the
// record or message holds a reference to it (docs/wire-format.md, "Large
// payloads"). Offload is called where a payload is encoded, Resolve where
// it is decoded; for a small payload each is a size check.
package payload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Key is the only key of a reference's JSON object:
// {"jetflowPayload":{"name":"<object>","size":<bytes>}}.
const Key = "jetflowPayload"

// MaxSize is the largest payload jetflow offloads: 32 MiB. A handler's
// args and a result are held in memory whole.
const MaxSize = 32 << 20

// maxRef bounds what Resolve looks into: a reference is a short object
// (an object name of at most a few hundred bytes).
const maxRef = 1024

// Ref is what a record or message holds in place of a payload.
type Ref struct {
	// Name of the object in the payloads bucket.
	Name string `json:"name"`
	// Size of the payload in bytes.
	Size int `json:"size"`
}

// Threshold is the size above which a payload is offloaded, for a server
// whose max payload is max: a quarter of it (256 KiB at NATS's default of
// 1 MB), so that a record's args and result, each inline, leave it room
// for everything else. 0 when max is not known: nothing is offloaded.
func Threshold(max int64) int {
	if max <= 0 {
		return 0
	}
	return int(max / 4)
}

// Above reports whether b is a payload Offload stores in the bucket.
func Above(b []byte, max int64) bool {
	t := Threshold(max)
	return t > 0 && len(b) > t
}

// Offload returns b unchanged when it is at most the threshold of js's
// server; otherwise it stores b in bucket as "<owner>/<what>/<unique>"
// and returns the reference. owner is the run (or workflow) the payload
// belongs to, what says which of its payloads it is (args, result, step-3,
// event-paid): names for operators, never read back. Each call stores a
// new object, so a payload written for a call that then fails (an id that
// exists) never replaces another run's.
func Offload(ctx context.Context, js jetstream.JetStream, bucket, owner, what string, b []byte) ([]byte, error) {
	if !Above(b, js.Conn().MaxPayload()) {
		return b, nil
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%w: a payload of %d bytes, more than jetflow offloads (%d)", jetflow.ErrBadArgs, len(b), MaxSize)
	}
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("payload: bucket %s: %w", bucket, err)
	}
	name := owner + "/" + what + "/" + nuid.Next()
	if _, err := obs.PutBytes(ctx, name, b); err != nil {
		return nil, fmt.Errorf("payload: put %s: %w", name, err)
	}
	return json.Marshal(map[string]Ref{Key: {Name: name, Size: len(b)}})
}

// Parse returns the reference b holds, if b is one: a JSON object of at
// most 1 KB whose only key is Key, with an object name.
func Parse(b []byte) (Ref, bool) {
	if len(b) > maxRef || !bytes.Contains(b, []byte(`"`+Key+`"`)) {
		return Ref{}, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil || len(m) != 1 || m[Key] == nil {
		return Ref{}, false
	}
	var r Ref
	if json.Unmarshal(m[Key], &r) != nil || r.Name == "" {
		return Ref{}, false
	}
	return r, true
}

// Resolve returns b unchanged when it holds no reference, and otherwise
// the payload it names, read from bucket. An object that is not there (it
// expired, was deleted or never existed), or whose size is not the
// reference's, is an error matching jetflow.ErrPayloadMissing; any other
// error is the server's (worth trying again).
func Resolve(ctx context.Context, js jetstream.JetStream, bucket string, b []byte) ([]byte, error) {
	ref, ok := Parse(b)
	if !ok {
		return b, nil
	}
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("payload: bucket %s: %w", bucket, err)
	}
	v, err := obs.GetBytes(ctx, ref.Name)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return nil, fmt.Errorf("%w: object %q in bucket %s", jetflow.ErrPayloadMissing, ref.Name, bucket)
	case err != nil:
		return nil, fmt.Errorf("payload: get %s: %w", ref.Name, err)
	case len(v) != ref.Size:
		return nil, fmt.Errorf("%w: object %q in bucket %s has %d bytes, the reference says %d", jetflow.ErrPayloadMissing, ref.Name, bucket, len(v), ref.Size)
	}
	return v, nil
}

// Owner is the run (or workflow) that object name belongs to, by the
// names Offload writes: "<owner>/<what>/<unique>" with a valid run id as
// owner. ok is false for another name (an object someone else named):
// the payload sweep leaves it to the bucket's TTL.
func Owner(name string) (owner string, ok bool) {
	parts := strings.Split(name, "/")
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" || jetflow.ValidateRunID(parts[0]) != nil {
		return "", false
	}
	return parts[0], true
}

// The metadata the payload sweep sets on an object once it has seen its
// owner's record ended: when (RFC 3339, the record's completedTime) and
// the owner's parent, if any (a workflow's journal may hold the reference
// to its child's result).
const (
	MetaEnded  = "jetflow-ended"
	MetaParent = "jetflow-parent"
)

// Mark is what the sweep noted on an object: its owner's record ended at
// Ended (zero: never seen ended), its owner's parent Parent.
type Mark struct {
	Ended  time.Time
	Parent string
}

// MarkOf reads the mark in an object's metadata (a zero Mark for none or
// one that does not parse).
func MarkOf(meta map[string]string) Mark {
	t, err := time.Parse(time.RFC3339Nano, meta[MetaEnded])
	if err != nil {
		return Mark{}
	}
	return Mark{Ended: t, Parent: meta[MetaParent]}
}

// Meta is m as object metadata, added to meta (copied).
func (m Mark) Meta(meta map[string]string) map[string]string {
	out := make(map[string]string, len(meta)+2)
	maps.Copy(out, meta)
	out[MetaEnded] = m.Ended.UTC().Format(time.RFC3339Nano)
	if m.Parent != "" {
		out[MetaParent] = m.Parent
	} else {
		delete(out, MetaParent)
	}
	return out
}

// Action is what the payload sweep does with one object.
type Action int

const (
	// Keep the object.
	Keep Action = iota
	// MarkEnded notes on the object that its owner's record has ended.
	MarkEnded
	// Remove deletes the object: its owner's record was seen ended and is
	// gone since.
	Remove
)

// Sweep decides an object's fate from its mark and its owner's record as
// the runs stream's leader answers (rec nil: no record), one rule: an
// object goes when the record of its owner, seen ended before, is gone
// (expired: a terminal record is never written again, it only expires,
// its retention after its end) and its owner's parent has no record
// either. So it is never removed while its run's record exists, nor while
// its parent's does; one whose owner has no record and was never seen
// ended (a run waiting as a message, an object written before its record)
// is kept, and the bucket's TTL is its backstop. A record gone before its
// retention has passed since its end is taken as a read to doubt: kept.
// parentGone is asked only for an ended owner with a parent.
func Sweep(m Mark, rec *jetflow.Run, now time.Time, retention time.Duration, parentGone func(id string) bool) (Action, Mark) {
	switch {
	case rec != nil && !rec.State.Terminal():
		return Keep, m
	case rec != nil:
		seen := Mark{Ended: rec.CompletedTime, Parent: rec.Parent}
		if seen.Ended.IsZero() {
			seen.Ended = now // a terminal record without its time: from now
		}
		if m.Ended.Equal(seen.Ended) && m.Parent == seen.Parent {
			return Keep, m
		}
		return MarkEnded, seen
	case m.Ended.IsZero(), now.Before(m.Ended.Add(retention)):
		return Keep, m
	case m.Parent != "" && !parentGone(m.Parent):
		return Keep, m
	}
	return Remove, m
}
