package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// restartable is an embedded server (the product's default durability, a
// new temporary directory) that can be stopped and started again on the
// same port and directory, its clients reconnecting.
type restartable struct {
	dir  string
	port int
	srv  *embedded.Server
}

func startRestartable(name string) (*restartable, error) {
	dir, err := os.MkdirTemp("", "jetflow-bench-"+name+"-")
	if err != nil {
		return nil, err
	}
	srv, err := embedded.Start(embedded.Options{Dir: dir, SyncEvery: time.Duration(syncEvery.Load())})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Stop()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: server address %v", srv.Addr())
	}
	return &restartable{dir: dir, port: addr.Port, srv: srv}, nil
}

// restart stops the server, waits down, and starts it again; it returns
// when the server accepts clients again.
func (r *restartable) restart(down time.Duration) (time.Time, error) {
	r.srv.Stop()
	time.Sleep(down)
	srv, err := embedded.Start(embedded.Options{Dir: r.dir, Port: r.port, SyncEvery: time.Duration(syncEvery.Load())})
	if err != nil {
		return time.Time{}, fmt.Errorf("bench: server restart: %w", err)
	}
	r.srv = srv
	return time.Now(), nil
}

func (r *restartable) stop() {
	r.srv.Stop()
	os.RemoveAll(r.dir)
}

// The restart figure's workflows note when each woke (one bench at a time).
var (
	wfRestartMu   sync.Mutex
	wfRestartWoke map[string]time.Time
)

// wfRestartDef sleeps until Due, then notes when its code went on.
var wfRestartDef = workflow.Define("bench.wf.restart", func(wf *workflow.Context, in wfBenchSleep) (int, error) {
	wf.SleepUntil(in.Due)
	_, err := workflow.Step(wf, "woke", func(context.Context) (int, error) {
		wfRestartMu.Lock()
		if _, ok := wfRestartWoke[wf.ID()]; !ok {
			wfRestartWoke[wf.ID()] = time.Now()
		}
		wfRestartMu.Unlock()
		return 0, nil
	})
	return 0, err
})

// wfRestartFigures is what the restart figure measured.
type wfRestartFigures struct {
	affected int         // workflows due after the server stopped
	late     Percentiles // their resume's lateness: woke - max(due, back)
	down     time.Duration

	ids           []string
	dues          []time.Time
	stopped, back time.Time
}

// wfBenchRestart starts m workflows due over 4 s from 5 s from now, and,
// once they have parked, restarts the server (down for down) 1 s after
// the first is due: it returns the lateness of the resumes of those due
// after the server stopped, each measured from its due time or from when
// the server accepted clients again, whichever is later.
func wfBenchRestart(ctx context.Context, p *producer.Producer, js jetstream.JetStream, scfg streams.Config, restart func(down time.Duration) (time.Time, error), m int, down time.Duration) (wfRestartFigures, error) {
	var f wfRestartFigures
	wfRestartMu.Lock()
	wfRestartWoke = map[string]time.Time{}
	wfRestartMu.Unlock()
	parked, err := watchParked(js, scfg)
	if err != nil {
		return f, err
	}
	defer parked.stop()
	first := time.Now().Add(5 * time.Second)
	ids := make([]string, m)
	dues := make([]time.Time, m)
	if err := wfBenchStart(ctx, m, func(ctx context.Context, i int) error {
		dues[i] = first.Add(4 * time.Second * time.Duration(i) / time.Duration(m))
		id, err := workflow.Start(ctx, p, wfRestartDef, wfBenchSleep{Due: dues[i]})
		ids[i] = id
		return err
	}); err != nil {
		return f, fmt.Errorf("restart: %w", err)
	}
	if err := poolBenchWait(ctx, 5*time.Minute, func() bool { return parked.all(ids) }); err != nil {
		return f, fmt.Errorf("restart: parking: %w", err)
	}
	time.Sleep(time.Until(first.Add(time.Second)))
	stopped := time.Now()
	back, err := restart(down)
	if err != nil {
		return f, err
	}
	f.down = back.Sub(stopped)
	if err := poolBenchWait(ctx, 5*time.Minute, func() bool {
		wfRestartMu.Lock()
		defer wfRestartMu.Unlock()
		return len(wfRestartWoke) >= m
	}); err != nil {
		return f, fmt.Errorf("restart: %d of %d resumed: %w", len(wfRestartWoke), m, err)
	}
	var late []time.Duration
	wfRestartMu.Lock()
	for i, id := range ids {
		if dues[i].Before(stopped) {
			continue
		}
		from := dues[i]
		if from.Before(back) {
			from = back
		}
		late = append(late, wfRestartWoke[id].Sub(from))
	}
	wfRestartMu.Unlock()
	f.affected, f.late = len(late), percentiles(late)
	f.ids, f.dues, f.stopped, f.back = ids, dues, stopped, back
	return f, nil
}
