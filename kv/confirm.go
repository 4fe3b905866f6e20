package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/sentinel"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The one rule for creates: an id is reported stored, or taken, only on the
// word of the stream's leader.
//
// A create (a record written expecting no revision, a message published
// expecting no message on its subject, a publish carrying a Nats-Msg-Id)
// can be refused as "already there" by a leader that cannot commit: a node
// cut off from its peers, or paused and deposed, judges a retry against its
// own uncommitted first try. That refusal proves nothing. So every refusal
// is settled by a read that only the leader answers: what it finds stored
// stands (this call's earlier try, or another writer's), and where it finds
// nothing the create is made again, until the caller's ctx ends.

// Found is what a leader read finds of a refused create.
type Found int

const (
	// Missing: nothing stored; the refusal came from an uncommitted try.
	Missing Found = iota
	// Ours: this call's earlier try is stored.
	Ours
	// Theirs: another write holds the key.
	Theirs
)

// ErrRefused marks a create the server refused as already there (an
// expected-sequence check, or a duplicate acknowledgement): a create
// function returns an error matching it (or ErrExists, or a wrong-sequence
// API error) for CreateConfirmed to settle.
var ErrRefused = errors.New("kv: create refused as already there")

// ErrUnconfirmed: a create was refused as already there and the leader did
// not hold it before ctx ended. Nothing is known stored; the caller may try
// again (with the same id, it cannot store the run twice).
var ErrUnconfirmed = errors.New("kv: create refused, and the stream's leader does not hold it")

// refused reports a create's refusal as already there.
func refused(err error) bool {
	return errors.Is(err, ErrRefused) || errors.Is(err, ErrExists) || IsWrongSequence(err)
}

// CreateConfirmed makes create until it is stored, or until a refusal is
// confirmed by find, a read from the stream's leader. It returns nil when
// this call's write is stored, an error matching ErrExists when another
// write holds the key, create's own error when it is not a refusal, and
// ErrUnconfirmed (with ctx's error) when ctx ends first.
func CreateConfirmed(ctx context.Context, create func(ctx context.Context) error, find func(ctx context.Context) (Found, error)) error {
	delay := 25 * time.Millisecond
	for {
		err := create(ctx)
		if err == nil || !refused(err) {
			return err
		}
		found, ferr := find(ctx)
		switch {
		case ferr == nil && found == Ours:
			return nil
		case ferr == nil && found == Theirs:
			return fmt.Errorf("%w (%w)", ErrExists, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			if ferr == nil {
				ferr = err
			}
			// The last refusal is named, not wrapped: it must not match
			// ErrExists, which would report the run stored.
			return fmt.Errorf("%w: %w (last: %v)", ErrUnconfirmed, ctx.Err(), ferr)
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// FindRun is a CreateConfirmed find of run id's record on the runs leader:
// ours tells whether the stored record is the one this call writes.
func (s *Store) FindRun(id string, ours func(stored *jetflow.Run) bool) func(ctx context.Context) (Found, error) {
	return func(ctx context.Context) (Found, error) {
		r, _, err := s.Decide(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			return Missing, nil
		case err != nil:
			return Missing, err
		case ours(r):
			return s.confirmed(ctx, streams.KVStream(s.cfg.RunsBucket()), Ours)
		}
		return s.confirmed(ctx, streams.KVStream(s.cfg.RunsBucket()), Theirs)
	}
}

// SameRun tells whether stored is the record of run r as created (same
// name and creation time): a create's own earlier try, not another run of
// that id.
func SameRun(r *jetflow.Run) func(stored *jetflow.Run) bool {
	return func(stored *jetflow.Run) bool {
		return stored.Name == r.Name && stored.CreationTime.Equal(r.CreationTime)
	}
}

// FindQueued is a CreateConfirmed find of a run published without a record
// (its message is its pending record): its message on the function stream's
// leader, or its record on the runs leader (a worker writes the record
// before it acknowledges the message). The run id is generated for this run
// alone, so whatever is found is ours.
func (s *Store) FindQueued(fn, id string) func(ctx context.Context) (Found, error) {
	return func(ctx context.Context) (Found, error) {
		_, err := LastFromLeader(ctx, s.js, s.cfg.FunctionStream(), s.cfg.FunctionSubject(fn, id))
		if errors.Is(err, nats.ErrPermissionViolation) {
			var queued bool
			queued, err = s.Queued(ctx, fn, id)
			if err == nil && queued {
				return s.confirmed(ctx, s.cfg.FunctionStream(), Ours)
			}
		}
		switch {
		case err == nil:
			return s.confirmed(ctx, s.cfg.FunctionStream(), Ours)
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return Missing, err
		}
		_, _, err = s.Decide(ctx, id)
		switch {
		case err == nil:
			return s.confirmed(ctx, streams.KVStream(s.cfg.RunsBucket()), Ours)
		case errors.Is(err, ErrNotFound):
			return Missing, nil
		}
		return Missing, err
	}
}

// Transient reports an error after which the same write may succeed: no
// stream or bucket leader (an election), no responder, a timeout, a
// connection being re-established. Such a write may also have landed with
// its reply lost: whoever writes it again settles a refusal with
// CreateConfirmed (or a leader read of its own).
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		// 10008: JetStream system temporarily unavailable (no leader).
		return api.ErrorCode == 10008 || strings.Contains(api.Description, "temporarily unavailable")
	}
	return sentinel.IsAny(err, nats.ErrNoResponders, jetstream.ErrNoStreamResponse, nats.ErrTimeout,
		context.DeadlineExceeded, nats.ErrConnectionReconnecting, nats.ErrDisconnected)
}

// peerSilence is how long a stream's leader may have gone without hearing
// from a replica and still count it in its quorum: a few of its heartbeats
// (nats-server sends one a second).
const peerSilence = 3 * time.Second

// LeaderHasQuorum reports whether stream's leader hears from a majority of
// its replicas (itself included) now, from the stream info it answers. A
// leader cut off from its peers (a partition that leaves its clients
// connected) still answers reads from its own store, which may hold a
// write it proposed and will lose: a create is confirmed only by a leader
// with a quorum. A single-replica stream always has one. Where the
// connection may not ask (nats.ErrPermissionViolation), it reports true:
// the read stands, as before this check.
func LeaderHasQuorum(ctx context.Context, js jetstream.JetStream, stream string) (bool, error) {
	subj := apiPrefix(js) + "STREAM.INFO." + stream
	ctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	m, err := js.Conn().RequestWithContext(ctx, subj, nil)
	if errors.Is(err, nats.ErrPermissionViolation) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	var info struct {
		Error   *jetstream.APIError `json:"error"`
		Cluster *struct {
			Leader   string `json:"leader"`
			Replicas []struct {
				Offline bool          `json:"offline"`
				Active  time.Duration `json:"active"`
			} `json:"replicas"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return false, fmt.Errorf("%s: %w", subj, err)
	}
	if info.Error != nil {
		return false, info.Error
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) == 0 {
		return true, nil
	}
	heard := 1 // the leader
	for _, r := range info.Cluster.Replicas {
		if !r.Offline && r.Active < peerSilence {
			heard++
		}
	}
	return 2*heard > 1+len(info.Cluster.Replicas), nil
}

// ErrNoQuorum: a leader read found a write, but the leader does not hear
// from a majority of its replicas: what it holds may yet be lost.
var ErrNoQuorum = errors.New("kv: the stream's leader has no quorum")

// confirmed is found, kept only where stream's leader has a quorum.
func (s *Store) confirmed(ctx context.Context, stream string, found Found) (Found, error) {
	if found == Missing {
		return Missing, nil
	}
	ok, err := LeaderHasQuorum(ctx, s.js, stream)
	switch {
	case err != nil:
		return Missing, err
	case !ok:
		return Missing, fmt.Errorf("%s: %w", stream, ErrNoQuorum)
	}
	return found, nil
}
