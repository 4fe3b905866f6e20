package doctor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The fsync check reads a real server's monitoring endpoint: sync always
// passes; the server's default (every 2 minutes) on a single server fails.
func TestFsyncFromTheMonitoringEndpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		always bool
		want   Level
	}{{true, Pass}, {false, Fail}} {
		opts := &server.Options{JetStream: true, StoreDir: t.TempDir(), Port: -1, HTTPPort: -1, SyncAlways: c.always, NoLog: true, NoSigs: true}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("server not ready")
		}
		t.Cleanup(s.Shutdown)
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		d := &doctor{nc: nc, js: js, o: Options{Monitor: fmt.Sprintf("http://%s", s.MonitorAddr().String())}}
		d.o.HTTP = nil
		d.o = withDefaults(d.o)
		d.fsync(context.Background())
		if len(d.out) != 1 || d.out[0].Level != c.want {
			t.Errorf("sync always %v: %+v, want %s", c.always, d.out, c.want)
		}
	}
}
