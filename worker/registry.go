package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
)

// FunctionInfo is what a worker publishes about a function it serves, in the
// functions bucket under <worker id>.<function> with a 30 s TTL renewed
// every 10 s. The CLI reads it to list functions and to warn about runs
// enqueued for a function nobody serves.
type FunctionInfo struct {
	Name        string        `json:"name"`
	Kind        jetflow.Kind  `json:"kind"`
	Worker      string        `json:"worker"`
	Concurrency int           `json:"concurrency"`
	MaxParallel int           `json:"maxParallel"`
	MaxAttempts int           `json:"maxAttempts"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	Seen        time.Time     `json:"seen"`
}

func (w *Worker) register(ctx context.Context, fns []*fnEntry) error {
	bucket := w.scfg.FunctionsBucket()
	for _, e := range fns {
		attempts := e.opts.MaxAttempts
		if e.kind == jetflow.AtMostOnce {
			attempts = 1
		}
		fi := FunctionInfo{
			Name: e.name, Kind: e.kind, Worker: w.cfg.ID, Concurrency: e.opts.Concurrency,
			MaxParallel: e.opts.MaxParallel, MaxAttempts: attempts, Timeout: e.opts.Timeout,
			Seen: w.now().UTC(),
		}
		data, _ := json.Marshal(fi)
		m := &nats.Msg{Subject: streams.KVSubject(bucket, w.cfg.ID+"."+e.name), Header: nats.Header{"Nats-TTL": []string{"30s"}}, Data: data}
		if _, err := w.js.PublishMsg(ctx, m); err != nil {
			return err
		}
	}
	return nil
}
