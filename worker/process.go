package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/liveness"
	"github.com/jetflow-dev/jetflow/internal/telemetry"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func decodeArgs(data []byte, v any) error {
	if len(data) == 0 {
		data = []byte("null")
	}
	return json.Unmarshal(data, v)
}

// delivery is a message on its way to a runner.
type delivery struct {
	m jetstream.Msg
}

// arrivals counts the dispatches of a function's deliveries, for
// watchPulls.
type arrivals struct {
	mu sync.Mutex
	// Dispatches started, and how many are under way (two Consumes
	// dispatch at once for a moment after one replaces another).
	count      uint64
	inDispatch int
}

// snapshot returns the number of dispatches started and whether one is
// under way (waiting for a runner).
func (a *arrivals) snapshot() (count uint64, inDispatch bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count, a.inDispatch > 0
}

func (a *arrivals) start() {
	a.mu.Lock()
	a.count++
	a.inDispatch++
	a.mu.Unlock()
}

func (a *arrivals) end() {
	a.mu.Lock()
	a.inDispatch--
	a.mu.Unlock()
}

// heldLong reports whether a first delivery may have been made long enough
// ago for JetStream to redeliver it elsewhere (mayHaveWaited).
func (w *Worker) heldLong(m jetstream.Msg) bool {
	var stored time.Time
	if ns, ok := storedFrom(m.Reply()); ok {
		stored = time.Unix(0, ns)
	} else if md, err := m.Metadata(); err == nil {
		stored = md.Timestamp
	}
	age, measured := w.clock.Age(stored)
	return mayHaveWaited(age, measured && !stored.IsZero(), w.stall.Recent(), w.cfg.AckWait)
}

// mayHaveWaited is the rule for a first delivery: it may have waited (in
// this process's buffers, its socket, a pause of it) long enough to be
// redelivered elsewhere when its message was stored half of AckWait ago or
// more. A first delivery is made after its message is stored, so the
// message's age bounds the delivery's, whatever happened here: the age is
// counted on the server's clock (stamped by the server, measured here on
// the monotonic clock from the last probe), so neither a pause nor a
// skewed or jumping clock can make a delivery look younger. Unmeasured (no
// probe answered yet), or within AckWait of a stall of this process (its
// claim may be late too), it counts as having waited.
func mayHaveWaited(age time.Duration, measured, stalled bool, ackWait time.Duration) bool {
	return !measured || stalled || age >= ackWait/2
}

// dispatch is called by the consumer for each message; it hands the message
// to one of the function's Concurrency runner goroutines, waiting for one to
// be free.
func (w *Worker) dispatch(e *fnEntry, m jetstream.Msg) {
	d := delivery{m: m}
	e.arrivals.start()
	defer e.arrivals.end()
	w.mu.Lock()
	if w.stopping || e.paused {
		w.mu.Unlock()
		w.settle(m, nakIt) // stopping or paused: back to the stream, unharmed
		return
	}
	w.inflight.Add(1)
	w.mu.Unlock()
	select {
	case e.work <- d:
	case <-w.stopCh:
		w.settle(m, nakIt)
		w.inflight.Done()
	}
}

// runner runs the messages dispatch hands it until the worker stops. Long-
// lived runners keep their grown stacks: no goroutine start per run.
func (w *Worker) runner(e *fnEntry) {
	for {
		select {
		case d := <-e.work:
			w.process(e, d.m, w.heldLong(d.m))
			w.inflight.Done()
		case <-w.stopCh:
			return
		}
	}
}

// msgIDFits reports whether a message's Nats-Msg-Id (if any) is its run's:
// the run id, or <id>/<attempt> for a retry.
func msgIDFits(mid string, env streams.Envelope) bool {
	return mid == "" || mid == env.ID || mid == env.MsgID()
}

// delivered reads the delivery count from a message's ack subject, with no
// Metadata parse; it reports false for a subject of any other shape.
func delivered(m jetstream.Msg) (uint64, bool) { return deliveredFrom(m.Reply()) }

// process runs one delivery, top to bottom: parse it, classify it, accept
// it (read the record where the kind needs it), claim it where the kind or
// the function needs it, then run and report (execute). held: it waited
// here long (heldLong), and may have been redelivered elsewhere meanwhile.
func (w *Worker) process(e *fnEntry, m jetstream.Msg, held bool) {
	ctx := context.Background()
	env, numDelivered, ok := w.parseDelivery(ctx, e, m)
	if !ok {
		return
	}
	j := &jobCore{w: w, fn: e, env: env}
	if w.swapMsg(env.ID, env.Attempt, m) {
		// A duplicate of a run running here, claimed or not (a
		// redelivery, a recreated consumer, a second publish): its outcome
		// acknowledges the newest message; the other is acknowledged when
		// redelivered, the run being over by then.
		w.log.Debug("duplicate delivery of a run running here", "function", e.name, "run_id", env.ID, "attempt", env.Attempt)
		return
	}
	// A restarted server may hand back what it had delivered as a first
	// delivery or as a redelivery (its consumer state reached the disk or
	// not): either may repeat a run still running, unclaimed, elsewhere.
	replay := w.mayBeReplay(m)
	kind := engine.Classify(engine.DeliveryFacts{
		NumDelivered: numDelivered, Replay: replay, Held: held,
		Reload: env.Reload, IsNew: env.New, Rev: env.Rev, Attempt: env.Attempt,
	})
	if kind == engine.Waited {
		w.log.Debug("first delivery may have waited (its message stored AckWait/2 ago, or received across a stall): claimed first", "function", e.name, "run_id", env.ID)
	}
	if !w.accept(ctx, j, m, kind, replay, numDelivered) || w.canceledHere(ctx, env.ID, m) {
		return
	}
	j.started = w.now().UTC()
	// A delivery that may repeat a run is claimed before it starts: its
	// first delivery may have crashed its worker before a late claim, and
	// from here on each lost attempt counts (a handler that kills its
	// process every time fails after MaxAttempts instead of being
	// redelivered forever).
	if e.claimFirst() || kind.ClaimsFirst() && !e.opts.NoClaim {
		if !w.claimBeforeStart(ctx, j, m) {
			return
		}
	}
	w.execute(ctx, j, m)
}

// parseDelivery decodes a delivery into its run's envelope and delivery
// count. A message that is no run is dead-lettered with the reason, or
// terminated when it has no metadata at all; ok is false then.
func (w *Worker) parseDelivery(ctx context.Context, e *fnEntry, m jetstream.Msg) (env streams.Envelope, numDelivered uint64, ok bool) {
	var md *jetstream.MsgMetadata
	metadata := func() bool {
		if md == nil {
			var err error
			if md, err = m.Metadata(); err != nil {
				w.settle(m, termIt)
				return false
			}
		}
		return true
	}
	numDelivered, ok = delivered(m)
	if !ok {
		if !metadata() {
			return env, 0, false
		}
		numDelivered = md.NumDelivered
	}
	env, perr := w.checkEnvelope(m)
	if perr == nil && (env.Scheduled.IsZero() || env.Created.IsZero()) {
		if !metadata() {
			return env, 0, false
		}
		env.Scheduled = orTime(env.Scheduled, md.Timestamp.UTC())
		env.Created = orTime(env.Created, md.Timestamp.UTC())
	}
	if perr != nil {
		if metadata() {
			w.deadLetter(ctx, e, m, md, perr)
		}
		return env, 0, false
	}
	return env, numDelivered, true
}

// checkEnvelope parses a message and checks what makes it a run: a valid
// id, a Nats-Msg-Id of that run, args a record holds.
func (w *Worker) checkEnvelope(m jetstream.Msg) (streams.Envelope, error) {
	env, err := w.scfg.ParseMessage(m.Subject(), m.Headers(), m.Data())
	switch {
	case err != nil:
		return env, err
	case jetflow.ValidateRunID(env.ID) != nil:
		return env, jetflow.ValidateRunID(env.ID)
	case !msgIDFits(m.Headers().Get(streams.HeaderMsgID), env):
		return env, fmt.Errorf("Nats-Msg-Id %q names neither run %q of the subject nor its attempt %d (%q)",
			m.Headers().Get(streams.HeaderMsgID), env.ID, env.Attempt, env.MsgID())
	case len(env.Args) > w.argsLimit():
		return env, fmt.Errorf("%d bytes of args: more than a run record holds (%d)", len(env.Args), w.argsLimit())
	}
	return env, nil
}

// orTime is t, or def when t is zero.
func orTime(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}

// accept sets j's record: read from the store where the delivery's kind
// needs it (reconcile, which may settle the message and return false), or,
// for a fresh delivery, the pending record its message carries (its claim
// or outcome creates the stored one, create-only: a Cancel that recorded it
// first wins).
func (w *Worker) accept(ctx context.Context, j *jobCore, m jetstream.Msg, kind engine.DeliveryKind, replay bool, numDelivered uint64) bool {
	if kind.ReadsRecord() {
		return w.reconcile(ctx, j, m, replay, numDelivered)
	}
	env := j.env
	j.rec = &jetflow.Run{
		ID: env.ID, Name: env.Function, Kind: j.fn.kind, Args: env.Args, State: jetflow.Pending,
		ScheduledTime: env.Scheduled, CreationTime: env.Created, Attempts: env.Attempt - 1,
		MaxAttempts: env.MaxAttempts, Timeout: env.Timeout, Parent: env.Parent, Trace: env.Trace,
		Revision: env.Rev,
	}
	j.rev = env.Rev
	j.fresh = env.Attempt == 1
	return true
}

// canceledHere reports (and settles the message) when a cancel notice for
// run id came here and its ended record backs it; a notice that no ended
// record backs is forgotten and the run goes on.
func (w *Worker) canceledHere(ctx context.Context, id string, m jetstream.Msg) bool {
	if !w.isCanceled(id) {
		return false
	}
	switch ended, err := w.cancelRecorded(ctx, id); {
	case err != nil:
		w.settle(m, nakAfter(time.Second))
		return true
	case ended:
		w.settle(m, ackIt)
		return true
	}
	return false
}

// claimBeforeStart writes j's claim (inProgress, owned here) by
// compare-and-swap before its handler starts. It reports false when the
// run is not this worker's to run (canceled, claimed elsewhere, the write
// failed), the message settled accordingly.
func (w *Worker) claimBeforeStart(ctx context.Context, j *jobCore, m jetstream.Msg) bool {
	r := engine.ClaimRun(j.rec, j.work(), j.started)
	t0 := time.Now()
	rev, err := w.claim(ctx, j.rec.State, r, j.rev)
	telemetry.ClaimWaited(ctx, time.Since(t0), j.fn.recAttr...)
	if err != nil {
		w.log.Debug("claim lost", "function", j.fn.name, "run_id", j.env.ID, "error", err)
		w.claimFailed(ctx, j, m, r, err)
		return false
	}
	r.Revision = rev
	j.rec, j.rev = r, rev
	return true
}

// claimFailed settles the message of a claim that failed: dead-lettered
// when no claim of it can be stored; handed back (and the claim given back
// once it is known to have landed) when the write's answer was lost; acked
// on a conflict only when the run is over for this message (acks go by
// stream sequence: the message may be the one another worker runs).
func (w *Worker) claimFailed(ctx context.Context, j *jobCore, m jetstream.Msg, r *jetflow.Run, err error) {
	switch {
	case errors.Is(err, jetflow.ErrBadArgs):
		w.deadLetterMsg(ctx, j.fn, m, err)
	case !errors.Is(err, kv.ErrConflict):
		if mayGiveBack(err, j.rec.State) {
			w.giveBackLater(r, j.rev)
		}
		w.settle(m, nakAfter(time.Second))
	default:
		if cur, _, gerr := w.store.Decide(ctx, j.env.ID); gerr == nil && overFor(cur, j.env.Attempt) {
			w.settle(m, ackIt)
		}
	}
}

// mayGiveBack reports whether a claim whose write failed with err may have
// landed and is to be given back once that is known: not when the server
// denied it, and not a takeover's claim (from a lost worker's inProgress
// record: its message's attempt would then look over; it waits LostAfter,
// as the lost worker's did).
func mayGiveBack(err error, from jetflow.State) bool {
	return !errors.Is(err, nats.ErrPermissionViolation) && from != jetflow.InProgress
}

// giveBackLater gives claim r back in the background once the runs leader
// answers, at most maxGiveBacks at once; beyond that (an outage) the run
// waits LostAfter, as it would.
func (w *Worker) giveBackLater(r *jetflow.Run, rev uint64) {
	select {
	case w.givingBack <- struct{}{}:
		cl := *r
		w.inflight.Add(1)
		go w.giveBackClaim(&cl, rev)
	default:
	}
}

// overFor reports whether the run whose record is cur is over for a
// message of attempt: ended, past that attempt, or pending after it.
func overFor(cur *jetflow.Run, attempt int) bool {
	switch {
	case cur.State.Terminal(), attempt < cur.Attempts:
		return true
	}
	return cur.State == jetflow.Pending && attempt <= cur.Attempts
}

// clusterHoldBack is how long a redelivery (numDelivered 2 or more) on a
// replicated stream, of a run found unclaimed, is handed back before it may
// be claimed here: 0 for none. Another worker may have run it:
//
//   - still running, unclaimed, in its first ClaimAfter (a consumer leader
//     change redelivers the messages in flight at once): the second
//     delivery waits ClaimAfter plus ReplayGrace for its claim;
//   - ended, with its outcome not stored yet because the runs bucket was
//     electing a leader (writes sent to a leader that died go unanswered,
//     and the worker writes them again outcomeTimeout after it sent them,
//     sweepOutcomes): no claim before outcomeTimeout plus ReplayGrace after
//     the bucket's leader took over (leader_since in its stream info, the
//     server's clock: replaySlack more). While the bucket cannot say (no
//     leader), look again in a second.
func (w *Worker) clusterHoldBack(ctx context.Context, j *jobCore, numDelivered uint64) time.Duration {
	if !w.replicated || numDelivered < 2 {
		return 0
	}
	since, err := w.runsLeaderSince(ctx)
	return holdBack(numDelivered, j.fn.opts.ClaimAfter, w.cfg.ReplayGrace, since, err, time.Now())
}

// holdBack is clusterHoldBack's rule, given the runs bucket's leader_since
// (or the error reading it) at now.
func holdBack(numDelivered uint64, claimAfter, grace time.Duration, since time.Time, sinceErr error, now time.Time) time.Duration {
	var d time.Duration
	if numDelivered == 2 {
		d = claimAfter + grace
	}
	switch {
	case sinceErr != nil:
		d = max(d, time.Second)
	case !since.IsZero():
		d = max(d, since.Add(outcomeTimeout+grace+replaySlack).Sub(now))
	}
	return d
}

// runsLeaderSince is when the runs bucket's leader took over (zero when its
// stream info does not say), read at most once a second.
func (w *Worker) runsLeaderSince(ctx context.Context) (time.Time, error) {
	w.leaderMu.Lock()
	defer w.leaderMu.Unlock()
	if time.Since(w.leaderRead) < time.Second {
		return w.leaderSince, w.leaderErr
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	w.leaderSince, w.leaderErr = time.Time{}, nil
	s, err := w.js.Stream(ictx, streams.KVStream(w.scfg.RunsBucket()))
	if err != nil {
		w.leaderErr = err
	} else if ci := s.CachedInfo().Cluster; ci == nil || ci.Leader == "" {
		w.leaderErr = errors.New("the runs bucket has no leader")
	} else if ci.LeaderSince != nil {
		w.leaderSince = *ci.LeaderSince
	}
	w.leaderRead = time.Now()
	return w.leaderSince, w.leaderErr
}

// reconcile reads the stored record and decides whether the message is to be
// run. It acks and returns false for stale messages and runs already ended.
//
// replay: the delivery may repeat one made before the connection broke
// (mayBeReplay). Unclaimed, its run may be running without a claim in
// another worker, which claims it as soon as it is reconnected: it is
// handed back until ReplayGrace after the reconnect.
//
// numDelivered 2 on a replicated stream: the first delivery may still be
// running unclaimed elsewhere, in its first ClaimAfter (a consumer leader
// change redelivers the messages in flight at once, counted: see
// deliversAfterQuorum). Unclaimed, it is handed back for ClaimAfter plus
// ReplayGrace, the time that worker has to write its claim; the third
// delivery finds the claim, or the outcome, or claims the run itself.
func (w *Worker) reconcile(ctx context.Context, j *jobCore, m jetstream.Msg, replay bool, numDelivered uint64) bool {
	env := j.env
	r, err := w.store.Show(ctx, env.ID)
	if errors.Is(err, jetflow.ErrBadRecord) {
		// Not a record jetflow wrote (written by hand, or by a broken
		// client): the run cannot go on from it, and retrying will not
		// change it. The message is dead-lettered with the reason; the
		// record is left as it is, for whoever wrote it.
		w.deadLetterMsg(ctx, j.fn, m, fmt.Errorf("the record of run %s: %w", env.ID, err))
		return false
	}
	unclaimed := errors.Is(err, jetflow.ErrNotFound) || err == nil && r.State == jetflow.Pending
	if j.fn.claimLate() && unclaimed && w.heldBack(ctx, j, m, replay, numDelivered) {
		return false
	}
	if errors.Is(err, jetflow.ErrNotFound) {
		r, err = w.recordForeign(ctx, j, m)
		if r == nil {
			return false
		}
	}
	if err != nil {
		w.settle(m, nakAfter(time.Second))
		return false
	}
	ownerLost := false
	if r.State == jetflow.InProgress {
		if w.swapMsg(env.ID, env.Attempt, m) {
			return false // a duplicate delivery of a run running here
		}
		ownerLost = liveness.Lost(w.live.Unchanged(r.ID, r.Revision, w.now()), w.cfg.LostAfter)
	}
	switch decideOnRecord(r, env.Attempt, j.fn.kind == jetflow.AtMostOnce, ownerLost, j.maxAttempts()) {
	case ackOver:
		w.settle(m, ackIt)
		return false
	case lookLater:
		w.settle(m, nakAfter(w.cfg.AckWait/2))
		return false
	case failLost:
		w.writeLost(ctx, j, m, engine.LoseRun(r, w.now()))
		return false
	case failNoneLeft:
		w.writeLost(ctx, j, m, engine.LoseLastAttempt(r, w.now()))
		return false
	case takeOver:
		// Its attempt counts, so a handler that kills its process every
		// time ends failed after MaxAttempts instead of being redelivered
		// forever.
		w.live.Forget(r.ID)
		j.env.Attempt = r.Attempts + 1
		r = engine.TakeOverRun(r, w.now())
	}
	j.rec, j.rev = r, r.Revision
	return true
}

// heldBack hands back (and reports) an unclaimed run's delivery that must
// wait for a claim elsewhere: a possible replay until ReplayGrace after the
// reconnect, a redelivery on a replicated stream (clusterHoldBack).
func (w *Worker) heldBack(ctx context.Context, j *jobCore, m jetstream.Msg, replay bool, numDelivered uint64) bool {
	if d := w.replayWait(); replay && d > 0 {
		if !w.boundRead() {
			// Looked at again once the stream's last sequence is read: it
			// may say the message was stored after the reconnect.
			d = min(d, time.Second)
		}
		w.log.Debug("possible replay: waiting for a claim elsewhere", "function", j.fn.name, "run_id", j.env.ID, "delay", d)
		w.settle(m, nakAfter(d))
		return true
	}
	if d := w.clusterHoldBack(ctx, j, numDelivered); d > 0 {
		w.log.Debug("redelivery on a replicated stream: waiting for a claim or an outcome elsewhere", "function", j.fn.name, "run_id", j.env.ID, "delay", d)
		w.settle(m, nakAfter(d))
		return true
	}
	return false
}

// recordForeign creates the record of a run published by another producer
// (no record yet). A create refused goes on from the record Decide reads. It
// returns a nil record when the message was settled (handed back, or
// dead-lettered: a message whose record the server cannot take).
func (w *Worker) recordForeign(ctx context.Context, j *jobCore, m jetstream.Msg) (*jetflow.Run, error) {
	env := j.env
	r := &jetflow.Run{
		ID: env.ID, Name: env.Function, Kind: j.fn.kind, Args: w.recordArgs(env.Args), State: jetflow.Pending,
		ScheduledTime: env.Scheduled, CreationTime: env.Created, Attempts: env.Attempt - 1,
		MaxAttempts: env.MaxAttempts, Timeout: env.Timeout, Parent: env.Parent, Trace: env.Trace,
	}
	_, err := w.runs.Write(ctx, engine.Schedule, engine.None, r, 0)
	switch {
	case errors.Is(err, kv.ErrExists):
		if r, _, err = w.store.Decide(ctx, env.ID); err == nil {
			return r, nil
		}
	case errors.Is(err, jetflow.ErrBadArgs):
		w.deadLetterMsg(ctx, j.fn, m, err)
		return nil, err
	case err == nil:
		return r, nil
	}
	w.settle(m, nakAfter(time.Second))
	return nil, err
}

// writeLost records r, a run whose worker is lost, as failed (compare-and-
// swap on the claim it read) and acknowledges its message.
func (w *Worker) writeLost(ctx context.Context, j *jobCore, m jetstream.Msg, r *jetflow.Run) {
	w.live.Forget(r.ID)
	if _, err := w.runs.Write(ctx, engine.Lost, jetflow.InProgress, r, r.Revision); err == nil {
		telemetry.M().Failed.Add(ctx, 1, j.fn.attr)
		w.complete(ctx, r)
	}
	w.settle(m, ackIt)
}

// recordVerdict is what a delivery does given its run's stored record.
type recordVerdict int

const (
	runFromRecord recordVerdict = iota // run it, from the record
	ackOver                            // the run ended, or this message's attempt is over
	lookLater                          // claimed by a worker seen alive: hand back
	failLost                           // at-most-once, its worker lost: never run twice
	takeOver                           // retryable, its worker lost: the next attempt runs here
	failNoneLeft                       // retryable, its worker lost, no attempts left
)

// decideOnRecord is reconcile's rule: the verdict on a delivery of attempt
// for record r. ownerLost: the record has been seen unchanged for
// LostAfter here (internal/liveness).
func decideOnRecord(r *jetflow.Run, attempt int, atMostOnce, ownerLost bool, maxAttempts int) recordVerdict {
	switch {
	case r.State.Terminal():
		return ackOver
	case r.State == jetflow.Pending && attempt <= r.Attempts:
		// A message of an attempt that already ran (a lost ack); the next
		// one is scheduled. Not when the run is in progress: a run taken
		// over goes on under its lost attempt's message, its only one.
		return ackOver
	case r.State != jetflow.InProgress:
		return runFromRecord
	case r.Owner != "" && !ownerLost:
		return lookLater
	case atMostOnce:
		return failLost
	case attempt > r.Attempts:
		return runFromRecord
	case r.Attempts+1 > maxAttempts:
		return failNoneLeft
	}
	return takeOver
}

// clip cuts s to at most n bytes (valid UTF-8).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// recordArgs is what a record stores as the args of a run whose message
// body is b: b itself when it is JSON that fits a record, or else a summary
// (size, SHA-256 and as much of the body as fits, base64) so that a hostile
// or broken body still leaves a record within the server's max payload.
func (w *Worker) recordArgs(b []byte) json.RawMessage {
	limit := w.argsLimit()
	if len(b) <= limit && json.Valid(b) {
		return b
	}
	if len(b) <= limit/8 && utf8.Valid(b) {
		s, _ := json.Marshal(string(b)) // not JSON, but text: kept as a string
		return s
	}
	return kv.BodySummary(b, limit)
}

// argsLimit is the most bytes of args a run's record can hold: the server's
// max payload less room for the record's other fields (the producer's
// limit too).
func (w *Worker) argsLimit() int { return kv.ArgsLimit(w.nc.MaxPayload()) }

// maxReason bounds the reason a dead-letter record gives (a header value
// it quotes may be as large as the message).
const maxReason = 2048

// maxError bounds the error a failed attempt's record keeps (a panic's
// stack included).
const maxError = 16 << 10

// deadLetterMsg is deadLetter for a message whose metadata is not read yet.
func (w *Worker) deadLetterMsg(ctx context.Context, e *fnEntry, m jetstream.Msg, reason error) {
	md, err := m.Metadata()
	if err != nil {
		w.settle(m, termIt)
		return
	}
	w.deadLetter(ctx, e, m, md, reason)
}

// deadLetter records a message jetflow cannot use as a failed run with the
// reason, then terminates it, so nothing is silently dropped. The record
// takes the run id of the subject unless that id has a record already (the
// message may not touch another run) or is unusable; it is then
// dlq-<stream>-<sequence>.
func (w *Worker) deadLetter(ctx context.Context, e *fnEntry, m jetstream.Msg, md *jetstream.MsgMetadata, reason error) {
	dlq := engine.DeadLetterID(md.Stream, md.Sequence.Stream)
	_, id, _ := w.scfg.ParseFunctionSubject(m.Subject())
	if jetflow.ValidateRunID(id) != nil || !msgIDFits(m.Headers().Get(streams.HeaderMsgID), streams.Envelope{ID: id, Attempt: 1}) {
		id = dlq
	}
	why := clip(reason.Error(), maxReason)
	subject := m.Subject()
	if len(subject) > 512 {
		subject = subject[:512] + "…"
	}
	r := engine.DeadLetterRun(&jetflow.Run{
		ID: id, Name: e.name, Kind: e.kind, Args: w.recordArgs(m.Data()),
		ScheduledTime: md.Timestamp.UTC(), CreationTime: md.Timestamp.UTC(),
	}, fmt.Sprintf("%v: subject %s: %s", jetflow.ErrBadMessage, subject, why), w.now())
	_, err := w.runs.Write(ctx, engine.DeadLetter, engine.None, r, 0)
	if errors.Is(err, kv.ErrExists) && id != dlq {
		r.ID = dlq
		_, err = w.runs.Write(ctx, engine.DeadLetter, engine.None, r, 0)
	}
	if err != nil && !errors.Is(err, kv.ErrExists) {
		w.log.Warn("dead letter write failed", "function", e.name, "run_id", r.ID, "error", err)
		w.settle(m, nakAfter(time.Second))
		return
	}
	w.log.Warn("bad message recorded as failed run", "function", e.name, "run_id", r.ID, "reason", why)
	telemetry.M().Failed.Add(ctx, 1, e.attr)
	w.settle(m, verdict{do: term, why: "jetflow: bad message, recorded as failed run " + r.ID})
}

func (w *Worker) execute(bg context.Context, j *jobCore, m jetstream.Msg) {
	e, env := j.fn, j.env
	ctx := telemetry.Extract(bg, env.Trace) // the producer's trace context
	met := telemetry.M()

	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A stop of the worker's work (StopAndCancel, or Stop past its ctx)
	// cancels this handler too, with its cause.
	defer context.AfterFunc(w.work, func() { cancel(context.Cause(w.work)) })()
	timeout := e.opts.Timeout
	if env.Timeout > 0 {
		timeout = env.Timeout
	}
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	if w.beforeStart != nil {
		w.beforeStart(j)
	}
	if !w.claimIfWaited(bg, j, m) {
		return
	}
	w.mu.Lock()
	w.running[env.ID] = &active{cancel: cancel, msg: m, job: j}
	if _, ok := w.canceled[env.ID]; ok {
		// The notice came after the check in process: cancel now.
		cancel(jetflow.ErrCanceled)
	}
	w.mu.Unlock()
	handedOff := false // to the asynchronous success write, which finishes it
	defer func() {
		if !handedOff {
			w.finish(j, m)
		}
	}()

	var herr error
	if timer == nil {
		herr = w.call(hctx, j)
	} else {
		// The handler may ignore its context: wait for it or the timeout.
		done := make(chan error, 1)
		go func() { done <- w.call(hctx, j) }()
		select {
		case herr = <-done:
		case <-timer:
			cancel(jetflow.ErrTimeout)
			herr = jetflow.Permanent(fmt.Errorf("%w after %s", jetflow.ErrTimeout, timeout))
		}
	}
	m = w.currentMsg(env.ID, m)
	if cause := context.Cause(hctx); errors.Is(cause, jetflow.ErrCanceled) && w.cancelBacked(bg, env.ID) {
		// Cancel already wrote the terminal record; anything else is discarded.
		met.Canceled.Add(ctx, 1, e.attr)
		w.releaseHeld(bg, j, false)
		w.settle(m, ackIt)
		return
	} else if errors.Is(cause, errWorkerStopping) && herr != nil {
		// Stopping: leave the run for another worker, unharmed.
		w.releaseHeld(bg, j, false)
		w.unclaim(bg, j)
		w.settle(m, nakIt)
		return
	}
	if err := j.flushProgress(bg); err != nil {
		w.log.Debug("progress write", "run_id", j.env.ID, "error", err)
	}
	if herr == nil {
		handedOff = true
		w.succeed(j, m)
		return
	}
	w.fail(bg, j, m, herr)
}

// claimIfWaited asks process's rule (heldLong) again as the handler is
// about to start: a run about to start unclaimed whose delivery may now
// have waited AckWait/2 is claimed first, as a Waited delivery is. Between
// the two questions this process may have been paused (a SIGSTOP, a VM's
// pause) while JetStream redelivered the run elsewhere, where it may have
// run and ended. It reports false when the run is not this worker's to run
// (claimBeforeStart settled the message). The run is not yet in w.running,
// so no late claim can race this one.
func (w *Worker) claimIfWaited(ctx context.Context, j *jobCore, m jetstream.Msg) bool {
	if !j.fn.claimLate() || j.rec.State != jetflow.Pending || !w.heldLong(m) {
		return true
	}
	w.log.Debug("delivery waited before its handler started (this process stalled): claimed first", "function", j.fn.name, "run_id", j.env.ID)
	j.fresh = false
	j.started = w.now().UTC()
	return w.claimBeforeStart(ctx, j, m)
}

// unclaim gives back the claim of a retryable run interrupted by
// StopAndCancel: the record is pending again and the attempt does not
// count, so the next worker takes it at once instead of after LostAfter.
// An at-most-once run keeps its claim: it is never run again (it fails as
// lost). A failed write leaves the claim to LostAfter.
func (w *Worker) unclaim(bg context.Context, j *jobCore) {
	j.mu.Lock()
	if !j.claimedRetryable() {
		j.mu.Unlock()
		return
	}
	r := j.rec
	rev := j.rev
	j.closed = true // no heartbeat may follow
	j.mu.Unlock()
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	if _, err := w.runs.Write(ctx, engine.Retry, jetflow.InProgress, engine.UnclaimRun(r, j.env.Attempt), rev); err != nil {
		w.log.Warn("giving back the claim of an interrupted run failed; it is retried after LostAfter", "run_id", r.ID, "error", err)
	}
}

// call runs the handler through the middleware (telemetry's, then
// Config.Middleware), turning a panic into a permanent failure with its
// stack.
func (w *Worker) call(ctx context.Context, j *jobCore) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = jetflow.Permanent(fmt.Errorf("%w: %v\n%s", jetflow.ErrPanic, p, debug.Stack()))
		}
	}()
	return j.fn.handle(ctx, j)
}

// succeed writes the success of j's attempt; the write completes
// asynchronously (succeedAsync).
func (w *Worker) succeed(j *jobCore, m jetstream.Msg) {
	j.mu.Lock()
	from := j.rec.State
	r := engine.SucceedRun(j.rec, j.work(), j.result, w.now())
	j.rec = r // no other write of the record follows: it becomes the outcome
	rev := j.rev
	j.closed = true // no heartbeat or progress write may slip in before the outcome
	j.mu.Unlock()
	// The run stays in w.running until its outcome is stored, so that its
	// message keeps its heartbeat and a duplicate delivery finds it.
	w.inflight.Add(1)
	w.succeedAsync(j, m, from, r, rev)
}

// writeOutcome writes the outcome of an attempt, retrying through a server
// restart or a leader election (the run stays in w.running meanwhile, so its
// message keeps its heartbeat): a handler that finished is not run again
// because the write of its outcome failed once. A conflict whose stored
// record is the one this worker wrote (a write that landed but whose reply
// was lost, or refused by a deposed leader while the new one stored it)
// counts as written. A conflict whose stored record is this
// attempt's claim or heartbeat (started: the attempt's start time), one
// that landed with its reply lost or late, is written over: the record is
// still this attempt's.
func (w *Worker) writeOutcome(ctx context.Context, step engine.Step, from jetflow.State, r *jetflow.Run, rev uint64, started time.Time) (uint64, error) {
	delay := 50 * time.Millisecond
	deadline := w.now().Add(2 * time.Minute)
	for {
		n, err := w.writeRecord(ctx, step, from, r, rev)
		if err == nil {
			return n, nil
		}
		if errors.Is(err, kv.ErrConflict) {
			v, cur, gerr := engine.ReadBack(ctx, w.readConfirmed, r.ID, rev, engine.OutcomeOf(r, w.cfg.ID, started))
			switch v {
			case kv.Landed:
				r.Revision = cur.Revision
				return cur.Revision, nil
			case kv.Rebase:
				w.log.Debug("outcome written over this attempt's own write, landed unseen", "run_id", r.ID, "revision", cur.Revision)
				rev, from = cur.Revision, jetflow.InProgress
				continue
			case kv.Gone:
				// The message named a revision of a record that is not
				// there (expired, or a foreign message's made-up
				// Jetflow-Rev): the run ran all the same, so its outcome is
				// recorded, create-only.
				rev, from = 0, engine.None
				continue
			case kv.Superseded:
				return 0, engine.Superseded(err)
			case kv.NotLanded:
				// The record is as this write expected: the refusal came
				// from a leader judging against an uncommitted write (cut
				// off, or paused and deposed). Write it again.
				gerr = fmt.Errorf("the record is unchanged at revision %d: %w", rev, kv.ErrUnconfirmed)
			}
			// Not landed, or unread: the record may be this attempt's. Try
			// again. Not a conflict if it stays unread: the caller then
			// hands the message back rather than acknowledging it
			// (outcomeLost).
			err = fmt.Errorf("worker: write of run %s refused (%v), and its record unread: %w", r.ID, err, gerr)
		}
		if errors.Is(err, jetflow.ErrBadArgs) || w.isStopping() || w.now().After(deadline) {
			return 0, err // ErrBadArgs: no write of this record can be stored
		}
		w.log.Debug("outcome write failed; retrying", "run_id", r.ID, "error", err)
		select {
		case <-time.After(delay):
		case <-w.stopCh:
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// recordReadTimeout bounds a read of a run's record after a refused write.
const recordReadTimeout = 5 * time.Second

// writeRecord writes r, whose record was in state from at revision rev,
// after step; rev 0 creates the record (a run whose message was its only
// record so far). Losing the race is ErrConflict either way.
func (w *Worker) writeRecord(ctx context.Context, step engine.Step, from jetflow.State, r *jetflow.Run, rev uint64) (uint64, error) {
	if rev != 0 {
		return w.runs.Write(ctx, step, from, r, rev)
	}
	if r.State != jetflow.Success {
		// The args of a run published without a record are whatever its
		// producer sent; a success means the handler decoded them.
		r.Args = w.recordArgs(r.Args)
	}
	n, err := w.runs.Write(ctx, step, engine.None, r, 0)
	if errors.Is(err, kv.ErrExists) {
		return 0, fmt.Errorf("%w: %w", kv.ErrConflict, err)
	}
	return n, err
}

// outcomeLost handles a terminal write that lost its compare-and-swap: the
// run was canceled, timed out elsewhere, or a newer attempt owns it. The
// newer state stands; this result is discarded.
func (w *Worker) outcomeLost(ctx context.Context, j *jobCore, m jetstream.Msg, err error) {
	if errors.Is(err, kv.ErrConflict) {
		w.log.Info("outcome discarded: run changed meanwhile", "function", j.fn.name, "run_id", j.env.ID, "attempt", j.env.Attempt)
		w.releaseHeld(ctx, j, false)
		w.settle(m, ackIt)
		return
	}
	w.log.Warn("outcome write failed; run will be redelivered", "function", j.fn.name, "run_id", j.env.ID, "error", err)
	w.settle(m, nakAfter(time.Second))
}

// releaseHeld dispatches (commit) or cancels the children a retryable
// attempt scheduled.
func (w *Worker) releaseHeld(ctx context.Context, j *jobCore, commit bool) {
	if j.fn.kind == jetflow.AtMostOnce {
		return
	}
	j.mu.Lock()
	kids := append([]string(nil), j.kids...)
	j.mu.Unlock()
	for _, id := range kids {
		if commit {
			r, err := w.store.Lookup(ctx, id)
			if err != nil || r.State != jetflow.Pending {
				continue
			}
			if err := w.p.Release(ctx, r); err != nil {
				w.log.Warn("dispatch child; repair sweep will", "run_id", id, "error", err)
			}
			continue
		}
		_, err := w.runs.Change(ctx, engine.Orphan, id, func(r *jetflow.Run) *jetflow.Run {
			if r.HeldBy == "" {
				return nil
			}
			return engine.OrphanRun(r, w.now())
		})
		if err != nil && !errors.Is(err, kv.ErrTerminal) {
			w.log.Warn("cancel held child; repair sweep will", "run_id", id, "error", err)
		}
	}
}

func (w *Worker) fail(ctx context.Context, j *jobCore, m jetstream.Msg, herr error) {
	met := telemetry.M()
	j.mu.Lock()
	cur, work, why := j.rec, j.work(), clip(herr.Error(), maxError)
	rev := j.rev
	j.closed = true // no heartbeat or progress write may slip in before the outcome
	j.mu.Unlock()
	from := cur.State
	var ra *jetflow.RetryAfterError
	retry := j.fn.kind == jetflow.Retryable && !jetflow.IsPermanent(herr) && j.env.Attempt < j.maxAttempts()
	if !retry {
		w.failFinal(ctx, j, m, from, engine.FailRun(cur, work, why, jetflow.IsPermanent(herr), w.now()), rev)
		return
	}
	delay := j.fn.opts.Backoff.Delay(j.env.Attempt)
	if errors.As(herr, &ra) {
		delay = ra.Delay
	}
	due := w.clock.Now().UTC().Add(delay) // due in the server's time
	r := engine.RetryRun(cur, work, why, due, w.now())
	started := cur.StartedTime
	if started.IsZero() {
		started = work.Started
	}
	newRev, err := w.writeOutcome(ctx, engine.Retry, from, r, rev, started)
	if errors.Is(err, jetflow.ErrBadArgs) {
		// The record cannot hold another attempt (its args beside what the
		// attempts added): the run fails here, with the reason, rather than
		// running again without a record of it.
		w.failFinal(ctx, j, m, from, engine.FailRun(cur, work, fmt.Sprintf("%s (not retried: %v)", why, err), true, w.now()), rev)
		return
	}
	if err != nil {
		w.outcomeLost(ctx, j, m, err)
		return
	}
	r.Revision = newRev
	w.releaseHeld(ctx, j, false)
	if err := w.p.DispatchAt(ctx, r, w.clock.Now()); err != nil {
		w.log.Warn("schedule retry failed; trying again in the background", "run_id", r.ID, "error", err)
		w.p.DispatchLater(r, w.clock.Now)
	}
	met.Retried.Add(ctx, 1, j.fn.attr)
	w.settle(m, ackIt)
}

// failFinal writes r, the attempt's failure with no retry after it, and
// settles the attempt's message.
func (w *Worker) failFinal(ctx context.Context, j *jobCore, m jetstream.Msg, from jetflow.State, r *jetflow.Run, rev uint64) {
	if _, err := w.writeOutcome(ctx, engine.Fail, from, r, rev, r.StartedTime); err != nil {
		w.outcomeLost(ctx, j, m, err)
		return
	}
	telemetry.M().Failed.Add(ctx, 1, j.fn.attr)
	w.releaseHeld(ctx, j, false)
	w.complete(ctx, r)
	w.settle(m, ackIt)
}

// complete schedules the run's on-complete callback; the repair sweep covers
// a crash before it.
func (w *Worker) complete(ctx context.Context, r *jetflow.Run) {
	if r.OnComplete == nil {
		return
	}
	if err := w.p.Complete(ctx, r); err != nil {
		w.log.Warn("on-complete; repair sweep will", "run_id", r.ID, "error", err)
	}
}

// claimedRetryable reports whether j is a retryable run whose claim this
// worker wrote (an inProgress record at a known revision). j.mu is held.
func (j *jobCore) claimedRetryable() bool {
	if j.fn.kind != jetflow.Retryable || j.rec == nil {
		return false
	}
	return j.rec.State == jetflow.InProgress && j.rev != 0
}
