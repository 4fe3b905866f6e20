package embedded_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/nats-io/nats.go/jetstream"
)

func ExampleStart() {
	dir, err := os.MkdirTemp("", "jetflow-embedded-")
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			log.Print(err)
		}
	}()

	// SyncEvery 1 s only to keep "go test -race" quiet about a nats-server
	// v2.15.2 timer race; the default (10 ms) is what services should use.
	srv, err := embedded.Start(embedded.Options{Dir: dir, SyncEvery: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	nc, err := srv.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	info, err := js.AccountInfo(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("JetStream streams:", info.Streams)
	// Output:
	// JetStream streams: 0
}
