package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/nats-io/nats.go/jetstream"
)

type EmailArgs struct {
	To string `json:"to"`
}

var SendEmail = jetflow.Define[EmailArgs]("emails.send")

// The dashboard is an http.Handler: mount it on any server. Here under
// /jetflow/, and read through its JSON API.
func Example() {
	dir, err := os.MkdirTemp("", "jetflow-dashboard-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			log.Print(err)
		}
	}()
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
	ctx := context.Background()
	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := p.RunAfter(ctx, time.Hour, SendEmail.With(EmailArgs{To: "a@b.c"}), producer.WithID("welcome-1")); err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/jetflow/", dashboard.New(p, dashboard.Config{BasePath: "/jetflow"}))
	web := httptest.NewServer(mux) // in a program: http.ListenAndServe("127.0.0.1:8080", mux)
	defer web.Close()

	resp, err := http.Get(web.URL + "/jetflow/api/runs?state=pending")
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := resp.Body.Close(); err != nil {
			log.Print(err)
		}
	}()
	var page struct {
		Runs []jetflow.Run `json:"runs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		log.Fatal(err)
	}
	for _, r := range page.Runs {
		fmt.Println(r.ID, r.Name, r.State, string(r.Args))
	}
	// Output:
	// welcome-1 emails.send pending {"to":"a@b.c"}
}
