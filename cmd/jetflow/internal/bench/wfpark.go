package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// wfParked counts the workflows whose cursor says they parked (a
// subscription to the journal's cursor keys: each workflow's first park
// writes its cursor waiting).
type wfParked struct {
	mu  sync.Mutex
	ids map[string]bool
	sub *nats.Subscription
}

// watchParked starts counting the workflows that park.
func watchParked(js jetstream.JetStream, scfg streams.Config) (*wfParked, error) {
	w := &wfParked{ids: map[string]bool{}}
	bucket := scfg.WithDefaults().JournalBucket()
	pfx := streams.KVSubject(bucket, "")
	sub, err := js.Conn().Subscribe(streams.KVSubject(bucket, "*.wf"), func(m *nats.Msg) {
		var cur struct {
			Waiting bool `json:"waiting"`
		}
		if json.Unmarshal(m.Data, &cur) != nil || !cur.Waiting {
			return
		}
		id := strings.TrimSuffix(strings.TrimPrefix(m.Subject, pfx), ".wf")
		w.mu.Lock()
		w.ids[id] = true
		w.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	w.sub = sub
	return w, js.Conn().Flush()
}

func (w *wfParked) stop() { _ = w.sub.Unsubscribe() }

// all reports whether every workflow of ids has parked.
func (w *wfParked) all(ids []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ids) < len(ids) {
		return false
	}
	for _, id := range ids {
		if !w.ids[id] {
			return false
		}
	}
	return true
}

// wfBenchPark starts n workflows that each sleep until an hour from now
// (32 Starts at a time, as the 3-step figure starts its workflows) and
// returns the time from the first Start to the last park, and the ids.
func wfBenchPark(ctx context.Context, p *producer.Producer, js jetstream.JetStream, scfg streams.Config, n int) (time.Duration, []string, error) {
	parked, err := watchParked(js, scfg)
	if err != nil {
		return 0, nil, err
	}
	defer parked.stop()
	ids := make([]string, n)
	due := time.Now().Add(time.Hour)
	start := time.Now()
	if err := wfBenchStart(ctx, n, func(ctx context.Context, i int) error {
		id, err := workflow.Start(ctx, p, wfBenchSleepDef, wfBenchSleep{Due: due})
		ids[i] = id
		return err
	}); err != nil {
		return 0, nil, fmt.Errorf("parking workflows: %w", err)
	}
	if err := poolBenchWait(ctx, 10*time.Minute, func() bool { return parked.all(ids) }); err != nil {
		return 0, nil, fmt.Errorf("parking workflows: %w", err)
	}
	return time.Since(start), ids, nil
}
