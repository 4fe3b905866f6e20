package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrNotProvisioned: a stream or bucket jetflow needs is missing, or shaped
// otherwise than Provision makes it. Provision it (streams.Provision, or
// `jetflow provision`) with a user allowed to create streams.
var ErrNotProvisioned = errors.New("streams: not provisioned")

// Check looks up every stream and bucket of c with read-only requests
// ($JS.API.STREAM.INFO) and reports whether Provision(ctx, js, c) would
// change anything: nil when it would not, an error matching
// ErrNotProvisioned that names what is missing or differs when it would.
// A user who may not read stream info gets the server's permissions
// violation at once (errors.Is nats.ErrPermissionViolation), not a
// timeout.
//
// As Provision does, it compares replicas and storage only when
// c.Replicas is set, and the duplicate window only when
// c.DuplicateWindow is set.
func Check(ctx context.Context, js jetstream.JetStream, c Config) error {
	keepShape := c.Replicas == 0
	explicitDups := c.DuplicateWindow != 0
	c = c.WithDefaults()
	if !validPrefix(c.Prefix) {
		return fmt.Errorf("streams: invalid prefix %q: one token of letters, digits, '_' or '-'", c.Prefix)
	}
	var problems []string
	err := natsperm.Do(ctx, js.Conn(), func(ctx context.Context) error {
		info := func(name string) (*jetstream.StreamConfig, error) {
			st, err := js.Stream(ctx, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				problems = append(problems, name+" is missing")
				return nil, nil
			}
			if err != nil {
				return nil, fmt.Errorf("streams: %s: %w", name, err)
			}
			cfg := st.CachedInfo().Config
			return &cfg, nil
		}
		shape := func(name string, cfg *jetstream.StreamConfig) {
			if keepShape {
				return
			}
			if cfg.Replicas != c.Replicas {
				problems = append(problems, fmt.Sprintf("%s has %d replicas, want %d", name, cfg.Replicas, c.Replicas))
			}
		}
		fn := c.FunctionStream()
		cfg, err := info(fn)
		if err != nil {
			return err
		}
		if cfg != nil {
			if want := []string{c.prefix() + ".fn.*.>"}; !slices.Equal(cfg.Subjects, want) {
				problems = append(problems, fmt.Sprintf("%s has subjects %v, want %v", fn, cfg.Subjects, want))
			}
			if cfg.Retention != jetstream.WorkQueuePolicy {
				problems = append(problems, fn+" is not a work queue")
			}
			if !cfg.AllowAtomicPublish {
				problems = append(problems, fn+" does not allow atomic publish")
			}
			if explicitDups && cfg.Duplicates != c.DuplicateWindow {
				problems = append(problems, fmt.Sprintf("%s has a duplicate window of %s, want %s", fn, cfg.Duplicates, c.DuplicateWindow))
			}
			shape(fn, cfg)
			if !keepShape && cfg.Storage != c.Storage {
				problems = append(problems, fmt.Sprintf("%s has %s storage, want %s", fn, cfg.Storage, c.Storage))
			}
		}
		atomic := map[string]bool{KVStream(c.RunsBucket()): true, KVStream(c.DelayedBucket()): true}
		for _, name := range bucketStreams(c) {
			cfg, err := info(name)
			if err != nil {
				return err
			}
			if cfg == nil {
				continue
			}
			if atomic[name] && !cfg.AllowAtomicPublish {
				problems = append(problems, name+" does not allow atomic publish")
			}
			shape(name, cfg)
		}
		pools := KVStream(c.PoolsBucket())
		cfg, err = info(pools)
		if err != nil {
			return err
		}
		if cfg != nil {
			problems = append(problems, poolsProblems(cfg)...)
			shape(pools, cfg)
		}
		return nil
	}, "$JS.")
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrNotProvisioned, strings.Join(problems, "; "))
	}
	return nil
}

// bucketStreams are the streams of c's buckets that Check looks up in one
// loop: the key-value buckets but the pools', and the payloads' object
// store.
func bucketStreams(c Config) []string {
	var names []string
	for _, b := range []string{c.RunsBucket(), c.DelayedBucket(), c.LeasesBucket(), c.FunctionsBucket(), c.CronsBucket(), c.JournalBucket()} {
		names = append(names, KVStream(b))
	}
	return append(names, ObjectStream(c.PayloadsBucket()))
}
