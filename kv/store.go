package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	// ErrNotFound: no record with that key. It is jetflow.ErrNotFound.
	ErrNotFound = jetflow.ErrNotFound
	// ErrExists: a record with that id already exists.
	ErrExists = errors.New("kv: record exists")
	// ErrConflict: the record changed since the revision the writer read
	// (compare-and-swap lost). The newer state stands.
	ErrConflict = errors.New("kv: revision conflict")
	// ErrTerminal: the record is terminal; nothing may change it.
	ErrTerminal = errors.New("kv: run is terminal")
)

const (
	hdrExpectSubjSeq = "Nats-Expected-Last-Subject-Sequence"
	hdrTTL           = "Nats-TTL"
	// HeaderState mirrors the record's state so that header-only scans
	// (the repair sweep) need not decode bodies.
	HeaderState = "Jetflow-State"
)

// Store owns the runs and delayed buckets: key layout, codec and the
// compare-and-swap writes every state change goes through. It does not own
// the connection it is given.
type Store struct {
	cfg     streams.Config
	nc      *nats.Conn
	js      jetstream.JetStream
	runs    jetstream.KeyValue
	delayed jetstream.KeyValue
	runsPfx string
	ttlText string // Nats-TTL of terminal records: the retention
	dstream jetstream.Stream
	fstream jetstream.Stream
	rstream jetstream.Stream
}

// Open binds a Store to provisioned buckets (see streams.Provision).
func Open(ctx context.Context, js jetstream.JetStream, cfg streams.Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	runs, err := js.KeyValue(ctx, cfg.RunsBucket())
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", cfg.RunsBucket(), err)
	}
	delayed, err := js.KeyValue(ctx, cfg.DelayedBucket())
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", cfg.DelayedBucket(), err)
	}
	dstream, err := js.Stream(ctx, streams.KVStream(cfg.DelayedBucket()))
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", cfg.DelayedBucket(), err)
	}
	fstream, err := js.Stream(ctx, cfg.FunctionStream())
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", cfg.FunctionStream(), err)
	}
	rstream, err := js.Stream(ctx, streams.KVStream(cfg.RunsBucket()))
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", cfg.RunsBucket(), err)
	}
	return &Store{
		cfg: cfg, nc: js.Conn(), js: js, runs: runs, delayed: delayed,
		dstream: dstream, fstream: fstream, rstream: rstream,
		runsPfx: streams.KVSubject(cfg.RunsBucket(), ""),
		ttlText: cfg.Retention.String(),
	}, nil
}

// Config is the store's naming configuration, defaults applied.
func (s *Store) Config() streams.Config { return s.cfg }

// JetStream is the JetStream context the store writes through.
func (s *Store) JetStream() jetstream.JetStream { return s.js }

// Runs is the runs bucket.
func (s *Store) Runs() jetstream.KeyValue { return s.runs }

// Delayed is the delayed bucket.
func (s *Store) Delayed() jetstream.KeyValue { return s.delayed }

// Show reads run id's record for display (a status page, the CLI, a
// producer's Get): a direct get, which any replica of the bucket may answer,
// so it may be a moment behind the leader (see the package doc, "Reads").
// Errors: ErrNotFound, jetflow.ErrInvalidRunID, jetflow.ErrBadRecord.
func (s *Store) Show(ctx context.Context, id string) (*jetflow.Run, error) {
	if err := jetflow.ValidateRunID(id); err != nil {
		return nil, err
	}
	rctx, cancel := OneRequest(ctx)
	defer cancel()
	e, err := s.runs.Get(rctx, id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
		}
		return nil, fmt.Errorf("kv: get %s: %w", id, err)
	}
	return Decode(e.Value(), e.Revision())
}

// Lookup reads run id's record for a step that needs it to go on: Show,
// with a "not found" asked again with Decide, since a replica behind its
// leader may lack a record the leader holds (see the package doc,
// "Reads"). Errors as Decide's.
func (s *Store) Lookup(ctx context.Context, id string) (*jetflow.Run, error) {
	r, err := s.Show(ctx, id)
	if errors.Is(err, ErrNotFound) {
		r, _, err = s.Decide(ctx, id)
	}
	return r, err
}

// Decide reads run id's record for a decision: the word of the runs
// stream's leader, which holds every acknowledged write (see the package
// doc, "Reads"). leader is true when the leader answered (a record, or
// ErrNotFound). Where the connection may not ask the leader (the optional
// $JS.API.STREAM.MSG.GET.<runs stream> of docs/permissions.md), the record
// is read by a direct get, as before leader reads existed, and leader is
// false. Where the leader cannot answer now (an election, a timeout), that
// error is returned and the decision waits: nothing is decided on a
// replica's word in its stead.
func (s *Store) Decide(ctx context.Context, id string) (r *jetflow.Run, leader bool, err error) {
	r, err = s.fromLeader(ctx, id)
	if errors.Is(err, nats.ErrPermissionViolation) {
		r, err = s.Show(ctx, id)
		return r, false, err
	}
	answered := err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, jetflow.ErrBadRecord)
	return r, answered, err
}

// fromLeader reads run id's record from the runs stream's leader
// (LastFromLeader), or returns ErrNotFound.
func (s *Store) fromLeader(ctx context.Context, id string) (*jetflow.Run, error) {
	if err := jetflow.ValidateRunID(id); err != nil {
		return nil, err
	}
	m, err := LastFromLeader(ctx, s.js, streams.KVStream(s.cfg.RunsBucket()), s.runsPfx+id)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && isMarker(m.Header):
		return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("kv: get %s from the leader: %w", id, err)
	}
	return Decode(m.Data, m.Sequence)
}

// LastFromLeader reads the last message on subject in stream from the
// stream's leader ($JS.API.STREAM.MSG.GET), not by a direct get that any
// replica may answer. No message is jetstream.ErrMsgNotFound; the server's
// other answers are its *jetstream.APIError (a stream without a leader:
// JSErrCodeClusterNotAvailable). A denied request fails at once, matching
// nats.ErrPermissionViolation, and is not sent again on that connection for
// deniedFor: the caller takes its fallback (a direct get) meanwhile, and
// the server does not log one violation per read. A KV key deleted or
// expired reads as its marker (see IsMarker). It waits leaderWait at most.
func LastFromLeader(ctx context.Context, js jetstream.JetStream, stream, subject string) (*jetstream.RawStreamMsg, error) {
	return fromLeader(ctx, js, stream, struct {
		LastBy string `json:"last_by_subj"`
	}{subject})
}

// NextFromLeader reads the first message of stream at or after sequence
// seq, of any subject, from the stream's leader as LastFromLeader does; no
// such message is jetstream.ErrMsgNotFound. Unlike a consumer or a batched
// direct get, it does not count the stream's pending messages, which on a
// stream that keeps one message per subject (a KV bucket) walks the
// server's index of every subject: its cost is the message's, whatever the
// keys kept.
func NextFromLeader(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	return fromLeader(ctx, js, stream, struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
	}{seq, ">"})
}

// fromLeader sends the message get request r to stream's leader.
func fromLeader(ctx context.Context, js jetstream.JetStream, stream string, r any) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	subj := apiPrefix(js) + "STREAM.MSG.GET." + stream
	nc := js.Conn()
	if err := deniedBefore(nc, subj); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	var m *nats.Msg
	err = natsperm.Do(ctx, nc, func(ctx context.Context) (err error) {
		m, err = nc.RequestWithContext(ctx, subj, req)
		return err
	}, subj)
	if errors.Is(err, nats.ErrPermissionViolation) {
		denied.Store(deniedKey{nc, subj}, deniedAt{time.Now(), err})
	}
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("%s: %w", subj, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, fmt.Errorf("%s: %w", subj, resp.Error)
	case resp.Message == nil:
		return nil, fmt.Errorf("%s: empty answer", subj)
	}
	out := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq,
		Data: resp.Message.Data, Time: resp.Message.Time, Header: nats.Header{}}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return nil, fmt.Errorf("%s: headers: %w", subj, err)
		}
		out.Header = h
	}
	return out, nil
}

// leaderWait bounds a read from a leader: it answers at once, or, while a
// stream elects one, says so at once; only a leader that just died leaves
// a request unanswered.
const leaderWait = 2 * time.Second

// requestWait bounds one request's wait for its answer whatever the
// caller's ctx (nats.go's own bound when ctx has no deadline): a request
// sent just before its server died is never answered, and nats.go waits for
// ctx's deadline. A caller's longer ctx bounds its retries, not one request.
const requestWait = 5 * time.Second

// OneRequest is ctx bounded by requestWait: the context of one request.
func OneRequest(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, requestWait)
}

// deniedFor is how long a denied read from a leader is not asked again on
// one connection.
const deniedFor = 5 * time.Minute

type deniedKey struct {
	nc   *nats.Conn
	subj string
}

type deniedAt struct {
	at  time.Time
	err error
}

var denied sync.Map // deniedKey -> deniedAt

func deniedBefore(nc *nats.Conn, subj string) error {
	v, ok := denied.Load(deniedKey{nc, subj})
	if !ok {
		return nil
	}
	d := v.(deniedAt)
	if time.Since(d.at) > deniedFor || nc.IsClosed() {
		denied.Delete(deniedKey{nc, subj})
		return nil
	}
	return d.err
}

// IsMarker reports a KV delete, purge or TTL-expiry marker.
func IsMarker(h nats.Header) bool { return isMarker(h) }

// apiPrefix is the JetStream API prefix js sends its requests with.
// APIPrefix is the JetStream API prefix of js's requests ("$JS.API." by
// default).
func APIPrefix(js jetstream.JetStream) string { return apiPrefix(js) }

func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// Decode reads a record body. A body that is no record jetflow wrote (its
// JSON or a time does not parse, or it names no known state) is
// jetflow.ErrBadRecord.
func Decode(data []byte, rev uint64) (*jetflow.Run, error) {
	r := new(jetflow.Run)
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("%w (revision %d): %v", jetflow.ErrBadRecord, rev, err)
	}
	if !r.State.Valid() {
		return nil, fmt.Errorf("%w (revision %d): state %.64q", jetflow.ErrBadRecord, rev, r.State)
	}
	r.Revision = rev
	return r, nil
}

// RecordMsg builds the raw KV write of r, conditional on the key's last
// revision being expect (0: the key must not exist). Terminal records carry
// a Nats-TTL of the retention period, so JetStream itself removes them.
//
// from is the state of the record at revision expect (None, "", for a
// create): with expect it is carried in the Jetflow-From and Jetflow-Prev
// headers, so that a reader of the runs stream (the run index) knows what a
// write replaced without reading the replaced revision.
func (s *Store) RecordMsg(r *jetflow.Run, expect uint64, from jetflow.State) (*nats.Msg, error) {
	data, err := EncodeRun(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", jetflow.ErrBadArgs, err)
	}
	// (No server takes less than 8 KB a message: the connection, whose
	// lock every publish takes, is asked only about larger records.)
	if len(data) > 8192-recordHeaderRoom {
		data, err = s.fit(r, data)
		if err != nil {
			return nil, err
		}
	}
	// Every run writes a record or two: the header values share one backing
	// array, and the TTL's text is made once (PutMsg's options would
	// allocate each).
	h := make(nats.Header, 8)
	vals := make([]string, 0, 8)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	exp := strconv.FormatUint(expect, 10)
	set(hdrExpectSubjSeq, exp)
	if r.State.Terminal() {
		set(hdrTTL, s.ttlText)
	}
	set(HeaderState, string(r.State))
	set(HeaderFunction, r.Name)
	set(HeaderDue, strconv.FormatInt(r.ScheduledTime.UnixMilli(), 10))
	if from != "" {
		set(HeaderFrom, string(from))
	}
	if expect != 0 {
		set(HeaderPrev, exp)
	}
	if r.State.Terminal() && r.OnComplete != nil {
		set(HeaderNotify, strconv.FormatInt(r.CompletedTime.UnixMilli(), 10))
	}
	return &nats.Msg{Subject: s.runsPfx + r.ID, Header: h, Data: data}, nil
}

// Create writes a new record; ErrExists when the id is taken.
//
// A key whose record expired (or was deleted) still has a marker for a
// while; like the KV API's Create, Create then writes over the marker.
func (s *Store) Create(ctx context.Context, r *jetflow.Run) (uint64, error) {
	rev, err := s.Write(ctx, r, 0, "")
	if !errors.Is(err, ErrExists) {
		return rev, err
	}
	rctx, cancel := OneRequest(ctx)
	defer cancel()
	last, gerr := s.rstream.GetLastMsgForSubject(rctx, s.runsPfx+r.ID)
	if gerr != nil || !isMarker(last.Header) {
		return 0, err
	}
	rev, werr := s.Write(ctx, r, last.Sequence, "")
	if errors.Is(werr, ErrConflict) {
		return 0, err // someone created it meanwhile
	}
	return rev, werr
}

// isMarker reports a KV delete, purge or TTL-expiry marker.
func isMarker(h nats.Header) bool {
	return h.Get("KV-Operation") != "" || h.Get("Nats-Marker-Reason") != ""
}

// Write stores r if the record's revision is still expect (0 = create),
// whose state there is from (see RecordMsg). It returns the new revision,
// ErrExists (expect 0, key present) or ErrConflict (someone wrote first).
func (s *Store) Write(ctx context.Context, r *jetflow.Run, expect uint64, from jetflow.State) (uint64, error) {
	m, err := s.RecordMsg(r, expect, from)
	if err != nil {
		return 0, err
	}
	rctx, cancel := OneRequest(ctx)
	defer cancel()
	ack, err := s.js.PublishMsg(rctx, m)
	if err != nil {
		return 0, s.WriteErr(r.ID, expect, err)
	}
	r.Revision = ack.Sequence
	return ack.Sequence, nil
}

// WriteErr maps a failed record write to ErrExists or ErrConflict.
func (s *Store) WriteErr(id string, expect uint64, err error) error {
	if IsWrongSequence(err) {
		if expect == 0 {
			return fmt.Errorf("run %s: %w", id, ErrExists)
		}
		return fmt.Errorf("run %s at revision %d: %w", id, expect, ErrConflict)
	}
	return fmt.Errorf("kv: write run %s: %w", id, err)
}

// IsWrongSequence reports a failed expected-sequence check.
func IsWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}

// Transition reads run id and applies change until it succeeds or the run is
// terminal. change returns false to leave the record as it is. It returns the
// record as last written or read, and ErrTerminal when the run had already
// ended before change could apply.
func (s *Store) Transition(ctx context.Context, id string, change func(r *jetflow.Run) bool) (*jetflow.Run, error) {
	// The first read is a Show; an answer that would end the call without
	// a write, or a conflict, is read again with Decide (the package doc,
	// "Reads").
	leader := false
	for {
		var r *jetflow.Run
		var err error
		if leader {
			r, _, err = s.Decide(ctx, id)
		} else {
			r, err = s.Show(ctx, id)
		}
		if errors.Is(err, ErrNotFound) && !leader {
			leader = true
			continue
		}
		if err != nil {
			return nil, err
		}
		if r.State.Terminal() {
			return r, fmt.Errorf("run %s is %s: %w", id, r.State, ErrTerminal)
		}
		from := r.State
		if !change(r) {
			if !leader {
				leader = true
				continue
			}
			return r, nil
		}
		_, err = s.Write(ctx, r, r.Revision, from)
		if errors.Is(err, ErrConflict) {
			leader = true
			continue
		}
		return r, err
	}
}

// DelayedKey is the key of a delayed entry: <due unix second>.<run id>.
func DelayedKey(due time.Time, id string) string {
	return strconv.FormatInt(due.Unix(), 10) + "." + id
}

// ParseDelayedKey splits a delayed key.
func ParseDelayedKey(key string) (sec int64, id string, ok bool) {
	a, b, found := strings.Cut(key, ".")
	if !found {
		return 0, "", false
	}
	n, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return n, b, true
}

// Delayed is an entry of the delayed bucket: a run due at Due.
type Delayed struct {
	streams.Envelope
	Due time.Time `json:"due"`
}

// DelayedMsg builds the write of a delayed entry.
func (s *Store) DelayedMsg(d Delayed) (*nats.Msg, error) {
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", jetflow.ErrBadArgs, err)
	}
	return PutMsg(s.cfg.DelayedBucket(), DelayedKey(d.Due, d.ID), data), nil
}

// PutDelayed stores a delayed entry and returns its revision.
func (s *Store) PutDelayed(ctx context.Context, d Delayed) (uint64, error) {
	m, err := s.DelayedMsg(d)
	if err != nil {
		return 0, err
	}
	rctx, cancel := OneRequest(ctx)
	defer cancel()
	ack, err := s.js.PublishMsg(rctx, m)
	if err != nil {
		return 0, fmt.Errorf("kv: put delayed %s: %w", d.ID, err)
	}
	return ack.Sequence, nil
}

// DecodeDelayed reads a delayed entry.
func DecodeDelayed(data []byte) (Delayed, error) {
	var d Delayed
	if err := json.Unmarshal(data, &d); err != nil {
		return d, fmt.Errorf("kv: decode delayed entry: %w", err)
	}
	return d, nil
}

// RemoveDelayed removes the delayed entry key up to revision rev (a newer
// entry under the same key stays). An entry already gone is not an error.
func (s *Store) RemoveDelayed(ctx context.Context, key string, rev uint64) error {
	// KV streams deny message deletes; a subject purge below rev+1 removes
	// the entry without a marker and keeps a newer entry of the same key.
	rctx, cancel := OneRequest(ctx)
	defer cancel()
	err := s.dstream.Purge(rctx, jetstream.WithPurgeSubject(streams.KVSubject(s.cfg.DelayedBucket(), key)),
		jetstream.WithPurgeSequence(rev+1))
	if err != nil {
		return fmt.Errorf("kv: remove delayed entry %s: %w", key, err)
	}
	return nil
}

// ReadDelayed visits, with their values, the delayed entries due in the
// seconds secs (every entry when secs is nil). The server finds a second's
// entries in its subject index, so reading a few seconds costs in
// proportion to the entries they hold, not to every entry waiting. Each
// second is read through an ordered consumer of its own: one consumer
// filtering many seconds costs the server in proportion to the whole
// bucket (measured: 9 ms for 100 seconds of a bucket of 100,000 entries,
// against 0.1 ms for one second, however large the bucket; reading
// seconds in parallel was slower still). An entry removed while they read
// may be visited or not.
func (s *Store) ReadDelayed(ctx context.Context, secs []int64, visit func(key string, rev uint64, data []byte)) error {
	pfx := streams.KVSubject(s.cfg.DelayedBucket(), "")
	if secs == nil {
		// The whole bucket (the scheduler reads only its keys, with
		// ScanDelayedKeys): while it reads, runs are dispatched and their
		// entries removed, so its last revision moves on; the seconds near
		// now are read fresh.
		return s.readDelayed(ctx, pfx+">", pfx, false, visit)
	}
	// Many seconds (a term's start): if the leader cannot answer now (an
	// election), each second is read once rather than waiting on it for
	// each of them, and is reported stale: what a replica answered is
	// visited, and the second is read again until its leader confirms it.
	fresh, denied := true, false
	if len(secs) > 1 {
		// Any answer from the leader will do. Not the last message under
		// pfx+">": the server finds that by walking its index of every key
		// (60 ms of a core at a million entries, under the stream's lock,
		// at every term's start).
		_, err := NextFromLeader(ctx, s.js, streams.KVStream(s.cfg.DelayedBucket()), 1)
		fresh = err == nil || errors.Is(err, jetstream.ErrMsgNotFound)
		denied = errors.Is(err, nats.ErrPermissionViolation)
	}
	var stale []int64
	for _, sec := range secs {
		err := s.readDelayed(ctx, pfx+strconv.FormatInt(sec, 10)+".*", pfx, fresh, visit)
		if err == nil && !fresh && !denied {
			err = ErrStaleRead
		}
		if errors.Is(err, ErrStaleRead) {
			stale = append(stale, sec)
			continue
		}
		if err != nil {
			return err
		}
	}
	if len(stale) > 0 {
		return &StaleSeconds{Secs: stale}
	}
	return nil
}

// StaleSeconds is ReadDelayed's error when the reads of some seconds stayed
// behind the stream's leader: the other seconds were read, these are to be
// read again. It matches ErrStaleRead.
type StaleSeconds struct{ Secs []int64 }

func (e *StaleSeconds) Error() string {
	return fmt.Sprintf("%v: %d seconds of delayed entries, the first %d", ErrStaleRead, len(e.Secs), e.Secs[0])
}

func (e *StaleSeconds) Unwrap() error { return ErrStaleRead }

// delayedQuiet is how long a read of delayed entries waits for the next
// one it was told of before it takes it as removed meanwhile.
const delayedQuiet = 2 * time.Second

// ReadCaughtUp runs read, a read through a consumer of what stream holds
// under filter that returns the highest revision it saw (markers
// included), until that revision is at least the last one the stream's
// leader has under filter. A consumer may be placed on a replica behind the
// leader (a moment behind, or more after a restart), and a read there
// misses what was written last. The leader is asked before each try (a
// purge, which leaves no marker, lowers its answer); after tries reads
// wait apart that stayed behind, the error matches ErrStaleRead. Where the
// leader cannot be asked (no permission, no leader) read runs once. read
// starts afresh on each call; it is told the leader's last revision under
// filter (want, 0 when there is none) when the leader said (known), so
// that it may stop once it has seen want, or not read at all when the
// leader holds nothing under filter.
func ReadCaughtUp(ctx context.Context, js jetstream.JetStream, stream, filter string, tries int, wait time.Duration, read func(want uint64, known bool) (uint64, error)) error {
	for try := 1; ; try++ {
		var want uint64
		m, err := LastFromLeader(ctx, js, stream, filter)
		known := err == nil || errors.Is(err, jetstream.ErrMsgNotFound)
		if err == nil {
			want = m.Sequence
		}
		seen, err := read(want, known)
		if err != nil || seen >= want {
			return err
		}
		if try >= tries {
			return fmt.Errorf("%w: %s read to revision %d, the leader has %d", ErrStaleRead, filter, seen, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// ErrStaleRead: every read came from a replica behind the stream's leader.
var ErrStaleRead = errors.New("kv: read behind the stream's leader")

// A second of delayed entries is read until it holds the leader's last
// revision (ReadCaughtUp): an entry written just before would otherwise be
// left to the repair sweep. A second the leader holds nothing of costs that
// one request. The read of the whole bucket (fresh false), during which
// entries come and go, is made once.
func (s *Store) readDelayed(ctx context.Context, filter, pfx string, fresh bool, visit func(key string, rev uint64, data []byte)) error {
	var got []delayedEntry
	read := func(uint64, bool) (uint64, error) {
		got = got[:0]
		return s.readDelayedOnce(ctx, filter, func(m jetstream.Msg, seq uint64) {
			if !isMarker(m.Headers()) && strings.HasPrefix(m.Subject(), pfx) {
				got = append(got, delayedEntry{m.Subject()[len(pfx):], seq, m.Data()})
			}
		})
	}
	var err error
	confirmed := true
	if fresh {
		stream := streams.KVStream(s.cfg.DelayedBucket())
		_, lerr := LastFromLeader(ctx, s.js, stream, filter)
		if errors.Is(lerr, jetstream.ErrMsgNotFound) {
			// Nothing under filter on the leader: one request, not a
			// consumer. The reader hears of what is written from now on
			// through its watch (the scheduler's starts before it reads).
			return nil
		}
		denied := errors.Is(lerr, nats.ErrPermissionViolation)
		err = ReadCaughtUp(ctx, s.js, stream, filter, 21, 50*time.Millisecond, func(want uint64, known bool) (uint64, error) {
			// A read the leader could not vouch for (an election, a
			// partition) may come from a replica behind it.
			confirmed = known || denied
			return read(want, known)
		})
	} else {
		_, err = read(0, false)
	}
	if err != nil {
		return err
	}
	for _, e := range got {
		visit(e.key, e.rev, e.data)
	}
	if !confirmed {
		return fmt.Errorf("%w: %s read while its leader could not say what it holds", ErrStaleRead, filter)
	}
	return nil
}

type delayedEntry struct {
	key  string
	rev  uint64
	data []byte
}

// consumerCreateWait bounds the creation of a delayed read's consumer.
const consumerCreateWait = 3 * time.Second

// readDelayedOnce reads the last message of each subject under filter
// (markers included) and returns the highest revision it saw.
func (s *Store) readDelayedOnce(ctx context.Context, filter string, visit func(m jetstream.Msg, seq uint64)) (uint64, error) {
	// The consumer's creation gets consumerCreateWait: after a node dies, a
	// request sent while the cluster could not create consumers may go
	// unanswered for the client's whole timeout (14 s seen in the fault
	// suite) where one sent again a moment later is answered. The tick
	// reads again 200 ms later.
	cctx, cancel := context.WithTimeout(ctx, consumerCreateWait)
	c, err := s.dstream.OrderedConsumer(cctx, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{filter},
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		InactiveThreshold: 5 * time.Second,
	})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("kv: read delayed entries: %w", err)
	}
	ci := c.CachedInfo()
	if ci != nil {
		// Removed at once rather than after its inactive threshold: a
		// scheduler reads a second or more every tick.
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.js.DeleteConsumer(dctx, s.dstream.CachedInfo().Config.Name, ci.Name)
			cancel()
		}()
	}
	if ci != nil && ci.NumPending == 0 {
		return 0, nil
	}
	it, err := c.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return 0, fmt.Errorf("kv: read delayed entries: %w", err)
	}
	defer it.Stop()
	var seen uint64
	for {
		nctx, cancel := context.WithTimeout(ctx, delayedQuiet)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return seen, nil // the rest was removed meanwhile
			}
			return 0, fmt.Errorf("kv: read delayed entries: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			return 0, fmt.Errorf("kv: read delayed entries: %w", err)
		}
		seen = max(seen, md.Sequence.Stream)
		visit(m, md.Sequence.Stream)
		if md.NumPending == 0 {
			return seen, nil
		}
	}
}

// FindDelayed finds the delayed entry of run id due at due; ok is false when
// there is none.
func (s *Store) FindDelayed(ctx context.Context, due time.Time, id string) (rev uint64, ok bool, err error) {
	e, err := s.delayed.Get(ctx, DelayedKey(due, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return e.Revision(), true, nil
}

// Queued reports whether a message for run id of function fn waits in the
// function stream.
func (s *Store) Queued(ctx context.Context, fn, id string) (bool, error) {
	_, err := s.fstream.GetLastMsgForSubject(ctx, s.cfg.FunctionSubject(fn, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Unqueue removes the waiting message of run id, if any.
func (s *Store) Unqueue(ctx context.Context, fn, id string) error {
	err := s.fstream.Purge(ctx, jetstream.WithPurgeSubject(s.cfg.FunctionSubject(fn, id)))
	if err != nil {
		return fmt.Errorf("kv: unqueue %s: %w", id, err)
	}
	return nil
}

// Header is what a header-only scan of the runs bucket sees of a record.
type Header struct {
	ID       string
	State    jetflow.State
	Function string
	Due      time.Time
	Revision uint64
	// Notify is the completion time of a terminal record with an
	// on-complete callback (zero otherwise).
	Notify time.Time
}

// Headers that mirror record fields for header-only scans.
const (
	HeaderFunction = "Jetflow-Function"
	HeaderDue      = "Jetflow-Due"
	// HeaderNotify marks a terminal record with an on-complete callback; its
	// value is the completion time in Unix milliseconds.
	HeaderNotify = "Jetflow-Notify"
	// HeaderFrom is the state of the record this write replaced (absent on
	// a create), and HeaderPrev that record's revision (absent on a create
	// from nothing): the run index counts state changes from them.
	HeaderFrom = "Jetflow-From"
	HeaderPrev = "Jetflow-Prev"
)

// ScanDelayedKeys visits the key and revision of every delayed entry,
// reading headers only (a key is its subject): the whole bucket, one
// message each, without their values. visit may block: the read goes at
// its pace. An entry removed meanwhile may be visited or not.
func (s *Store) ScanDelayedKeys(ctx context.Context, visit func(key string, rev uint64)) error {
	pfx := streams.KVSubject(s.cfg.DelayedBucket(), "")
	return s.scan(ctx, streams.KVStream(s.cfg.DelayedBucket()), pfx+">", true, func(m jetstream.Msg, md *jetstream.MsgMetadata) {
		if !isMarker(m.Headers()) && strings.HasPrefix(m.Subject(), pfx) {
			visit(m.Subject()[len(pfx):], md.Sequence.Stream)
		}
	})
}

// Scan visits the latest record of every run, reading headers only. Its cost
// is proportional to the records kept (terminal ones until their retention
// ends); it serves List and the repair sweep, never the hot path.
func (s *Store) Scan(ctx context.Context, visit func(Header)) error {
	return s.scan(ctx, streams.KVStream(s.cfg.RunsBucket()), s.runsPfx+">", true, func(m jetstream.Msg, md *jetstream.MsgMetadata) {
		h := m.Headers()
		if h.Get("KV-Operation") != "" || h.Get("Nats-Marker-Reason") != "" {
			return
		}
		visit(Header{
			ID:       m.Subject()[len(s.runsPfx):],
			State:    jetflow.State(h.Get(HeaderState)),
			Function: h.Get(HeaderFunction),
			Due:      parseMillis(h.Get(HeaderDue)),
			Notify:   parseMillis(h.Get(HeaderNotify)),
			Revision: md.Sequence.Stream,
		})
	})
}

// ScanQueued visits the function and run id of every message waiting in the
// function stream (of function fn, or of all functions when fn is ""),
// reading subjects only. A run published without a record (Enqueue's
// direct runs, other producers) is known only by its message until a
// worker takes it.
func (s *Store) ScanQueued(ctx context.Context, fn string, visit func(fn, id string)) error {
	filter := s.cfg.Prefix + ".fn.>"
	if fn != "" {
		filter = s.cfg.FunctionFilter(fn)
	}
	// A work-queue stream allows no ordered consumer: the stream's subject
	// counts (server-paged) name the waiting runs.
	info, err := s.fstream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("kv: queued runs: %w", err)
	}
	for subj, n := range info.State.Subjects {
		if n == 0 {
			continue
		}
		if f, id, ok := s.cfg.ParseFunctionSubject(subj); ok {
			visit(f, id)
		}
	}
	return nil
}

// scanQuiet is how long a scan waits for its next message.
var scanQuiet = 10 * time.Second

// scan visits the last message of each subject of stream on filter (its
// headers only if headersOnly), with one ordered consumer. It visits them
// all or returns an error (ErrFetchStalled when the consumer stopped
// delivering with messages pending).
func (s *Store) scan(ctx context.Context, stream, filter string, headersOnly bool, visit func(jetstream.Msg, *jetstream.MsgMetadata)) error {
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	if st.CachedInfo().State.Msgs == 0 {
		return nil
	}
	// One consumer for the whole scan (re-creating it per page would make
	// the server recount every subject each time), removed at the end.
	occ := jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{filter},
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly:       headersOnly,
		InactiveThreshold: 5 * time.Second,
	}
	if cfg := st.CachedInfo().Config; WholeStream(cfg, filter) && cfg.MaxMsgsPerSubject == 1 {
		// Each message is the last of its subject: every one is read.
		occ.FilterSubjects, occ.DeliverPolicy = nil, jetstream.DeliverAllPolicy
	}
	c, err := st.OrderedConsumer(ctx, occ)
	if err != nil {
		return err
	}
	if ci := c.CachedInfo(); ci != nil && ci.NumPending == 0 {
		return nil // nothing matches filter
	}
	it, err := c.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		// Waiting in Next with a deadline, on this goroutine: a goroutine
		// and a timer a message cost a scan of a million records more
		// than the read.
		nctx, cancel := context.WithTimeout(ctx, scanQuiet)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			// Nothing more arrives: the end, if the messages were removed
			// meanwhile; a stalled consumer or server otherwise, and the
			// scan so far is not the whole.
			it.Stop()
			info, err := c.Info(ctx)
			if err == nil && info.NumPending == 0 {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%w: scan of %s: nothing arrived for %s, and its consumer cannot say what is left: %w", ErrFetchStalled, stream, scanQuiet, err)
			}
			return fmt.Errorf("%w: scan of %s: nothing arrived for %s with %d messages pending", ErrFetchStalled, stream, scanQuiet, info.NumPending)
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		visit(m, md)
		if md.NumPending == 0 {
			return nil
		}
	}
}

// WholeStream reports whether filter names every subject stream cfg takes
// (a KV bucket's "$KV.<bucket>.>"), so that a consumer of it may go
// unfiltered. The server creates and feeds an unfiltered consumer without
// walking its index of every subject: at a million keys, 0.5 ms to create
// against 40 ms, and a quarter of the CPU for each message read
// (docs/scaling.md). A read of a whole bucket that keeps one message per
// key (history 1) is then a read of every message.
func WholeStream(cfg jetstream.StreamConfig, filter string) bool {
	return len(cfg.Subjects) == 1 && cfg.Subjects[0] == filter
}

func parseMillis(v string) time.Time {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

// QueuedMaxTokens is the most tokens of a function name whose runs
// QueuedRun finds.
const QueuedMaxTokens = 8

// QueuedRun finds the waiting message of run id when the function is not
// known (a run published without a record has none until a worker takes
// it). It looks for functions of up to QueuedMaxTokens tokens.
func (s *Store) QueuedRun(ctx context.Context, id string) (*jetflow.Run, bool, error) {
	pfx := s.cfg.Prefix + ".fn."
	for depth := 1; depth <= QueuedMaxTokens; depth++ {
		r, ok, err := s.queuedRun(ctx, pfx+strings.Repeat("*.", depth)+id)
		if ok || err != nil {
			return r, ok, err
		}
	}
	return nil, false, nil
}

// QueuedRunOf is QueuedRun for a run of function fn.
func (s *Store) QueuedRunOf(ctx context.Context, fn, id string) (*jetflow.Run, bool, error) {
	return s.queuedRun(ctx, s.cfg.FunctionSubject(fn, id))
}

// QueuedRunSeq is QueuedRunOf, with the message's sequence in the function
// stream (the order runs were published in).
func (s *Store) QueuedRunSeq(ctx context.Context, fn, id string) (*jetflow.Run, uint64, bool, error) {
	var seq uint64
	r, ok, err := s.queuedRunMsg(ctx, s.cfg.FunctionSubject(fn, id), &seq)
	return r, seq, ok, err
}

// queuedRun reads the pending run of the last message on subj.
func (s *Store) queuedRun(ctx context.Context, subj string) (*jetflow.Run, bool, error) {
	return s.queuedRunMsg(ctx, subj, nil)
}

func (s *Store) queuedRunMsg(ctx context.Context, subj string, seq *uint64) (*jetflow.Run, bool, error) {
	m, err := s.fstream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if seq != nil {
		*seq = m.Sequence
	}
	e, err := s.cfg.ParseMessage(m.Subject, m.Header, m.Data)
	if err != nil {
		return nil, false, nil
	}
	created := e.Created
	if created.IsZero() {
		created = m.Time.UTC()
	}
	sched := e.Scheduled
	if sched.IsZero() {
		sched = created
	}
	return &jetflow.Run{
		ID: e.ID, Name: e.Function, Args: e.Args, State: jetflow.Pending,
		ScheduledTime: sched, CreationTime: created, Attempts: e.Attempt - 1,
		MaxAttempts: e.MaxAttempts, Timeout: e.Timeout, Parent: e.Parent,
	}, true, nil
}

// fit returns data, the encoding of r, or r cut down to fit the server's
// max payload (fitRecord).
func (s *Store) fit(r *jetflow.Run, data []byte) ([]byte, error) {
	if max := s.nc.MaxPayload(); max > 0 && int64(len(data))+recordHeaderRoom > max {
		return fitRecord(r, int(max)-recordHeaderRoom)
	}
	return data, nil
}

// recordHeaderRoom is what a record write's subject and headers take at
// most, beside its body, within the server's max payload.
const recordHeaderRoom = 1024

// fitRecord encodes r cut down to at most room bytes, so that its state
// change is stored even when its fields add up to more than the server
// takes (args near their limit beside a long error, a panic's stack, a
// long history). Errors are clipped (the run's to 2 KB and its history's to
// 256 bytes, then to 512 and 64 bytes and the last 5 attempts), the
// progress message likewise (1 KB, then 128 bytes), the children listed to
// the last 1,000 (then 100); a terminal record's result and args, which no
// later attempt reads, give way to their summaries (BodySummary). r itself
// is left as it is. A record that still does not fit is
// jetflow.ErrBadArgs.
func fitRecord(r *jetflow.Run, room int) ([]byte, error) {
	var n int
	for _, cut := range [...]struct{ err, hist, hists, progress, kids int }{
		{2048, 256, jetflow.MaxHistory, 1024, 1000},
		{512, 64, 5, 128, 100},
	} {
		c := *r
		c.Error = clipText(c.Error, cut.err)
		if k := len(c.History); k > 0 {
			c.History = slices.Clone(c.History[max(0, k-cut.hists):])
			for i := range c.History {
				c.History[i].Error = clipText(c.History[i].Error, cut.hist)
			}
		}
		if c.Progress != nil && len(c.Progress.Message) > cut.progress {
			p := *c.Progress
			p.Message = clipText(p.Message, cut.progress)
			c.Progress = &p
		}
		if k := len(c.Children); k > cut.kids {
			c.Children = c.Children[k-cut.kids:]
		}
		if c.State.Terminal() {
			if len(c.Result) > room/8 {
				c.Result = BodySummary(c.Result, room/8)
			}
			if len(c.Args) > room/8 {
				c.Args = BodySummary(c.Args, room/8)
			}
		}
		data, err := EncodeRun(&c)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", jetflow.ErrBadArgs, err)
		}
		if len(data) <= room {
			return data, nil
		}
		n = len(data)
	}
	return nil, fmt.Errorf("%w: the record of run %s takes %d bytes, more than the server's max payload leaves it (%d)",
		jetflow.ErrBadArgs, r.ID, n, room)
}

// clipText cuts s to at most n bytes of valid UTF-8, marking the cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
