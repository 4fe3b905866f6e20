package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
)

func init() {
	register("dashboard", "web UI of runs, functions and crons, updated live: dashboard --listen 127.0.0.1:8080", runDashboard)
}

func runDashboard(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "dashboard", "[--listen ADDR] [--base-path /P] [--url URL] [--prefix P]")
	var cf connFlags
	cf.add(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve the dashboard on (port 0 picks a free one); it has no login, keep it on loopback or behind your own auth")
	base := fs.String("base-path", "", "serve under this path, e.g. /jetflow (behind a reverse proxy)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("dashboard: unexpected argument %q", pos[0])
	}
	if *base != "" && !strings.HasPrefix(*base, "/") {
		return fmt.Errorf("dashboard: --base-path %q: must start with /", *base)
	}
	c, err := cf.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	crons, err := scheduler.NewCrons(ctx, c.js, scheduler.CronConfig{Streams: c.sc})
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	stop, err := startDashboard(ctx, *listen, c.p, dashboard.Config{Crons: crons, BasePath: *base})
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(stdout(ctx), "  reading runs from %s (prefix %s)\nCtrl-C stops.\n", cf.url, cf.prefix)
	<-ctx.Done()
	return nil
}

// startDashboard serves the dashboard of p's runs on addr and prints its
// URL; stop ends the open pages' event streams and shuts the server down.
func startDashboard(ctx context.Context, addr string, p *producer.Producer, cfg dashboard.Config) (stop func(), err error) {
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
		Handler:           dashboard.New(p, cfg),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String() + strings.TrimRight(cfg.BasePath, "/") + "/"
	fmt.Fprintf(out, "jetflow dashboard: %s\n", url)
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !isLoopback(host) {
		fmt.Fprintf(stderr(ctx), "warning: the dashboard has no login and %s is not a loopback address: anyone who reaches it can see and cancel runs\n", host)
	}
	return func() {
		cancelStreams()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
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
