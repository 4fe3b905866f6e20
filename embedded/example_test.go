package embedded_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/nats-io/nats.go/jetstream"
)

func ExampleStart() {
	dir, err := os.MkdirTemp("", "jetflow-embedded-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	srv, err := embedded.Start(embedded.Options{Dir: dir})
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
