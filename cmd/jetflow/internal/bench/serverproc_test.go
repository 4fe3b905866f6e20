package bench

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A server started in a process of its own answers JetStream requests, and
// its stop ends the process and removes its data.
func TestServerProcessServesJetStream(t *testing.T) {
	t.Parallel()
	url, stop, err := startServerProcess("proc")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(context.Background()); err != nil {
		t.Fatalf("account info from the server process: %v", err)
	}
	nc.Close()
	stop()
	if nc, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatalf("the server process at %s still accepts clients after stop", url)
	}
}
