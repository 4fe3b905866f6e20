package streams_test

import (
	"fmt"
	"sort"
	"time"

	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
)

func ExampleConfig() {
	var c streams.Config // the zero value: prefix "jetflow"
	fmt.Println(c.FunctionStream())
	fmt.Println(c.FunctionSubject("emails.send", "order-42"))
	fmt.Println(c.RunsBucket(), c.DelayedBucket(), c.CancelSubject())

	c = streams.Config{Prefix: "shop"}
	fmt.Println(c.FunctionStream(), c.FunctionSubject("emails.send", "order-42"))
	// Output:
	// JETFLOW_FN
	// jetflow.fn.emails.send.order-42
	// jetflow_runs jetflow_delayed jetflow.cancel
	// SHOP_FN shop.fn.emails.send.order-42
}

func ExampleConfig_Message() {
	// The message that starts a run: args as the body, the rest as headers
	// (docs/wire-format.md). A retry's Nats-Msg-Id is <id>/<attempt>.
	var c streams.Config
	m := c.Message(streams.Envelope{
		Function:    "emails.send",
		ID:          "order-42",
		Attempt:     2,
		MaxAttempts: 3,
		Timeout:     30 * time.Second,
		Scheduled:   time.Date(2026, 12, 25, 9, 0, 0, 0, time.UTC),
		Args:        []byte(`{"to":"a@b.c"}`),
	})
	fmt.Println(m.Subject, string(m.Data))
	keys := make([]string, 0, len(m.Header))
	for k := range m.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("%s: %s\n", k, m.Header.Get(k))
	}
	// Output:
	// jetflow.fn.emails.send.order-42 {"to":"a@b.c"}
	// Jetflow-Attempt: 2
	// Jetflow-Max-Attempts: 3
	// Jetflow-Scheduled: 2026-12-25T09:00:00Z
	// Jetflow-Timeout: 30s
	// Nats-Msg-Id: order-42/2
}

func ExampleConfig_ParseMessage() {
	// What a worker reads from a message another language published: only
	// the subject, Nats-Msg-Id and the JSON body are needed.
	var c streams.Config
	h := nats.Header{}
	h.Set("Nats-Msg-Id", "order-42")
	e, err := c.ParseMessage("jetflow.fn.emails.send.order-42", h, []byte(`{"to":"a@b.c"}`))
	fmt.Println(e.Function, e.ID, e.Attempt, string(e.Args), err)

	h.Set("Jetflow-Timeout", "soon")
	_, err = c.ParseMessage("jetflow.fn.emails.send.order-42", h, nil)
	fmt.Println(err)
	// Output:
	// emails.send order-42 1 {"to":"a@b.c"} <nil>
	// bad header Jetflow-Timeout: "soon"
}
