package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FunctionTTL is how long an entry of the functions bucket lives unless
// its worker writes it again (every 10 s while it runs).
const FunctionTTL = 30 * time.Second

// FunctionInfo is an entry of the functions bucket (<prefix>_functions):
// what a worker says about a function it serves, under the key <worker
// id>.<function>, with a Nats-TTL of FunctionTTL that the worker renews.
// Entries of workers that are gone expire. The worker writes it
// (worker.FunctionInfo is this type); the CLI and the dashboard read it
// with ReadFunctions.
type FunctionInfo struct {
	Name        string       `json:"name"`
	Kind        jetflow.Kind `json:"kind"`
	Worker      string       `json:"worker"`
	Concurrency int          `json:"concurrency"`
	MaxParallel int          `json:"maxParallel"`
	// MaxAttempts: the attempts of a run, first included (1 for an
	// at-most-once function). UnlimitedAttempts: no limit.
	MaxAttempts int           `json:"maxAttempts"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	Seen        time.Time     `json:"seen"`
	// Paused: the worker has stopped taking runs of the function
	// (SetPaused).
	Paused bool `json:"paused,omitempty"`
}

// UnlimitedAttempts is the MaxAttempts of a function whose worker never
// fails a run for want of attempts (the retrier's internal functions, whose
// own budget decides): math.MaxInt32. It stays that number in the
// functions bucket and in JSON (the CLI's `functions list --json`, the
// dashboard's /api/functions); the CLI's table and the dashboard's pages
// show it as "unlimited".
const UnlimitedAttempts = math.MaxInt32

// FunctionMsg is the write of fi into the functions bucket of cfg, with its
// TTL.
func FunctionMsg(cfg streams.Config, fi FunctionInfo) *nats.Msg {
	data, _ := json.Marshal(fi) // plain fields: never fails
	return PutMsg(cfg.WithDefaults().FunctionsBucket(), fi.Worker+"."+fi.Name, data, PutTTL(FunctionTTL))
}

// ReadFunctions reads the functions bucket of cfg: the functions live
// workers serve, one entry per worker and function, sorted by function and
// then worker. fn "" reads every function, else only fn. A bucket that does
// not exist is an error matching jetstream.ErrBucketNotFound.
func ReadFunctions(ctx context.Context, js jetstream.JetStream, cfg streams.Config, fn string) ([]FunctionInfo, error) {
	b, err := js.KeyValue(ctx, cfg.WithDefaults().FunctionsBucket())
	if err != nil {
		return nil, fmt.Errorf("functions bucket: %w", err)
	}
	filter := ">"
	if fn != "" {
		filter = "*." + fn
	}
	w, err := b.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("functions bucket: %w", err)
	}
	defer func() { _ = w.Stop() }()
	out := []FunctionInfo{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				sort.Slice(out, func(i, j int) bool {
					if out[i].Name != out[j].Name {
						return out[i].Name < out[j].Name
					}
					return out[i].Worker < out[j].Worker
				})
				return out, nil
			}
			// Keys beginning with '=' are not a worker's: paused marks,
			// triggers (kv/triggers.go).
			if e.Operation() != jetstream.KeyValuePut || strings.HasPrefix(e.Key(), "=") {
				continue
			}
			var fi FunctionInfo
			if err := json.Unmarshal(e.Value(), &fi); err != nil {
				continue
			}
			wid, name, _ := strings.Cut(e.Key(), ".")
			if fi.Name == "" {
				fi.Name = name
			}
			if jetflow.ValidateName(fi.Name) != nil {
				continue // not a worker's entry: its name names no function
			}
			if fi.Worker == "" {
				fi.Worker = wid
			}
			out = append(out, fi)
		}
	}
}

// A paused function: the key =paused.<function> of the functions bucket
// (no TTL: a pause lasts until it is resumed). Workers watch these keys and
// stop taking runs of a paused function; its runs wait in the stream as
// pending, and resume where they were.
const pausedPrefix = "=paused."

// PausedKey is the key that marks fn paused.
func PausedKey(fn string) string { return pausedPrefix + fn }

// PausedFunction returns the function a key of the functions bucket marks
// paused, and false for any other key.
func PausedFunction(key string) (string, bool) { return strings.CutPrefix(key, pausedPrefix) }

// SetPaused pauses (paused true) or resumes function fn for every worker.
// Errors: jetflow.ErrInvalidName, and the server's.
func SetPaused(ctx context.Context, js jetstream.JetStream, cfg streams.Config, fn string, paused bool) error {
	if err := jetflow.ValidateName(fn); err != nil {
		return err
	}
	b, err := js.KeyValue(ctx, cfg.WithDefaults().FunctionsBucket())
	if err != nil {
		return fmt.Errorf("functions bucket: %w", err)
	}
	if paused {
		_, err = b.Put(ctx, PausedKey(fn), []byte(time.Now().UTC().Format(time.RFC3339Nano)))
	} else {
		err = b.Purge(ctx, PausedKey(fn))
	}
	if err != nil {
		return fmt.Errorf("functions bucket: %w", err)
	}
	return nil
}

// Paused reads which functions are paused.
func Paused(ctx context.Context, js jetstream.JetStream, cfg streams.Config) (map[string]bool, error) {
	b, err := js.KeyValue(ctx, cfg.WithDefaults().FunctionsBucket())
	if err != nil {
		return nil, fmt.Errorf("functions bucket: %w", err)
	}
	var keys []string
	// A user that may not read the bucket is told at once (the listing's
	// consumer is denied), not after the listing's retries.
	err = natsperm.Do(ctx, js.Conn(), func(ctx context.Context) error {
		keys, err = ListKeys(ctx, b, pausedPrefix+">")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("functions bucket: %w", err)
	}
	out := map[string]bool{}
	for _, k := range keys {
		if fn, ok := PausedFunction(k); ok {
			out[fn] = true
		}
	}
	return out, nil
}
