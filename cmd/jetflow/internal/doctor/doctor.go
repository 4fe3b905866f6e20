// Package doctor checks a jetflow deployment for settings that lose
// acknowledged writes or break jetflow's guarantees, and for missing
// parts (no scheduler, a stale run index, functions no worker serves):
// `jetflow doctor`. Each finding passes, warns or fails, and says how to
// fix it. It only reads: it creates nothing but the short-lived consumers
// the backlog read uses.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Level of a finding.
type Level string

// Levels, from best to worst.
const (
	Pass Level = "pass"
	Warn Level = "warn"
	Fail Level = "fail"
)

// Finding is one line of the report.
type Finding struct {
	Check   string `json:"check"`
	Level   Level  `json:"level"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// Options of a check.
type Options struct {
	// Streams names the deployment (its prefix).
	Streams streams.Config
	// Role the connection's user has (docs/permissions.md): producer,
	// worker, scheduler, dashboard or admin; "" skips the permissions
	// check.
	Role string
	// Monitor is the server's monitoring URL (http://host:8222), where
	// /varz shows the fsync settings a client cannot see; "" skips them.
	Monitor string
	// HTTP fetches Monitor. Default http.DefaultClient.
	HTTP *http.Client
	// Now is this host's clock. Default time.Now.
	Now func() time.Time
}

// MinServer is the oldest nats-server with the fixes of the 2025 Jepsen
// report's membership and pending-write findings.
const MinServer = "2.12.3"

// Limits the checks hold the deployment to.
const (
	maxClockOffset  = time.Second      // warn over, fail over 10x
	staleIndexAfter = time.Minute      // a checkpoint about every second
	oldReadyAfter   = 5 * time.Minute  // the oldest ready run's age
	minDupWindow    = time.Minute      // the repair sweep republishes after 10 s
	staleAfter      = 2 * time.Minute  // scheduler.Config.StaleAfter's default
	argsLimit       = 8 << 20          // jetflow's per-call args limit
	workerSeenAfter = kv.FunctionTTL   // a live worker renews its entry
	fsyncLoose      = 10 * time.Second // a sync interval over it is a trade-off to state
)

// Run runs every check and returns the findings, in order.
func Run(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, o Options) []Finding {
	d := &doctor{nc: nc, js: js, o: withDefaults(o)}
	d.server()
	d.storage(ctx)
	d.fsync(ctx)
	d.consumers(ctx)
	d.clock(ctx)
	d.permissions(ctx)
	d.scheduler(ctx)
	d.index(ctx)
	d.functions(ctx)
	return d.out
}

func withDefaults(o Options) Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	o.Streams = o.Streams.WithDefaults()
	return o
}

// Worst is the worst level of findings (Pass when there are none).
func Worst(fs []Finding) Level {
	w := Pass
	for _, f := range fs {
		if f.Level == Fail {
			return Fail
		}
		if f.Level == Warn {
			w = Warn
		}
	}
	return w
}

type doctor struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	o   Options
	out []Finding
}

func (d *doctor) add(check string, l Level, msg, fix string) {
	d.out = append(d.out, Finding{Check: check, Level: l, Message: msg, Fix: fix})
}

func (d *doctor) cluster() bool { return d.nc.ConnectedClusterName() != "" }

// server checks the server's version and max payload.
func (d *doctor) server() {
	v := d.nc.ConnectedServerVersion()
	if versionAtLeast(v, MinServer) {
		d.add("server version", Pass, "nats-server "+v, "")
	} else {
		d.add("server version", Fail, "nats-server "+v+" predates "+MinServer,
			"upgrade to "+MinServer+" or later: it fixes the 2025 Jepsen report's membership and pending-write findings")
	}
	if mp := d.nc.MaxPayload(); mp < argsLimit {
		d.add("max payload", Warn, fmt.Sprintf("max_payload %d bytes: runs with larger args are refused, below jetflow's 8 MB per call", mp),
			"set max_payload: 8MB in the server config if runs carry large args (and keep it there on every node)")
	} else {
		d.add("max payload", Pass, fmt.Sprintf("max_payload %d bytes", mp), "")
	}
	if d.cluster() {
		d.add("cluster", Pass, "cluster "+d.nc.ConnectedClusterName(), "")
	} else {
		d.add("cluster", Warn, "a single server: a disk or machine loss loses what it stores",
			"run JetStream on a 3-node cluster for production (docs/operations.md)")
	}
}

// versionAtLeast compares dotted versions (a pre-release counts as its
// release's predecessor).
func versionAtLeast(v, min string) bool {
	parse := func(s string) [3]int {
		var out [3]int
		pre := strings.ContainsAny(s, "-+")
		s, _, _ = strings.Cut(strings.TrimPrefix(s, "v"), "-")
		for i, p := range strings.SplitN(s, ".", 3) {
			out[i], _ = strconv.Atoi(p)
		}
		if pre && out[2] > 0 {
			out[2]--
		}
		return out
	}
	a, b := parse(v), parse(min)
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return true
}

// storage checks every jetflow stream and bucket: file storage, replicas
// on a cluster, the runs bucket's marker TTL, the function stream's
// duplicate window.
func (d *doctor) storage(ctx context.Context) {
	c := d.o.Streams
	names := []string{c.FunctionStream(), c.IndexStream(), streams.ObjectStream(c.PayloadsBucket())}
	for _, b := range []string{c.RunsBucket(), c.DelayedBucket(), c.LeasesBucket(), c.FunctionsBucket(), c.CronsBucket(), c.JournalBucket()} {
		names = append(names, streams.KVStream(b))
	}
	for _, name := range names {
		st, err := d.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			d.add("stream "+name, Fail, "missing", "run `jetflow provision` as an admin user")
			continue
		}
		if err != nil {
			d.add("stream "+name, Warn, "cannot read: "+err.Error(), "grant $JS.API.STREAM.INFO."+name+" or run as admin")
			continue
		}
		d.stream(st.CachedInfo().Config)
	}
}

func (d *doctor) stream(cfg jetstream.StreamConfig) {
	name := "stream " + cfg.Name
	switch {
	case cfg.Storage == jetstream.MemoryStorage:
		d.add(name, Fail, "memory storage: a server restart loses every acknowledged write",
			"recreate it with file storage (streams.Config.Storage: jetstream.FileStorage, the default)")
	case d.cluster() && cfg.Replicas < 3:
		d.add(name, Fail, fmt.Sprintf("R%d on a cluster: a node's loss loses acknowledged writes", cfg.Replicas),
			"nats stream edit "+cfg.Name+" --replicas 3 (or streams.Config.Replicas: 3 and `jetflow provision`)")
	default:
		d.add(name, Pass, fmt.Sprintf("file storage, R%d", cfg.Replicas), "")
	}
	c := d.o.Streams
	if cfg.Name == streams.KVStream(c.RunsBucket()) && (!cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL <= 0) {
		d.add(name, Fail, "the runs bucket has no LimitMarkerTTL: terminal records never expire",
			"recreate the bucket with `jetflow provision` (it sets LimitMarkerTTL), after backing up its records")
	}
	if cfg.Name == c.FunctionStream() && cfg.Duplicates < minDupWindow {
		d.add(name, Warn, fmt.Sprintf("duplicate window %s: a run published again after it is run twice", cfg.Duplicates),
			"nats stream edit "+cfg.Name+" --dupe-window 2m (jetflow's default)")
	}
}

// varz is what the monitoring endpoint says of JetStream's fsync.
type varz struct {
	JetStream struct {
		Config struct {
			SyncInterval time.Duration `json:"sync_interval"`
			SyncAlways   bool          `json:"sync_always"`
		} `json:"config"`
	} `json:"jetstream"`
}

// fsync checks the server's sync settings, read from its monitoring
// endpoint.
func (d *doctor) fsync(ctx context.Context) {
	if d.o.Monitor == "" {
		d.add("fsync", Warn, "not checked: a client cannot see sync_interval",
			"pass --monitor http://<server>:8222 (the server's http_port)")
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(d.o.Monitor, "/")+"/varz", nil)
	if err != nil {
		d.add("fsync", Warn, "bad --monitor URL: "+err.Error(), "")
		return
	}
	resp, err := d.o.HTTP.Do(req)
	if err != nil {
		d.add("fsync", Warn, "monitoring endpoint: "+err.Error(), "check --monitor and the server's http_port")
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		d.add("fsync", Warn, "monitoring endpoint: "+resp.Status, "check --monitor and the server's http_port")
		return
	}
	var v varz
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		d.add("fsync", Warn, "monitoring endpoint: "+err.Error(), "")
		return
	}
	d.syncSettingsFor(d.cluster(), v.JetStream.Config.SyncAlways, v.JetStream.Config.SyncInterval)
}

// syncSettingsFor judges the fsync settings of a server, in a cluster or
// alone.
func (d *doctor) syncSettingsFor(cluster, always bool, every time.Duration) {
	switch {
	case always:
		d.add("fsync", Pass, "sync_interval: always (every write on disk before its ack)", "")
	case every == 0 || every > fsyncLoose:
		if every == 0 {
			every = 2 * time.Minute // the server's default
		}
		level := Fail
		if cluster {
			level = Warn // replicas on other machines cover a node's power loss
		}
		d.add("fsync", level, fmt.Sprintf("fsync every %s: a power loss loses up to that much acknowledged work", every),
			"set jetstream { sync_interval: always } (strict) or a short interval such as 10ms, and state the trade-off")
	default:
		d.add("fsync", Pass, fmt.Sprintf("fsync every %s", every), "")
	}
}
