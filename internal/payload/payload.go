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
