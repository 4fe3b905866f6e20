package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow/internal/backlog"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/internal/srvclock"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go/jetstream"
)

// consumers checks every function consumer: explicit acks, no delivery
// limit, and an AckWait whose heartbeats (every AckWait/3) come well
// within the scheduler's StaleAfter.
func (d *doctor) consumers(ctx context.Context) {
	st, err := d.js.Stream(ctx, d.o.Streams.FunctionStream())
	if err != nil {
		return // storage said so
	}
	lister := st.ListConsumers(ctx)
	n := 0
	for info := range lister.Info() {
		n++
		cfg := info.Config
		name := "consumer " + info.Name
		switch {
		case cfg.AckPolicy != jetstream.AckExplicitPolicy:
			d.add(name, Fail, "acks are not explicit: runs are taken as done when delivered",
				"delete the consumer; a worker creates it again with explicit acks")
		case cfg.MaxDeliver > 0:
			d.add(name, Fail, fmt.Sprintf("max_deliver %d: a run delivered that often is dropped without an outcome", cfg.MaxDeliver),
				"nats consumer edit "+st.CachedInfo().Config.Name+" "+info.Name+" --max-deliver=-1 (workers create it so)")
		case cfg.AckWait/3 >= staleAfter:
			d.add(name, Fail, fmt.Sprintf("AckWait %s: workers heartbeat every %s, slower than the scheduler's StaleAfter (%s), which takes running runs for lost",
				cfg.AckWait, cfg.AckWait/3, staleAfter), "lower worker.Config.AckWait (30 s by default) or raise scheduler.Config.StaleAfter above AckWait")
		case cfg.AckWait < 3*time.Second:
			d.add(name, Warn, fmt.Sprintf("AckWait %s: a pause of the worker (GC, a busy host) gets runs redelivered elsewhere", cfg.AckWait),
				"raise worker.Config.AckWait (30 s by default)")
		default:
			d.add(name, Pass, fmt.Sprintf("explicit acks, AckWait %s (LostAfter max(2*AckWait, 30s) = %s by default)", cfg.AckWait, max(2*cfg.AckWait, 30*time.Second)), "")
		}
	}
	if err := lister.Err(); err != nil {
		d.add("consumers", Warn, "cannot list: "+err.Error(), "")
	}
}

// clock measures this host's clock against the server's (srvclock, as the
// worker does).
func (d *doctor) clock(ctx context.Context) {
	c := srvclock.New(d.o.Now)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Probe(pctx, d.nc, kv.APIPrefix(d.js), d.o.Streams.FunctionStream(), 3); err != nil {
		d.add("clock", Warn, "cannot measure the offset: "+err.Error(), "")
		return
	}
	off := c.Offset()
	abs := max(off, -off)
	msg := fmt.Sprintf("this host's clock is %s off the server's", off.Round(time.Millisecond))
	switch {
	case abs > 10*maxClockOffset:
		d.add("clock", Fail, msg+": delayed runs and crons fire off time on this host", "run NTP (chrony) on every host and the servers")
	case abs > maxClockOffset:
		d.add("clock", Warn, msg, "run NTP (chrony) on every host and the servers")
	default:
		d.add("clock", Pass, msg, "")
	}
}

// userInfo is the server's answer to $SYS.REQ.USER.INFO about the
// connection's own user.
type userInfo struct {
	Data struct {
		User        string `json:"user"`
		Account     string `json:"account"`
		Permissions *struct {
			Publish *struct {
				Allow []string `json:"allow"`
				Deny  []string `json:"deny"`
			} `json:"publish"`
		} `json:"permissions"`
	} `json:"data"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// permissions checks that a user of a role other than admin cannot change
// streams (docs/permissions.md: only provisioning needs admin rights).
func (d *doctor) permissions(ctx context.Context) {
	if d.o.Role == "" {
		d.add("permissions", Warn, "not checked", "pass --role producer|worker|scheduler|dashboard with the user of that role")
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := d.nc.RequestWithContext(rctx, "$SYS.REQ.USER.INFO", nil)
	if err != nil {
		d.add("permissions", Warn, "the server does not say this user's permissions: "+err.Error(), "")
		return
	}
	var ui userInfo
	if err := json.Unmarshal(m.Data, &ui); err != nil || ui.Error != nil {
		d.add("permissions", Warn, "the server does not say this user's permissions", "")
		return
	}
	admin := d.o.Role == "admin"
	who := fmt.Sprintf("user %q", ui.Data.User)
	if admin {
		d.add("permissions", Pass, who+": admin", "")
		return
	}
	if can, what := mayAdmin(ui); can {
		d.add("permissions", Fail, fmt.Sprintf("%s, role %s, may change streams (%s)", who, d.o.Role, what),
			"give this user only its role's permissions (docs/permissions.md); provision with a separate admin user")
		return
	}
	d.add("permissions", Pass, fmt.Sprintf("%s, role %s: no stream-admin rights", who, d.o.Role), "")
}

// mayAdmin reports whether the user may create, update or delete streams.
func mayAdmin(ui userInfo) (bool, string) {
	p := ui.Data.Permissions
	if p == nil || p.Publish == nil {
		return true, "no permissions set: every subject"
	}
	const probe = "$JS.API.STREAM.DELETE.X"
	for _, deny := range p.Publish.Deny {
		if subjectMatches(deny, probe) {
			return false, ""
		}
	}
	if len(p.Publish.Allow) == 0 {
		return true, "no publish allow list"
	}
	for _, allow := range p.Publish.Allow {
		if subjectMatches(allow, probe) {
			return true, "publish " + allow
		}
	}
	return false, ""
}

// subjectMatches reports whether NATS subject pattern p matches subject s.
func subjectMatches(p, s string) bool {
	pt, st := strings.Split(p, "."), strings.Split(s, ".")
	for i, t := range pt {
		if t == ">" {
			return i < len(st)
		}
		if i >= len(st) || t != "*" && t != st[i] {
			return false
		}
	}
	return len(pt) == len(st)
}

// scheduler checks that a scheduler holds the lease.
func (d *doctor) scheduler(ctx context.Context) {
	b, err := d.js.KeyValue(ctx, d.o.Streams.LeasesBucket())
	if err != nil {
		d.add("scheduler", Warn, "cannot read the leases bucket: "+err.Error(), "")
		return
	}
	e, err := b.Get(ctx, "scheduler")
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		d.add("scheduler", Fail, "no scheduler holds the lease: delayed runs, retries and crons wait",
			"run a scheduler (two replicas: one leads, one stands by)")
		return
	}
	if err != nil {
		d.add("scheduler", Warn, "cannot read the lease: "+err.Error(), "")
		return
	}
	var v struct {
		Holder  string    `json:"holder"`
		Expires time.Time `json:"expires"`
	}
	_ = json.Unmarshal(e.Value(), &v)
	if !v.Expires.IsZero() && v.Expires.Before(d.o.Now().Add(-10*time.Second)) {
		d.add("scheduler", Fail, fmt.Sprintf("the lease of %q expired at %s: no scheduler renews it", v.Holder, v.Expires.Format(time.RFC3339)),
			"run a scheduler (two replicas: one leads, one stands by)")
		return
	}
	d.add("scheduler", Pass, fmt.Sprintf("leader %q", v.Holder), "")
}

// index checks that the run index's counts are fresh.
func (d *doctor) index(ctx context.Context) {
	cp, err := runindex.ReadCheckpoint(ctx, d.js, d.o.Streams)
	if errors.Is(err, runindex.ErrNoCheckpoint) {
		d.add("run index", Warn, "no counts stored: listings and counts read every record",
			"run a scheduler (its leader keeps the index) and let it finish its first pass")
		return
	}
	if err != nil {
		d.add("run index", Warn, "cannot read: "+err.Error(), "")
		return
	}
	age := d.o.Now().Sub(cp.AsOf)
	if age > staleIndexAfter {
		d.add("run index", Fail, fmt.Sprintf("counts last stored %s ago by %q: the index is stale", age.Round(time.Second), cp.Leader),
			"check the scheduler leader's logs (its indexer stores counts about every second)")
		return
	}
	d.add("run index", Pass, fmt.Sprintf("counts stored %s ago by %q", age.Round(time.Second), cp.Leader), "")
}

// functions checks the backlog: functions no live worker serves, runs no
// worker has ever served, runs waiting long.
func (d *doctor) functions(ctx context.Context) {
	f, err := backlog.New(d.js, d.o.Streams).Read(ctx)
	if f == nil {
		d.add("backlog", Warn, "cannot read: "+err.Error(), "")
		return
	}
	if err != nil {
		d.add("backlog", Warn, "partly read: "+err.Error(), "")
	}
	infos, err := kv.ReadFunctions(ctx, d.js, d.o.Streams, "")
	if err != nil {
		d.add("functions", Warn, "cannot read the functions registry: "+err.Error(), "")
	}
	live := map[string]bool{}
	for _, in := range infos {
		if d.o.Now().Sub(in.Seen) <= workerSeenAfter {
			live[in.Name] = true
		}
	}
	if f.Unserved > 0 {
		d.add("functions", Fail, fmt.Sprintf("%d runs wait for functions no worker has ever served", f.Unserved),
			"start workers for them (`jetflow runs list --state pending` names them)")
	}
	var idle []string
	for _, fn := range f.Functions {
		name := "function " + fn.Name
		switch {
		case !live[fn.Name] && fn.Waiting > 0:
			d.add(name, Fail, fmt.Sprintf("no live worker serves it; %d runs wait", fn.Waiting), "start a worker that handles "+fn.Name)
		case !live[fn.Name]:
			idle = append(idle, fn.Name)
		case fn.OldestReadyAge > oldReadyAfter.Seconds():
			d.add(name, Warn, fmt.Sprintf("the oldest ready run has waited %s (%d ready, %d in flight)",
				(time.Duration(fn.OldestReadyAge)*time.Second).Round(time.Second), fn.Ready, fn.InFlight),
				"add workers or raise Concurrency / MaxParallel")
		default:
			d.add(name, Pass, fmt.Sprintf("%d ready, %d in flight", fn.Ready, fn.InFlight), "")
		}
	}
	if len(idle) > 0 {
		slices.Sort(idle)
		d.add("functions", Warn, "no live worker serves "+strings.Join(idle, ", ")+" (nothing waits for them now)",
			"start their workers, or delete their consumers if they are retired")
	}
}
