package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/lifecycle"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/internal/sentinel"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Limits and defaults.
const (
	// DefaultWindow is a trigger's window when its definition gives none:
	// the most runs of its function waiting or running before it holds off.
	DefaultWindow = 1000
	// MaxWindow is the largest window a trigger takes.
	MaxWindow = 100_000
	// DefaultBatch is Config.Batch's default.
	DefaultBatch = 256
	// MaxNameLen bounds a trigger's name.
	MaxNameLen = 64
)

// Errors. Each is matched with errors.Is.
var (
	// ErrInvalid: a trigger definition that cannot run (name, subjects,
	// window, target).
	ErrInvalid = errors.New("trigger: invalid trigger")
	// ErrExists: Add of a name that is defined already.
	ErrExists = errors.New("trigger: trigger already exists")
	// ErrNotFound: no trigger of that name. It matches jetflow.ErrNotFound.
	ErrNotFound = fmt.Errorf("trigger: no such trigger: %w", jetflow.ErrNotFound)
	// ErrBound: Bind of a name bound on this runner already, or after Start.
	ErrBound = errors.New("trigger: bound twice or after Start")
	// ErrMapping: the trigger's mapping refused a message (the failed
	// run's error says why); it wraps the mapping's own error.
	ErrMapping = errors.New("trigger: message not mapped")
	// ErrNoID: the message lacks the header the trigger takes run ids from.
	ErrNoID = errors.New("trigger: message has no run id header")
	// ErrSubjectsTaken: a trigger on plain subjects whose subjects another
	// stream captures already (NATS refuses overlapping streams); it wraps
	// the server's error.
	ErrSubjectsTaken = errors.New("trigger: subjects captured by another stream")
	// ErrUnreadable: a stored definition (written by hand) that is not a
	// definition's JSON, or that names another trigger than its key. It
	// matches jetflow.ErrBadRecord. Delete removes it.
	ErrUnreadable = sentinel.Kind("trigger: definition unreadable", jetflow.ErrBadRecord)
)

// Target is what a trigger starts for each message: a run of a function,
// or a workflow. A is the type of the args.
type Target[A any] struct {
	name     string
	kind     jetflow.Kind
	workflow string
}

// Func targets function fn: each message is one run of it.
func Func[A any](fn jetflow.Function[A]) Target[A] {
	return Target[A]{name: fn.Name(), kind: fn.Kind()}
}

// Workflow targets workflow def: each message is one run of its start
// function (workflow.StartCall), which starts one workflow with id
// workflow.TriggeredID(<run id>). The definition must be registered on a
// worker (workflow.Register).
func Workflow[In, Out any](def *workflow.Workflow[In, Out]) Target[In] {
	return Target[In]{name: workflow.StartFunction(def.Name()), kind: jetflow.Retryable, workflow: def.Name()}
}

// Spec declares a trigger in code (Bind).
type Spec[A any] struct {
	// Name of the trigger: 1-64 letters, digits, '_' or '-'. It names the
	// durable consumer (<prefix>_trigger_<name>) and the run ids.
	Name string
	// Stream is an existing stream of the user's to read; its messages on
	// Subjects (all of them when Subjects is empty) start runs. With
	// Stream "", Subjects are plain NATS subjects that jetflow captures
	// into a stream it manages, <PREFIX>_TRIGGER_<name> (work-queue: a
	// message leaves it once its run is accepted).
	Stream   string
	Subjects []string
	// IDHeader names the header whose value identifies the message (e.g.
	// "Nats-Msg-Id", "Order-Id"): the run id is derived from it, so the
	// same event published twice makes one run. Default: the run id is
	// derived from the stream and the stream sequence.
	IDHeader string
	// Window: the most runs of the target function waiting or running
	// (its queue) before the trigger holds off. Default DefaultWindow.
	Window int
	// DeliverNew: start with the messages stored after the trigger's
	// consumer is first created, instead of every message the stream
	// holds.
	DeliverNew bool
	// Map turns a message into the run's args. Default: the message's
	// data decoded as JSON into A (an empty body is JSON null). An error
	// makes the message a failed run whose error says why (ErrMapping).
	Map func(m jetstream.Msg) (A, error)
	// Filter, if set, skips the messages it returns false for: they are
	// acked and counted, and make no run.
	Filter func(m jetstream.Msg) bool
}

// Config configures a Runner. The zero value is usable.
type Config struct {
	// ID names the runner in its counters. Default: generated.
	ID string
	// CodeOnly: run only the triggers bound on this runner, not those
	// added at run time (Add, `jetflow triggers add`). Default: both.
	CodeOnly bool
	// Batch is the most messages of one trigger fetched and scheduled at
	// once (one atomic batch of run records). Default DefaultBatch; at
	// most producer.MaxBatch.
	Batch int
	// AckWait of the triggers' consumers: a message not acked that long
	// after its delivery is delivered again (its run id finds the run it
	// made). Default 30 s.
	AckWait time.Duration
	// StatsEvery is how often the runner writes its counters (TTL'd
	// entries the CLI and the dashboard read). Default 5 s.
	StatsEvery time.Duration
	// Logger receives warnings and debug logs. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.ID == "" {
		c.ID = nuid.Next()
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	c.Batch = min(c.Batch, producer.MaxBatch)
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.StatsEvery <= 0 {
		c.StatsEvery = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// decideFunc turns a message into the call its run makes (skip: the
// filter refused it). It is the part of a trigger that differs between
// code and run-time triggers.
type decideFunc func(m jetstream.Msg) (c jetflow.Call, skip bool, err error)

// binding is a trigger bound in code: its definition and its mapping.
type binding struct {
	def    kv.TriggerDef
	decide decideFunc
}

// Runner runs triggers: those bound on it in code (Bind) and, unless
// Config.CodeOnly, those added at run time. Run one in each process that
// should turn messages into runs (the workers, typically); several runners
// of one trigger share its durable consumer, each message going to one.
// A Runner does not own the producer's connection.
type Runner struct {
	p    *producer.Producer
	d    *engine.Dispatcher
	js   jetstream.JetStream
	scfg streams.Config
	cfg  Config
	log  *slog.Logger
	life lifecycle.L

	mu      sync.Mutex
	started bool
	code    map[string]*binding
	loops   map[string]*loop
}

// New returns a runner that schedules runs with p.
func New(p *producer.Producer, cfg Config) *Runner {
	cfg = cfg.withDefaults()
	d := engine.Of(p)
	return &Runner{
		p: p, d: d, js: d.JetStream(), scfg: d.Streams(), cfg: cfg, log: cfg.Logger,
		code: map[string]*binding{}, loops: map[string]*loop{},
	}
}

// validate is validate for r's streams and connection.
func (r *Runner) validate(d *kv.TriggerDef) error {
	return validate(d, r.scfg, r.js.Conn().Opts.InboxPrefix)
}

// ID is the runner's id.
func (r *Runner) ID() string { return r.cfg.ID }

// Bind declares trigger s on r, starting target: from Start on, r turns
// each message of s's source into one run of target. Errors: ErrInvalid,
// ErrBound.
func Bind[A any](r *Runner, target Target[A], s Spec[A]) error {
	def := kv.TriggerDef{
		Name: s.Name, Function: target.name, Kind: string(target.kind), Workflow: target.workflow,
		Stream: s.Stream, Subjects: s.Subjects, IDHeader: s.IDHeader, Window: s.Window,
		DeliverNew: s.DeliverNew, Origin: kv.TriggerOriginCode,
	}
	if err := r.validate(&def); err != nil {
		return err
	}
	mapFn, filter := s.Map, s.Filter
	decide := func(m jetstream.Msg) (jetflow.Call, bool, error) {
		if filter != nil && !filter(m) {
			return jetflow.Call{}, true, nil
		}
		if mapFn != nil {
			a, err := mapFn(m)
			if err != nil {
				return jetflow.Call{}, false, fmt.Errorf("%w: %w", ErrMapping, err)
			}
			return jetflow.Call{Name: target.name, Kind: target.kind, Args: a}, false, nil
		}
		data := body(m)
		var a A
		if err := json.Unmarshal(data, &a); err != nil {
			return jetflow.Call{}, false, fmt.Errorf("%w: message is not the JSON of %T: %v", jetflow.ErrBadArgs, a, err)
		}
		return jetflow.Call{Name: target.name, Kind: target.kind, Args: json.RawMessage(data)}, false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return fmt.Errorf("%w: %s", ErrBound, s.Name)
	}
	if _, ok := r.code[s.Name]; ok {
		return fmt.Errorf("%w: %s", ErrBound, s.Name)
	}
	r.code[s.Name] = &binding{def: def, decide: decide}
	return nil
}

// rawDecide is the mapping of a run-time trigger: the message's JSON is
// the args.
func rawDecide(def kv.TriggerDef) decideFunc {
	return func(m jetstream.Msg) (jetflow.Call, bool, error) {
		data := body(m)
		if !json.Valid(data) {
			return jetflow.Call{}, false, fmt.Errorf("%w: message is not JSON", jetflow.ErrBadArgs)
		}
		kind := jetflow.Kind(def.Kind)
		if kind == "" {
			kind = jetflow.Retryable
		}
		return jetflow.Call{Name: def.Function, Kind: kind, Args: json.RawMessage(data)}, false, nil
	}
}

// body is a message's data, an empty one read as JSON null.
func body(m jetstream.Msg) []byte {
	if d := m.Data(); len(d) > 0 {
		return d
	}
	return []byte("null")
}

// Validate checks a definition for the default prefix ("jetflow") and
// fills its defaults (Window, Kind); ValidateFor checks it for another.
// Errors: ErrInvalid, naming what is wrong.
func Validate(d *kv.TriggerDef) error { return ValidateFor(d, streams.Config{}) }

// ValidateFor checks a definition for jetflow's streams of scfg and fills
// its defaults (Window, Kind). Besides the shape of each field, it refuses
// what would feed the trigger its own runs: a Stream jetflow provisions
// (reservedStream), and capture subjects that overlap subjects NATS or
// jetflow publish on (reservedSubjects). Errors: ErrInvalid, naming what
// is wrong.
func ValidateFor(d *kv.TriggerDef, scfg streams.Config) error {
	return validate(d, scfg, "")
}

// validate is ValidateFor, with the inbox prefix of the connection
// ("" for NATS's default, _INBOX) also reserved.
func validate(d *kv.TriggerDef, scfg streams.Config, inbox string) error {
	if len(d.Name) > MaxNameLen || jetflow.ValidateRunID(d.Name) != nil {
		return fmt.Errorf("%w: name %.80q: 1-%d letters, digits, '_' or '-'", ErrInvalid, d.Name, MaxNameLen)
	}
	if err := jetflow.ValidateName(d.Function); err != nil {
		return fmt.Errorf("%w: %s: target: %w", ErrInvalid, d.Name, err)
	}
	switch jetflow.Kind(d.Kind) {
	case "":
		d.Kind = string(jetflow.Retryable)
	case jetflow.Retryable, jetflow.AtMostOnce:
	default:
		return fmt.Errorf("%w: %s: unknown kind %.80q", ErrInvalid, d.Name, d.Kind)
	}
	if d.Stream == "" && len(d.Subjects) == 0 {
		return fmt.Errorf("%w: %s: a stream or at least one subject", ErrInvalid, d.Name)
	}
	if d.Stream != "" && !validStreamName(d.Stream) {
		return fmt.Errorf("%w: %s: stream name %.80q", ErrInvalid, d.Name, d.Stream)
	}
	if d.Stream != "" && reservedStream(scfg, d.Stream) {
		return fmt.Errorf("%w: %s: stream %s is jetflow's own (its runs would make more runs)", ErrInvalid, d.Name, d.Stream)
	}
	for _, s := range d.Subjects {
		if !validSubject(s) {
			return fmt.Errorf("%w: %s: subject %.80q", ErrInvalid, d.Name, s)
		}
		if d.Stream != "" {
			continue // a filter of the user's stream: it takes only what the stream holds
		}
		if t, _, _ := strings.Cut(s, "."); t == "*" || t == ">" {
			return fmt.Errorf("%w: %s: subject %q: a captured subject begins with a literal token", ErrInvalid, d.Name, s)
		}
		for _, r := range reservedSubjects(scfg, inbox) {
			if subjectsOverlap(s, r) {
				return fmt.Errorf("%w: %s: subject %q overlaps %s, which NATS or jetflow publish on", ErrInvalid, d.Name, s, r)
			}
		}
	}
	if d.IDHeader != "" && (strings.ContainsAny(d.IDHeader, ":") || !printable(d.IDHeader)) {
		return fmt.Errorf("%w: %s: header name %.80q", ErrInvalid, d.Name, d.IDHeader)
	}
	if d.Window == 0 {
		d.Window = DefaultWindow
	}
	if d.Window < 1 || d.Window > MaxWindow {
		return fmt.Errorf("%w: %s: window %d: 1-%d", ErrInvalid, d.Name, d.Window, MaxWindow)
	}
	return nil
}

// maxStreamName is the longest stream name the server takes.
const maxStreamName = 255

// validStreamName reports whether s can name a stream: printable, no
// whitespace, none of . * > / \.
func validStreamName(s string) bool {
	if s == "" || len(s) > maxStreamName {
		return false
	}
	return printable(s) && !strings.ContainsAny(s, ".*>/\\")
}

// printable reports whether s is valid UTF-8 of printable characters, none
// of them whitespace.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// reservedStream reports whether name is a stream jetflow provisions for
// scfg's prefix: the function stream, the run index, and the stream of
// each of its buckets (KV_<prefix>_*: runs, delayed, leases, functions,
// crons, journal, pools and any to come). A trigger on one would turn
// jetflow's own writes into runs, which write more.
func reservedStream(scfg streams.Config, name string) bool {
	c := scfg.WithDefaults()
	own := []string{c.FunctionStream(), c.IndexStream()}
	for _, b := range []string{c.RunsBucket(), c.DelayedBucket(), c.LeasesBucket(), c.FunctionsBucket(), c.CronsBucket(), c.JournalBucket()} {
		own = append(own, streams.KVStream(b))
	}
	return slices.Contains(own, name) || strings.HasPrefix(name, streams.KVStream(c.Prefix+"_"))
}

// reservedSubjects are the subjects a trigger may not capture: replies
// (the connection's inbox prefix and NATS's default), jetflow's own
// (<prefix>.>), and the server's APIs, buckets and object stores.
func reservedSubjects(scfg streams.Config, inbox string) []string {
	out := []string{"_INBOX.>", scfg.WithDefaults().Prefix + ".>", "$KV.>", "$O.>", "$JS.>", "$JSC.>", "$SYS.>", "$NRG.>", "$MQTT.>", "$SRV.>"}
	if inbox != "" && inbox != "_INBOX" && validSubject(inbox) {
		out = append(out, inbox+".>")
	}
	return out
}

// subjectsOverlap reports whether some subject matches both subject
// filters a and b (NATS semantics: '*' one token, '>' one or more, last).
func subjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(at) && i < len(bt); i++ {
		x, y := at[i], bt[i]
		switch {
		case x == ">" || y == ">":
			return true
		case x == "*" || y == "*" || x == y:
		default:
			return false
		}
	}
	return len(at) == len(bt)
}

// validSubject reports whether s is a subject or a subject filter: tokens
// of printable characters (no whitespace) separated by single dots, '*'
// and '>' only as whole tokens, '>' only last.
func validSubject(s string) bool {
	if s == "" || !printable(s) {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		if t == "" || (t == ">" && i != len(toks)-1) {
			return false
		}
		if len(t) > 1 && strings.ContainsAny(t, "*>") {
			return false
		}
	}
	return true
}

// sameSource reports whether two definitions read the same messages the
// same way (a change of anything else, the pause, needs no new consumer).
func sameSource(a, b kv.TriggerDef) bool {
	return sourceOf(a) == sourceOf(b) && slices.Equal(a.Subjects, b.Subjects)
}

// sourceKey is what of a definition, but its subjects, decides which
// messages the trigger reads and how.
type sourceKey struct {
	function, kind, stream, idHeader, origin string
	window                                   int
	deliverNew                               bool
}

func sourceOf(d kv.TriggerDef) sourceKey {
	return sourceKey{function: d.Function, kind: d.Kind, stream: d.Stream, idHeader: d.IDHeader, origin: d.Origin,
		window: d.Window, deliverNew: d.DeliverNew}
}

// Start writes the definitions of the triggers bound on r (a trigger
// paused at run time stays paused), creates their consumers (and capture
// streams), and starts running them and, unless Config.CodeOnly, the
// triggers added at run time. It returns once the consumers exist, so a
// message published after Start returns is the trigger's. The runner
// runs until Stop, or until ctx ends.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return lifecycle.ErrStarted
	}
	r.started = true
	bound := make([]*binding, 0, len(r.code))
	for _, b := range r.code {
		bound = append(bound, b)
	}
	r.mu.Unlock()
	var watch jetstream.KeyWatcher
	// A permission the runner's user lacks fails at once, naming it, not
	// after a timeout.
	err := natsperm.Do(ctx, r.js.Conn(), func(ctx context.Context) error {
		bucket, err := r.js.KeyValue(ctx, r.scfg.FunctionsBucket())
		if err != nil {
			return fmt.Errorf("trigger: functions bucket: %w", err)
		}
		for _, b := range bound {
			def, err := putCode(ctx, bucket, b.def)
			if err != nil {
				return fmt.Errorf("trigger %s: %w", b.def.Name, err)
			}
			if _, _, err := ensureSource(ctx, r.js, r.scfg, def, r.cfg.AckWait); err != nil {
				return fmt.Errorf("trigger %s: %w", b.def.Name, err)
			}
		}
		watch, err = bucket.Watch(context.WithoutCancel(ctx), kv.TriggerKey(">"))
		if err != nil {
			return fmt.Errorf("trigger: watch definitions: %w", err)
		}
		return nil
	}, "$JS.", "$KV.")
	if err != nil {
		return err
	}
	return r.life.Start(ctx, func(ctx context.Context) {
		defer func() { _ = watch.Stop() }()
		stats := time.NewTicker(r.cfg.StatsEvery)
		defer stats.Stop()
		updates := watch.Updates()
		for {
			select {
			case <-ctx.Done():
				r.stopAll()
				return
			case <-stats.C:
				r.writeStats(ctx)
			case e, ok := <-updates:
				if !ok {
					r.log.Warn("trigger definitions watch ended; running triggers go on without updates")
					updates = nil
					continue
				}
				if e != nil {
					r.apply(ctx, e)
				}
			}
		}
	})
}

// putCode writes a code trigger's definition: created, or updated with the
// pause state it has (compare-and-swap).
func putCode(ctx context.Context, b jetstream.KeyValue, def kv.TriggerDef) (kv.TriggerDef, error) {
	now := time.Now().UTC()
	for {
		e, err := b.Get(ctx, kv.TriggerKey(def.Name))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			def.Created, def.Updated = now, now
			data, _ := json.Marshal(def)
			rev, err := b.Create(ctx, kv.TriggerKey(def.Name), data)
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			def.Revision = rev
			return def, err
		}
		if err != nil {
			return def, err
		}
		var old kv.TriggerDef
		if json.Unmarshal(e.Value(), &old) == nil {
			def.Paused, def.Created = old.Paused, old.Created
			if sameSource(old, def) && old.Workflow == def.Workflow {
				old.Revision = e.Revision()
				return old, nil
			}
		}
		if def.Created.IsZero() {
			def.Created = now
		}
		def.Updated = now
		data, _ := json.Marshal(def)
		rev, err := b.Update(ctx, kv.TriggerKey(def.Name), data, e.Revision())
		if err != nil && isWrongRev(err) {
			continue
		}
		def.Revision = rev
		return def, err
	}
}

func isWrongRev(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// apply follows one change of a definition: start, pause, resume,
// restart or stop the trigger's loop.
func (r *Runner) apply(ctx context.Context, e jetstream.KeyValueEntry) {
	name, ok := kv.TriggerName(e.Key())
	if !ok {
		return
	}
	r.mu.Lock()
	cur := r.loops[name]
	b := r.code[name]
	r.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		if cur != nil {
			r.log.Info("trigger deleted: stopping", "trigger", name)
			r.stopLoop(name, cur)
		}
		return
	}
	var def kv.TriggerDef
	if err := json.Unmarshal(e.Value(), &def); err != nil || def.Name != name {
		r.log.Warn("trigger definition unreadable: ignored", "trigger", name, "error", err)
		return
	}
	def.Revision = e.Revision()
	var decide decideFunc
	switch {
	case b != nil && def.Origin == kv.TriggerOriginCode:
		decide = b.decide
	case def.Origin == kv.TriggerOriginRuntime && !r.cfg.CodeOnly && b == nil:
		if err := r.validate(&def); err != nil {
			r.log.Warn("run-time trigger invalid: not run", "trigger", name, "error", err)
			return
		}
		decide = rawDecide(def)
	default:
		// Another program's code trigger (it runs it), or one this
		// runner does not run.
		if cur != nil {
			r.stopLoop(name, cur)
		}
		return
	}
	if cur != nil {
		if sameSource(cur.def(), def) {
			cur.setDef(def)
			return
		}
		r.stopLoop(name, cur)
	}
	l := newLoop(r, def, decide)
	r.mu.Lock()
	r.loops[name] = l
	r.mu.Unlock()
	l.start(ctx)
}

func (r *Runner) stopLoop(name string, l *loop) {
	l.stop()
	r.mu.Lock()
	if r.loops[name] == l {
		delete(r.loops, name)
	}
	r.mu.Unlock()
}

func (r *Runner) stopAll() {
	r.mu.Lock()
	ls := make([]*loop, 0, len(r.loops))
	for _, l := range r.loops {
		ls = append(ls, l)
	}
	r.loops = map[string]*loop{}
	r.mu.Unlock()
	for _, l := range ls {
		l.cancel()
	}
	for _, l := range ls {
		<-l.done
	}
	r.writeStatsOf(context.Background(), ls)
}

func (r *Runner) writeStats(ctx context.Context) {
	r.mu.Lock()
	ls := make([]*loop, 0, len(r.loops))
	for _, l := range r.loops {
		ls = append(ls, l)
	}
	r.mu.Unlock()
	r.writeStatsOf(ctx, ls)
}

func (r *Runner) writeStatsOf(ctx context.Context, ls []*loop) {
	for _, l := range ls {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := r.js.PublishMsg(sctx, kv.TriggerStatsMsg(r.scfg, l.Stats())); err != nil {
			r.log.Debug("trigger stats not written", "trigger", l.name, "error", err)
		}
		cancel()
	}
}

// Stats returns this runner's counters of trigger name (zero if it does
// not run it).
func (r *Runner) Stats(name string) kv.TriggerStats {
	r.mu.Lock()
	l := r.loops[name]
	r.mu.Unlock()
	if l == nil {
		return kv.TriggerStats{Trigger: name, Runner: r.cfg.ID}
	}
	return l.Stats()
}

// Running lists the triggers this runner runs now.
func (r *Runner) Running() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.loops))
	for n := range r.loops {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Stop stops fetching messages, lets the messages being handled finish
// (their runs accepted and acked), and returns when every trigger loop has
// ended or ctx ends.
func (r *Runner) Stop(ctx context.Context) error { return r.life.Stop(ctx) }

// Stopped is closed when the runner has stopped.
func (r *Runner) Stopped() <-chan struct{} { return r.life.Stopped() }
