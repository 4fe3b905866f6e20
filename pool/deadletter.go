package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// deadFunction names the function of a dead-lettered queue entry that
// names no valid one (as the scheduler's dead letters of delayed entries
// do), so that pages and counts find it.
const deadFunction = "invalid-function"

// maxDeadReason bounds the reason a dead letter gives (it may quote ids
// as long as the entry).
const maxDeadReason = 2048

// deadLetterQueued resolves the queue entry of item id when the pool
// cannot read it (another client wrote it): it records the entry as a
// failed run, the engine's dead letter (id dlq-<pools stream>-<revision>,
// the entry's value as its args, the reason as its error, Pool set), then
// removes the entry from the queue, so that nothing is lost and nothing
// is reported twice. It returns the report, which matches
// jetflow.ErrBadRecord and names the dead letter, or nil when the entry is
// readable or gone.
func (pl *Pool) deadLetterQueued(ctx context.Context, id string) error {
	key := queueKey(pl.name, id)
	e, err := pl.st.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pool: get queue entry %s: %w", id, err)
	}
	q, why := decodeQueued(pl.name, id, e.Value())
	if why == nil {
		return nil
	}
	fn := deadFunction
	if q.Item != nil && jetflow.ValidateName(q.Item.Function) == nil {
		fn = q.Item.Function
	}
	reason := why.Error()
	if len(reason) > maxDeadReason {
		reason = reason[:maxDeadReason] + "…"
	}
	now := pl.now().UTC()
	r := engine.DeadLetterRun(&jetflow.Run{
		ID: engine.DeadLetterID(streams.KVStream(pl.st.bucket), e.Revision()), Name: fn, Kind: jetflow.Retryable,
		Args:          deadArgs(e.Value(), kv.ArgsLimit(pl.st.nc.MaxPayload())),
		ScheduledTime: e.Created().UTC(), CreationTime: e.Created().UTC(), Pool: pl.name,
	}, reason, now)
	// The record first: an entry removed is recorded. A record of that id
	// exists when an earlier call wrote it and did not remove the entry.
	if _, err := engine.Of(pl.p).Runs().Write(ctx, engine.DeadLetter, engine.None, r, 0); err != nil && !errors.Is(err, kv.ErrExists) {
		return fmt.Errorf("%w; recording it as failed run %s: %w", why, r.ID, err)
	}
	if err := pl.st.deleteMsg(ctx, e.Revision()); err != nil {
		return fmt.Errorf("%w; recorded as failed run %s, not removed: %w", why, r.ID, err)
	}
	pl.log.Warn("unreadable pool queue entry recorded as failed run and removed", "pool", pl.name, "key", key, "run_id", r.ID, "reason", reason)
	return fmt.Errorf("%w; recorded as failed run %s and removed from the queue", why, r.ID)
}

// deadArgs is what a dead letter keeps of a queue entry's value: the value
// itself when it is JSON that a record holds, as a string when it is short
// text, otherwise its size, SHA-256 and as much of it as fits (as the
// worker's dead letters of messages).
func deadArgs(b []byte, limit int) json.RawMessage {
	if len(b) <= limit && json.Valid(b) {
		return b
	}
	if len(b) <= limit/8 && utf8.Valid(b) {
		s, _ := json.Marshal(string(b))
		return s
	}
	return kv.BodySummary(b, limit)
}
