package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Headers of the wire format (docs/wire-format.md).
const (
	// HeaderMsgID is JetStream's dedup header; jetflow sets it to the run id.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderExpectedLastSubjSeq is JetStream's optimistic-concurrency
	// header: jetflow publishes a run without a record expecting 0 (no
	// message on its subject yet).
	HeaderExpectedLastSubjSeq = "Nats-Expected-Last-Subject-Sequence"
	// HeaderRev is the revision of the run record the message was published
	// for; the worker's state changes are compare-and-swaps on it. Absent on
	// messages from other producers: the worker then creates the record.
	HeaderRev = "Jetflow-Rev"
	// HeaderAttempt is the attempt number, 1-based (default 1).
	HeaderAttempt = "Jetflow-Attempt"
	// HeaderParent is the id of the run that scheduled this one.
	HeaderParent = "Jetflow-Parent"
	// HeaderScheduled is the scheduled time, RFC 3339 with nanoseconds.
	HeaderScheduled = "Jetflow-Scheduled"
	// HeaderCreated is the creation time, RFC 3339 with nanoseconds.
	HeaderCreated = "Jetflow-Created"
	// HeaderMaxAttempts overrides the function's max attempts for this run.
	HeaderMaxAttempts = "Jetflow-Max-Attempts"
	// HeaderTimeout overrides the function's timeout for this run (Go duration).
	HeaderTimeout = "Jetflow-Timeout"
	// HeaderReload tells the worker to read the run record before running:
	// the record holds fields the message does not carry (an on-complete
	// callback, a pool).
	HeaderReload = "Jetflow-Reload"
	// HeaderNew says the run id was generated for this run, so no record of
	// it can exist: the message is the run's pending record, and the worker
	// creates the stored one with its first write instead of reading first.
	HeaderNew = "Jetflow-New"
)

// Config names and shapes everything jetflow stores. The zero value is usable.
type Config struct {
	// Prefix of subjects, stream and bucket names. Default "jetflow". One
	// token of letters, digits, '_' or '-'.
	Prefix string
	// Replicas of every stream and bucket. Default 1; use 3 on a cluster.
	Replicas int
	// Storage of every stream and bucket. Default file storage.
	Storage jetstream.StorageType
	// Retention of terminal run records before JetStream removes them.
	// Default 7 days.
	Retention time.Duration
	// DuplicateWindow of the function stream (publishes with the same
	// Nats-Msg-Id inside it are dropped). Default 2 minutes.
	DuplicateWindow time.Duration
	// PayloadTTL is how long a large payload (PayloadsBucket) is kept at
	// most after it was written: the object store bucket's TTL, set when
	// Provision creates it, a backstop; the scheduler's payload sweep
	// deletes a run's payloads once its record has expired
	// (scheduler.Config.PayloadSweep). Default Retention plus 30 days: a
	// run has 30 days to end, and its record then shows the payload for
	// its retention. Producers
	// refuse a run with a large payload due later than PayloadTTL less
	// Retention.
	PayloadTTL time.Duration
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = "jetflow"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Retention == 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	if c.PayloadTTL == 0 {
		c.PayloadTTL = c.Retention + 30*24*time.Hour
	}
	return c
}

func (c Config) prefix() string {
	if c.Prefix == "" {
		return "jetflow"
	}
	return c.Prefix
}

// FunctionStream is the work-queue stream holding runs ready to start.
func (c Config) FunctionStream() string { return strings.ToUpper(c.prefix()) + "_FN" }

// FunctionSubject is where a run of function fn with id is published:
// <prefix>.fn.<function>.<id>.
func (c Config) FunctionSubject(fn, id string) string {
	return c.prefix() + ".fn." + fn + "." + id
}

// FunctionFilter matches every run of one function.
func (c Config) FunctionFilter(fn string) string { return c.prefix() + ".fn." + fn + ".*" }

// ParseFunctionSubject splits a function subject into function and run id.
func (c Config) ParseFunctionSubject(subject string) (fn, id string, ok bool) {
	rest, found := strings.CutPrefix(subject, c.prefix()+".fn.")
	if !found {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// CancelSubject carries cancel notices to workers (core NATS).
func (c Config) CancelSubject() string { return c.prefix() + ".cancel" }

// RunsBucket is the status table: one record per run, key = run id.
func (c Config) RunsBucket() string { return c.prefix() + "_runs" }

// DelayedBucket holds runs due later, keyed <unix second>.<run id>.
func (c Config) DelayedBucket() string { return c.prefix() + "_delayed" }

// LeasesBucket holds the scheduler's leader lease.
func (c Config) LeasesBucket() string { return c.prefix() + "_leases" }

// FunctionsBucket holds the functions workers serve.
func (c Config) FunctionsBucket() string { return c.prefix() + "_functions" }

// CronsBucket holds cron definitions and their state.
func (c Config) CronsBucket() string { return c.prefix() + "_crons" }

// KVStream is the stream behind a bucket.
func KVStream(bucket string) string { return "KV_" + bucket }

// KVSubject is the subject of key in bucket.
func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// Provision creates or updates every stream and bucket jetflow uses. It is
// idempotent: run it at every start, from any number of processes.
//
// Replicas and storage of streams that exist already are kept when Config
// leaves Replicas zero, so a process started with the zero Config never
// reshapes a cluster's R3 streams.
func Provision(ctx context.Context, js jetstream.JetStream, c Config) error {
	keepShape := c.Replicas == 0
	c = c.WithDefaults()
	if !validPrefix(c.Prefix) {
		return fmt.Errorf("streams: invalid prefix %q: one token of letters, digits, '_' or '-'", c.Prefix)
	}
	shape := func(name string) (int, jetstream.StorageType, error) {
		if !keepShape {
			return c.Replicas, c.Storage, nil
		}
		st, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return c.Replicas, c.Storage, nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("streams: %s: %w", name, err)
		}
		cfg := st.CachedInfo().Config
		return cfg.Replicas, cfg.Storage, nil
	}
	fnReplicas, fnStorage, err := shape(c.FunctionStream())
	if err != nil {
		return err
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: c.FunctionStream(),
		// A function name and a run id at least: a message on
		// <prefix>.fn.<name> alone is refused at publish.
		Subjects:           []string{c.prefix() + ".fn.*.>"},
		Retention:          jetstream.WorkQueuePolicy,
		Storage:            fnStorage,
		Replicas:           fnReplicas,
		Duplicates:         c.DuplicateWindow,
		AllowAtomicPublish: true,
		Description:        "jetflow: runs ready to start, one subject per run",
	})
	if err != nil {
		return fmt.Errorf("streams: function stream: %w", err)
	}
	idx := c
	if keepShape {
		idx.Replicas = 0
	}
	if err := ProvisionIndex(ctx, js, idx); err != nil {
		return err
	}
	atomic := map[string]bool{c.RunsBucket(): true, c.DelayedBucket(): true}
	buckets := []jetstream.KeyValueConfig{
		{Bucket: c.RunsBucket(), Description: "jetflow: run records", LimitMarkerTTL: time.Hour},
		{Bucket: c.DelayedBucket(), Description: "jetflow: runs due later, keyed by due second"},
		{Bucket: c.LeasesBucket(), Description: "jetflow: leader leases", LimitMarkerTTL: time.Minute},
		{Bucket: c.FunctionsBucket(), Description: "jetflow: functions served by workers", LimitMarkerTTL: time.Minute},
		{Bucket: c.CronsBucket(), Description: "jetflow: cron jobs"},
		{Bucket: c.JournalBucket(), Description: "jetflow: workflow journals", LimitMarkerTTL: time.Hour},
	}
	for _, b := range buckets {
		st, err := js.Stream(ctx, KVStream(b.Bucket))
		if err == nil {
			// The bucket exists: leave its config alone (re-creating it
			// through the KV API would switch atomic publish off for a
			// moment and fail other processes' batches), except for what
			// this Config asks to change.
			cfg := st.CachedInfo().Config
			changed := false
			if atomic[b.Bucket] && !cfg.AllowAtomicPublish {
				cfg.AllowAtomicPublish, changed = true, true
			}
			if !keepShape && cfg.Replicas != c.Replicas {
				cfg.Replicas, changed = c.Replicas, true
			}
			if changed {
				if _, err := js.UpdateStream(ctx, cfg); err != nil {
					return fmt.Errorf("streams: bucket %s: %w", b.Bucket, err)
				}
			}
			continue
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("streams: bucket %s: %w", b.Bucket, err)
		}
		b.Replicas, b.Storage = c.Replicas, c.Storage
		if _, err := js.CreateOrUpdateKeyValue(ctx, b); err != nil {
			return fmt.Errorf("streams: bucket %s: %w", b.Bucket, err)
		}
		if atomic[b.Bucket] {
			st, err := js.Stream(ctx, KVStream(b.Bucket))
			if err != nil {
				return fmt.Errorf("streams: bucket %s: %w", b.Bucket, err)
			}
			cfg := st.CachedInfo().Config
			cfg.AllowAtomicPublish = true
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				return fmt.Errorf("streams: bucket %s: allow atomic publish: %w", b.Bucket, err)
			}
		}
	}
	if err := provisionPayloads(ctx, js, c, keepShape); err != nil {
		return err
	}
	return provisionPools(ctx, js, c, keepShape)
}

// provisionPayloads creates the object store bucket of large payloads
// (PayloadsBucket) with c's TTL. One that exists keeps its config, except
// for the replicas this Config asks for.
func provisionPayloads(ctx context.Context, js jetstream.JetStream, c Config, keepShape bool) error {
	st, err := js.Stream(ctx, ObjectStream(c.PayloadsBucket()))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: c.PayloadsBucket(), Description: "jetflow: large payloads, by reference from records and messages",
			TTL: c.PayloadTTL, Storage: c.Storage, Replicas: c.Replicas,
		})
		if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return fmt.Errorf("streams: bucket %s: %w", c.PayloadsBucket(), err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("streams: bucket %s: %w", c.PayloadsBucket(), err)
	}
	if cfg := st.CachedInfo().Config; !keepShape && cfg.Replicas != c.Replicas {
		cfg.Replicas = c.Replicas
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("streams: bucket %s: %w", c.PayloadsBucket(), err)
		}
	}
	return nil
}

// provisionPools creates the pools bucket's stream (PoolsStreamConfig), so
// that users without stream-admin rights can open pools. One that exists
// (made by Provision or by the pool package) keeps its config, except for
// what this Config asks to change and what the pool package needs.
func provisionPools(ctx context.Context, js jetstream.JetStream, c Config, keepShape bool) error {
	want := PoolsStreamConfig(c)
	st, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("streams: bucket %s: %w", c.PoolsBucket(), err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("streams: bucket %s: %w", c.PoolsBucket(), err)
	}
	cfg := st.CachedInfo().Config
	changed := false
	if !cfg.AllowAtomicPublish {
		cfg.AllowAtomicPublish, changed = true, true
	}
	if !cfg.AllowMsgTTL {
		cfg.AllowMsgTTL, changed = true, true
	}
	if !keepShape && cfg.Replicas != c.Replicas {
		cfg.Replicas, changed = c.Replicas, true
	}
	if changed {
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("streams: bucket %s: %w", c.PoolsBucket(), err)
		}
	}
	return nil
}

func validPrefix(p string) bool {
	if p == "" || len(p) > 32 {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !nameByte(c) {
			return false
		}
	}
	return true
}

// nameByte reports whether c may appear in a prefix: a letter, a digit, '_'
// or '-' (as jetflow.IsNameByte).
func nameByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		return true
	}
	return false
}
