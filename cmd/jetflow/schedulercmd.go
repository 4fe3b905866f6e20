package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/jetflow-dev/jetflow/scheduler"
)

func init() {
	register("scheduler", "run a scheduler (delayed runs, crons, repair) with its probes and scaling endpoint: scheduler --listen :8080", runScheduler)
}

// runScheduler runs `jetflow scheduler`: a scheduler process for a
// deployment (docs/deploy.md), serving /livez, /readyz and /scaling on
// --listen, until SIGTERM or SIGINT; then it stops (readiness first).
func runScheduler(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "scheduler", "[--listen ADDR] [--id ID]")
	var cf connFlags
	cf.add(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve /livez, /readyz and /scaling on; empty: none")
	id := fs.String("id", "", "this scheduler's ID in the lease (default: generated)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("scheduler: unexpected argument %q", pos[0])
	}
	nc, js, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	s, err := scheduler.New(ctx, js, scheduler.Config{Streams: cf.streams(), ID: *id})
	if err != nil {
		return err
	}
	if *listen != "" {
		mux := http.NewServeMux()
		mux.Handle("/scaling", s.ScalingHandler())
		mux.Handle("/", s.Health()) // /livez, /readyz
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("scheduler: --listen: %w", err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
		fmt.Fprintf(stdout(ctx), "scheduler: probes and scaling on http://%s\n", ln.Addr())
	}
	if err := s.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.Stop(sctx); err != nil {
		return err
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
