package streams

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// IndexStream is the run index (docs/runindex.md): entries that name the
// runs in each state and function, written by the scheduler's indexer, and
// its checkpoint of the counts. Optional: without it, listings and counts
// read every record.
func (c Config) IndexStream() string {
	return c.FunctionStream()[:len(c.FunctionStream())-len("_FN")] + "_RUNIDX"
}

// IndexSubject is where the index records that a run entered state with a
// write: <prefix>.idx.<state>.<function>.
func (c Config) IndexSubject(state, fn string) string { return c.prefix() + ".idx." + state + "." + fn }

// IndexFilter matches the entries of state (or every state, "*") and
// function (or every function, ">").
func (c Config) IndexFilter(state, fn string) string {
	if state == "" {
		state = "*"
	}
	if fn == "" {
		fn = ">"
	}
	return c.prefix() + ".idx." + state + "." + fn
}

// IndexEntryPrefix starts the subjects of index entries (and of the
// indexer's term markers): <prefix>.idx.
func (c Config) IndexEntryPrefix() string { return c.prefix() + ".idx." }

// IndexTermSubject holds the markers that start each indexer term
// (internal/runindex): one token after idx, so no entry filter matches it.
func (c Config) IndexTermSubject() string { return c.prefix() + ".idx.term" }

// IndexCheckpointSubject holds the indexer's checkpoint (one message, each
// replacing the last by rollup).
func (c Config) IndexCheckpointSubject() string { return c.prefix() + ".idxcp" }

// IndexDuplicateWindow is the run index stream's duplicate window: the
// indexer never sends an entry twice (each expects the stream's last message
// to be the one before it: internal/runindex), so the window only bounds
// what the server keeps in memory, an entry per record write while it lasts.
const IndexDuplicateWindow = time.Second

// ProvisionIndex creates or updates the run index stream. Provision calls
// it; the scheduler's indexer calls it at the start of each term.
func ProvisionIndex(ctx context.Context, js jetstream.JetStream, c Config) error {
	keepShape := c.Replicas == 0
	c = c.WithDefaults()
	replicas, storage := c.Replicas, c.Storage
	if st, err := js.Stream(ctx, c.IndexStream()); err == nil {
		cfg := st.CachedInfo().Config
		if keepShape {
			replicas, storage = cfg.Replicas, cfg.Storage
		}
		if cfg.AllowDirect && indexShaped(cfg, c.Retention+time.Hour, replicas) {
			return nil
		}
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     c.IndexStream(),
		Subjects: []string{c.prefix() + ".idx.>", c.IndexCheckpointSubject()},
		// An entry outlives the records it can name (a terminal record is
		// kept Retention after its last write).
		MaxAge:      c.Retention + time.Hour,
		Storage:     storage,
		Replicas:    replicas,
		Duplicates:  IndexDuplicateWindow,
		AllowRollup: true,
		AllowDirect: true,
		Description: "jetflow: run index (runs by state and function) and its counts",
	})
	if err != nil {
		return fmt.Errorf("streams: run index stream: %w", err)
	}
	return nil
}

// indexShaped reports whether cfg has the run index stream's max age,
// replicas and duplicate window.
func indexShaped(cfg jetstream.StreamConfig, maxAge time.Duration, replicas int) bool {
	return cfg.MaxAge == maxAge && cfg.Replicas == replicas && cfg.Duplicates == IndexDuplicateWindow
}
