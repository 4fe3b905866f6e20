package embedded_test

import (
	"os"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/nats-io/nats.go/jetstream"
)

func TestDialStartsAndRemovesAnEmbeddedServer(t *testing.T) {
	dir := t.TempDir() + "/data"
	nc, closeFn, err := embedded.Dial("", embedded.Options{Dir: dir, SyncEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(t.Context()); err != nil {
		t.Fatalf("JetStream not enabled: %v", err)
	}
	url := nc.ConnectedUrl()
	nc2, close2, err := embedded.Dial(url, embedded.Options{})
	if err != nil {
		t.Fatalf("dial the running server by URL: %v", err)
	}
	close2()
	if nc2.IsConnected() {
		t.Fatal("close did not close the connection")
	}
	closeFn()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a caller's Dir must be kept: %v", err)
	}
}
