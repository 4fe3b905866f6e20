package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverSchema is the PostgreSQL schema the River phase creates, migrates,
// and drops afterwards: every run starts on empty tables, and nothing
// else in the database is touched.
const riverSchema = "jetflow_peers_river"

// riverArgs are the River job's arguments: the same JSON as jetflow's.
type riverArgs struct {
	noopArgs
}

func (riverArgs) Kind() string { return "peers_noop" }

// riverWorker is the no-op River worker; it counts the jobs it ran.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	n       int64
	handled atomic.Int64
	done    chan struct{}
}

func (w *riverWorker) Work(context.Context, *river.Job[riverArgs]) error {
	if w.handled.Add(1) == w.n {
		close(w.done)
	}
	return nil
}

// riverE2E inserts n no-op jobs with InsertMany (1,000 a call), then starts
// a River client (one queue, maxWorkers workers) and waits until all n
// are completed. The rate is n over the time from the first insert to the
// last job's finalized_at.
func riverE2E(ctx context.Context, dsn string, n, size, maxWorkers int) (float64, string, error) {
	if dsn == "" {
		return 0, "", skipf("no -pg DSN given")
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return 0, "", skipf("-pg: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return 0, "", skipf("PostgreSQL at -pg unreachable: %v", err)
	}
	defer pool.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	var version string
	err = pool.QueryRow(pctx, "SHOW server_version").Scan(&version)
	cancel()
	if err != nil {
		return 0, "", skipf("PostgreSQL at -pg unreachable: %v", err)
	}
	drop := func() error {
		_, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{riverSchema}.Sanitize()+" CASCADE")
		return err
	}
	if err := drop(); err != nil {
		return 0, "", fmt.Errorf("drop schema %s: %w", riverSchema, err)
	}
	defer drop()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{riverSchema}.Sanitize()); err != nil {
		return 0, "", fmt.Errorf("create schema %s: %w", riverSchema, err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: riverSchema, Logger: logger})
	if err != nil {
		return 0, "", fmt.Errorf("river migrate: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, "", fmt.Errorf("river migrate: %w", err)
	}

	wk := &riverWorker{n: int64(n), done: make(chan struct{})}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, wk); err != nil {
		return 0, "", err
	}
	client, err := river.NewClient(driver, &river.Config{
		Schema:  riverSchema,
		Logger:  logger,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers: workers,
	})
	if err != nil {
		return 0, "", fmt.Errorf("river client: %w", err)
	}

	a := riverArgs{args(size)}
	params := make([]river.InsertManyParams, 1000)
	for i := range params {
		params[i].Args = a
	}
	start := time.Now()
	for done := 0; done < n; {
		k := min(len(params), n-done)
		if _, err := client.InsertMany(ctx, params[:k]); err != nil {
			return 0, "", fmt.Errorf("river insert at job %d: %w", done, err)
		}
		done += k
	}
	inserted := time.Since(start)
	if err := client.Start(ctx); err != nil {
		return 0, "", fmt.Errorf("river start: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = client.Stop(sctx)
		cancel()
	}()
	select {
	case <-wk.done:
	case <-ctx.Done():
		return 0, "", fmt.Errorf("%d of %d River jobs worked: %w", wk.handled.Load(), n, ctx.Err())
	}
	// Completions are written in batches after Work returns: wait for
	// all n rows to be completed, and take the last one's time.
	q := "SELECT count(*), max(finalized_at) FROM " + pgx.Identifier{riverSchema, "river_job"}.Sanitize() + " WHERE state = 'completed'"
	for {
		var got int
		var last *time.Time
		if err := pool.QueryRow(ctx, q).Scan(&got, &last); err != nil {
			return 0, "", fmt.Errorf("river count: %w", err)
		}
		if got == n && last != nil {
			elapsed := last.Sub(start)
			return rate(n, elapsed), fmt.Sprintf("PostgreSQL %s; inserted in %s, all completed at %s",
				version, inserted.Round(time.Millisecond), elapsed.Round(time.Millisecond)), nil
		}
		select {
		case <-ctx.Done():
			return 0, "", fmt.Errorf("%d of %d River jobs completed: %w", got, n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
