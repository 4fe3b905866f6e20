package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/workflow"
)

func init() {
	register("dashboard", "web UI of runs, functions and crons, updated live: dashboard --listen 127.0.0.1:8080", runDashboard)
}

func runDashboard(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "dashboard", "[--listen ADDR] [--base-path /P] [--allow-host HOST]... [--token T | --basic-auth USER:PASS] [--insecure] [--url URL] [--prefix P]")
	var cf connFlags
	cf.add(fs)
	cf.persistent = true // it serves until stopped, across server restarts
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve the dashboard on (port 0 picks a free one); beyond loopback it needs --token or --basic-auth")
	base := fs.String("base-path", "", "serve under this path, e.g. /jetflow (behind a reverse proxy)")
	var sec dashboardSecurity
	sec.add(fs, "")
	asJSON := fs.Bool("json", false, "print where it serves as one JSON object ({dashboard, login}) instead of text")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("dashboard: unexpected argument %q", pos[0])
	}
	if *base != "" && !strings.HasPrefix(*base, "/") {
		return fmt.Errorf("dashboard: --base-path %q: must start with /", *base)
	}
	dcfg, err := sec.config(*listen)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	// Crons with pause and resume where the user may write the crons
	// bucket; read-only (trigger now only) where it may not.
	dcfg.Crons, dcfg.BasePath = dashboard.CronsOf(c.p), *base
	if crons, err := scheduler.NewCrons(ctx, c.js, scheduler.CronConfig{Streams: c.sc}); err == nil {
		dcfg.Crons = crons
	}
	dcfg.Steps = workflow.StepsFunc(c.p) // workflows' steps on their run pages
	sec.json = *asJSON
	stop, err := startDashboard(ctx, *listen, c.p, dcfg, sec)
	if err != nil {
		return err
	}
	defer stop()
	info := stdout(ctx)
	if *asJSON {
		info = stderr(ctx)
	}
	fmt.Fprintf(info, "  reading runs from %s (prefix %s)\nCtrl-C stops.\n", cf.displayURL(), cf.prefix)
	<-ctx.Done()
	if lost := connLost(ctx); lost != nil {
		// Not up and answering 500s: the connection will not come back.
		return fmt.Errorf("dashboard: %w", lost)
	}
	return nil
}

// dashboardSecurity are the dashboard's Host and login flags (named with
// a prefix in `dev`, where --token etc. would be ambiguous).
type dashboardSecurity struct {
	prefix    string
	allow     stringList
	token     string
	basicAuth string
	insecure  bool
	// json: startDashboard prints one JSON object (url, login) instead of
	// text.
	json bool
}

// stringList is a repeatable flag; each value may also be a
// comma-separated list.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error {
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			*l = append(*l, x)
		}
	}
	return nil
}

func (d *dashboardSecurity) add(fs *flag.FlagSet, prefix string) {
	d.prefix = prefix
	fs.Var(&d.allow, prefix+"allow-host", "a Host name (or host:port) the dashboard answers besides loopback ones and the --listen address; repeatable; * for any")
	fs.StringVar(&d.token, prefix+"token", os.Getenv("JETFLOW_DASHBOARD_TOKEN"), "require this bearer token: Authorization: Bearer, or open the URL once with ?token= (env JETFLOW_DASHBOARD_TOKEN)")
	fs.StringVar(&d.basicAuth, prefix+"basic-auth", os.Getenv("JETFLOW_DASHBOARD_BASIC_AUTH"), "require HTTP basic authentication as USER:PASS (env JETFLOW_DASHBOARD_BASIC_AUTH)")
	fs.BoolVar(&d.insecure, prefix+"insecure", false, "serve without a login on a non-loopback address (anyone who reaches it can read and cancel runs)")
}

// config checks the flags against the listen address and returns the
// dashboard's Host allow-list and login.
func (d *dashboardSecurity) config(listen string) (dashboard.Config, error) {
	var cfg dashboard.Config
	if d.token != "" && d.basicAuth != "" {
		return cfg, fmt.Errorf("--%stoken and --%sbasic-auth: choose one", d.prefix, d.prefix)
	}
	switch {
	case d.token != "":
		cfg.Middleware = dashboard.BearerToken(d.token)
	case d.basicAuth != "":
		user, pass, ok := strings.Cut(d.basicAuth, ":")
		if !ok || user == "" || pass == "" {
			return cfg, fmt.Errorf("--%sbasic-auth: want USER:PASS", d.prefix)
		}
		cfg.Middleware = dashboard.BasicAuth(user, pass)
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return cfg, fmt.Errorf("--listen %q: %w", listen, err)
	}
	if !isLoopback(host) && cfg.Middleware == nil && !d.insecure {
		where := host
		if where == "" || isUnspecified(host) {
			where = "every interface"
		}
		return cfg, fmt.Errorf("listening on %s without a login: anyone who reaches it could read run arguments and results and cancel runs; set --%stoken or --%sbasic-auth (or --%sinsecure to do it anyway)", where, d.prefix, d.prefix, d.prefix)
	}
	cfg.AllowedHosts = append(cfg.AllowedHosts, d.allow...)
	cfg.AllowedHosts = append(cfg.AllowedHosts, listenHosts(host)...)
	return cfg, nil
}

// listenHosts are the Host names a browser uses to reach a server
// listening on host: host itself, or, for every interface, the addresses
// of this machine's interfaces and its host name.
func listenHosts(host string) []string {
	if host != "" && !isUnspecified(host) {
		return []string{host}
	}
	out := []string{"0.0.0.0", "::"}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				out = append(out, ipn.IP.String())
			}
		}
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		out = append(out, h)
	}
	return out
}

func isUnspecified(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// startDashboard serves the dashboard of p's runs on addr and prints its
// URL; stop ends the open pages' event streams and shuts the server down.
func startDashboard(ctx context.Context, addr string, p *producer.Producer, cfg dashboard.Config, sec dashboardSecurity) (stop func(), err error) {
	out := stdout(ctx)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(stderr(ctx), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	// Event streams never end by themselves: they are request contexts
	// of this base context, canceled before Shutdown waits for them.
	baseCtx, cancelStreams := context.WithCancel(context.WithoutCancel(ctx))
	srv := &http.Server{
		Handler:           withProbes(ctx, p, dashboard.New(p, cfg)), // health.go
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String() + strings.TrimRight(cfg.BasePath, "/") + "/"
	login := "none"
	switch {
	case sec.token != "":
		login = "token"
	case sec.basicAuth != "":
		login = "basic"
	}
	if sec.json {
		_ = json.NewEncoder(out).Encode(map[string]string{"dashboard": url, "login": login}) // an output gone leaves nobody to tell
	} else {
		fmt.Fprintf(out, "jetflow dashboard: %s\n", url)
		switch login {
		case "token":
			fmt.Fprintf(out, "  login: open it once with ?token=<the --%stoken value>, or send Authorization: Bearer\n", sec.prefix)
		case "basic":
			fmt.Fprintf(out, "  login: HTTP basic authentication (--%sbasic-auth)\n", sec.prefix)
		}
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !isLoopback(host) && cfg.Middleware == nil {
		fmt.Fprintf(stderr(ctx), "WARNING: the dashboard has no login and %s is not a loopback address: anyone who reaches it can read run arguments and results and cancel runs\n", host)
	}
	return func() {
		cancelStreams()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close() // a graceful stop timed out: what Close returns changes nothing more
		}
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(stderr(ctx), "dashboard: %v\n", err)
		}
	}, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
