// Package testserver starts a real embedded nats-server with JetStream on
// file storage under t.TempDir() for tests. There are no mocks of NATS.
package testserver

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Env is a running server and a connection to it.
type Env struct {
	T    testing.TB
	Dir  string
	Port int
	S    *embedded.Server
	NC   *nats.Conn
	JS   jetstream.JetStream

	maxPayload int32
}

// Start starts a server on a random port and connects to it. Everything is
// cleaned up when the test ends.
func Start(t testing.TB) *Env { return StartMaxPayload(t, 0) }

// StartMaxPayload is Start with the server taking messages of at most max
// bytes (0: the embedded default, 8 MB): tests of what happens at the
// limit, at a size they can send quickly.
func StartMaxPayload(t testing.TB, max int32) *Env {
	t.Helper()
	e := &Env{T: t, Dir: t.TempDir(), maxPayload: max}
	e.boot(-1)
	e.Port = e.S.Addr().(*net.TCPAddr).Port
	nc, err := e.S.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e.NC, e.JS = nc, js
	t.Cleanup(func() {
		e.NC.Close()
		if e.S != nil {
			e.S.Stop()
		}
	})
	return e
}

func (e *Env) boot(port int) {
	e.T.Helper()
	// A sync interval of a second rather than the product's 10 ms: with a
	// very short interval, nats-server v2.15.2's file store races on its
	// sync timer at stream creation (fileStore.setSyncTimer), which -race
	// reports. Durability settings do not change any behaviour under test.
	s, err := embedded.Start(embedded.Options{Dir: e.Dir, Port: port, SyncEvery: time.Second, MaxPayload: e.maxPayload})
	if err != nil {
		e.T.Fatal(err)
	}
	e.S = s
}

// Restart stops the server and starts it again on the same port and data
// directory; clients reconnect by themselves.
func (e *Env) Restart() {
	e.T.Helper()
	e.S.Stop()
	e.boot(e.Port)
}

// RestartForgettingDeliveries stops the server, removes the state of every
// consumer of stream (which messages were delivered and acknowledged), and
// starts it again: what a server killed before that state reached its disk
// does, redelivering the messages in flight at once as first deliveries.
// The messages themselves are kept.
func (e *Env) RestartForgettingDeliveries(stream string) {
	e.T.Helper()
	e.S.Stop()
	obs := string(filepath.Separator) + filepath.Join("streams", stream, "obs") + string(filepath.Separator)
	err := filepath.WalkDir(e.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "o.dat" && strings.Contains(path, obs) {
			return os.Remove(path)
		}
		return nil
	})
	if err != nil {
		e.T.Fatal(err)
	}
	e.boot(e.Port)
}

// Connect opens another connection (another "process"), closed at cleanup.
func (e *Env) Connect() (*nats.Conn, jetstream.JetStream) {
	e.T.Helper()
	nc, err := e.S.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		e.T.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(nc.Close)
	return nc, js
}

// StreamMsgs is the number of messages stream name holds now.
func (e *Env) StreamMsgs(t testing.TB, name string) uint64 {
	t.Helper()
	st, err := e.JS.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Eventually polls cond every 10 ms until it is true or the deadline passes.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StaleMirror makes about half of the direct gets of stream answer from a
// stream that is behind, as a replica does on a cluster (a moment behind
// its leader, or up to 10% behind after a restart): a mirror of stream
// named name that answers stream's direct gets (MirrorDirect) and holds only
// what src selects (its filter subject, or its subject transforms). A
// mirror joins the direct gets once it has caught up: StaleMirror returns
// when it holds want messages.
func (e *Env) StaleMirror(t testing.TB, stream, name string, src jetstream.StreamSource, want uint64) {
	t.Helper()
	src.Name = stream
	if _, err := e.JS.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: name, Storage: jetstream.FileStorage, MirrorDirect: true, Mirror: &src,
		MaxMsgsPerSubject: 1, // a KV handle may read it (KV_<name>)
	}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 20*time.Second, "the stale mirror caught up", func() bool { return e.StreamMsgs(t, name) >= want })
}

// StaleRuns makes about half of the direct gets of the runs bucket (the
// default prefix's, provisioned) answer from a replica that lacks every
// record: a MirrorDirect mirror that holds one record of its own
// (decoy-1). It returns once a direct get of a record the mirror lacks
// (probe-1) has said there is none.
func (e *Env) StaleRuns(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	const bucket = "jetflow_runs"
	for _, id := range []string{"decoy-1", "probe-1"} {
		rec := `{"id":"` + id + `","name":"decoy","state":"success"}`
		if _, err := e.JS.Publish(ctx, "$KV."+bucket+"."+id, []byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	e.StaleMirror(t, "KV_"+bucket, "STALE_RUNS", jetstream.StreamSource{FilterSubject: "$KV." + bucket + ".decoy-1"}, 1)
	kvb, err := e.JS.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 20*time.Second, "a direct get answered by the stale mirror", func() bool {
		_, err := kvb.Get(ctx, "probe-1")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
}
