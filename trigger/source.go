package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamRunID is the run id of the message at sequence seq of stream (a
// stream created at epoch, in Unix nanoseconds: StreamEpoch) for trigger
// name: "trg-<name>-<stream>-<epoch>-<seq>" (or its hash when that is not
// a valid run id). The stream's creation time keeps a stream deleted and
// created again, whose sequences start over, from meeting the runs of the
// old one.
func StreamRunID(name, stream string, epoch int64, seq uint64) string {
	return jetflow.DerivedID("trg-" + name + "-" + stream + "-" + strconv.FormatInt(epoch, 10) + "-" + strconv.FormatUint(seq, 10))
}

// StreamEpoch is the epoch of a stream for StreamRunID: its creation time
// in Unix nanoseconds (jetstream.StreamInfo.Created).
func StreamEpoch(created time.Time) int64 { return created.UnixNano() }

// HeaderRunID is the run id of a message whose id header has value for
// trigger name: "trg-<name>-<value>" (or its hash when that is not a valid
// run id), so the same event published twice makes one run.
func HeaderRunID(name, value string) string {
	return jetflow.DerivedID("trg-" + name + "-" + value)
}

// runID derives the run id of message m of trigger def, on a stream
// created at epoch. ErrNoID when def takes ids from a header m lacks.
func runID(def kv.TriggerDef, epoch int64, m jetstream.Msg, md *jetstream.MsgMetadata) (string, error) {
	if def.IDHeader == "" {
		return StreamRunID(def.Name, md.Stream, epoch, md.Sequence.Stream), nil
	}
	v := m.Headers().Get(def.IDHeader)
	if v == "" {
		return "", fmt.Errorf("%w: %s", ErrNoID, def.IDHeader)
	}
	return HeaderRunID(def.Name, v), nil
}

// jsErrCodeStreamSubjectOverlap is the server's error code for a stream
// whose subjects overlap another's (nats-server JSStreamSubjectOverlapErr).
const jsErrCodeStreamSubjectOverlap jetstream.ErrorCode = 10065

// ensureSource creates (or updates) the capture stream of a trigger on
// plain subjects and the trigger's durable consumer, and returns the
// consumer and the epoch of its stream (StreamEpoch).
func ensureSource(ctx context.Context, js jetstream.JetStream, scfg streams.Config, def kv.TriggerDef, ackWait time.Duration) (jetstream.Consumer, int64, error) {
	scfg = scfg.WithDefaults()
	stream := def.SourceStream(scfg)
	var filters []string
	if def.Stream == "" {
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        stream,
			Subjects:    def.Subjects,
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     scfg.Storage,
			Replicas:    scfg.Replicas,
			Duplicates:  scfg.DuplicateWindow,
			Description: "jetflow: messages captured for trigger " + def.Name,
		})
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeStreamSubjectOverlap {
			return nil, 0, fmt.Errorf("%w: capture stream %s: %w", ErrSubjectsTaken, stream, err)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("capture stream %s: %w", stream, err)
		}
	} else {
		filters = def.Subjects
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	if def.Stream != "" {
		if own := ownSource(scfg, st.CachedInfo().Config); own != "" {
			return nil, 0, fmt.Errorf("%w: %s: stream %s copies jetflow's stream %s (its runs would make more runs)", ErrInvalid, def.Name, stream, own)
		}
	}
	deliver := jetstream.DeliverAllPolicy
	if def.DeliverNew {
		deliver = jetstream.DeliverNewPolicy
	}
	cc := jetstream.ConsumerConfig{
		Durable:       kv.TriggerConsumer(scfg, def.Name),
		Description:   "jetflow trigger " + def.Name + " -> " + def.Function,
		DeliverPolicy: deliver,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: def.Window,
	}
	if len(filters) == 1 {
		cc.FilterSubject = filters[0]
	} else {
		cc.FilterSubjects = filters
	}
	c, err := st.CreateOrUpdateConsumer(ctx, cc)
	if err != nil {
		return nil, 0, fmt.Errorf("consumer %s on %s: %w", cc.Durable, stream, err)
	}
	return c, StreamEpoch(st.CachedInfo().Created), nil
}

// queued is the number of runs of function fn waiting or running: the
// messages its worker consumer has not delivered or not had acked, or,
// before any worker served it, the messages its subjects hold.
func queued(ctx context.Context, js jetstream.JetStream, scfg streams.Config, fn string) (int, error) {
	scfg = scfg.WithDefaults()
	c, err := js.Consumer(ctx, scfg.FunctionStream(), worker.ConsumerName(scfg.Prefix, fn))
	if err == nil {
		ci := c.CachedInfo()
		return int(ci.NumPending) + ci.NumAckPending, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, err
	}
	st, err := js.Stream(ctx, scfg.FunctionStream())
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(scfg.FunctionFilter(fn)))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n, nil
}

// maxReason bounds the reason a failed record gives.
const maxReason = 2048

// failRun records the message of it as a failed run with the reason (step
// DeadLetter of the engine: from no record to failed), so that nothing is
// silently dropped. A record that exists already (a redelivery) is not an
// error: existed says so.
func (l *loop) failRun(ctx context.Context, it *item) (existed bool, err error) {
	def := l.def()
	md, err := it.m.Metadata()
	if err != nil {
		return false, err
	}
	subject := it.m.Subject()
	if len(subject) > 512 {
		subject = subject[:512] + "…"
	}
	why := it.reason.Error()
	if len(why) > maxReason {
		why = strings.ToValidUTF8(why[:maxReason], "") + "…"
	}
	now := time.Now().UTC()
	r := engine.DeadLetterRun(&jetflow.Run{
		ID: it.id, Name: def.Function, Kind: jetflow.Kind(def.Kind), Args: recordArgs(it.m.Data(), l.argsLimit()),
		ScheduledTime: md.Timestamp.UTC(), CreationTime: now,
	}, fmt.Sprintf("trigger %s: message %s #%d (subject %s): %s", def.Name, md.Stream, md.Sequence.Stream, subject, why), now)
	_, err = l.r.d.Runs().Write(ctx, engine.DeadLetter, engine.None, r, 0)
	if errors.Is(err, kv.ErrExists) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed record %s: %w", it.id, err)
	}
	l.r.log.Warn("trigger message recorded as failed run", "trigger", def.Name, "run_id", it.id, "reason", why)
	return false, nil
}

// argsLimit is the most bytes of args a record holds.
func (l *loop) argsLimit() int { return kv.ArgsLimit(l.r.js.Conn().MaxPayload()) }

// recordArgs is what a failed record stores of a message body b: b when it
// is JSON that fits, else a summary (size, SHA-256, what fits of it in
// base64).
func recordArgs(b []byte, limit int) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	if len(b) <= limit && json.Valid(b) {
		return b
	}
	return kv.BodySummary(b, limit)
}

// ownSource is the jetflow stream (reservedStream) that a stream of this
// config mirrors or sources in the same account and domain, or "".
func ownSource(scfg streams.Config, cfg jetstream.StreamConfig) string {
	srcs := cfg.Sources
	if cfg.Mirror != nil {
		srcs = append([]*jetstream.StreamSource{cfg.Mirror}, srcs...)
	}
	for _, src := range srcs {
		if sameAccount(src) && reservedStream(scfg, src.Name) {
			return src.Name
		}
	}
	return ""
}

// sameAccount reports whether src (nil: none) is a source in the same
// account and domain.
func sameAccount(src *jetstream.StreamSource) bool {
	return src != nil && src.External == nil && src.Domain == ""
}
