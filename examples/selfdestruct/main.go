// Command selfdestruct is the self-destructing message of Convex's
// scheduling docs, on jetflow: storing a message schedules a run of
// messages.destruct five seconds later, and that run deletes the message.
//
//	go run ./examples/selfdestruct                  # embedded server in a temp dir
//	go run ./examples/selfdestruct --after 1s       # shorter fuse
//	go run ./examples/selfdestruct --url nats://127.0.0.1:4222
//
// Convex's sendExpiringMessage is a mutation that inserts the message and
// schedules the destruct atomically. Here it is a retryable jetflow function,
// messages.send: its handler stores the message and schedules the destruct
// with j.RunAfter, and a run scheduled by a retryable handler is committed
// only if that attempt succeeds. A failed attempt leaves no destruct behind,
// and a retried one does not schedule it twice.
//
// Producer, worker and scheduler run in this one process; each could run in
// its own. The program exits when the message is gone.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// SendArgs are the arguments of messages.send.
type SendArgs struct {
	Body         string `json:"body"`
	Author       string `json:"author"`
	SelfDestruct bool   `json:"selfDestruct"`
}

// DestructArgs are the arguments of messages.destruct.
type DestructArgs struct {
	MessageID string `json:"messageId"`
}

// The two functions, defined once and shared by producer and worker.
var (
	SendMessage = jetflow.Define[SendArgs]("messages.send")
	Destruct    = jetflow.Define[DestructArgs]("messages.destruct")
)

// Message is what the example stores in its own KV bucket, the "messages
// table".
type Message struct {
	Author string `json:"author"`
	Body   string `json:"body"`
}

// clock formats the times the example prints.
const clock = "15:04:05.000 UTC"

// messagesBucket is the example's own table, beside jetflow's buckets.
const messagesBucket = "example_messages"

func main() {
	url := flag.String("url", "", "NATS server URL; default: an embedded server in a temp dir")
	after := flag.Duration("after", 5*time.Second, "delay before a message self-destructs")
	verbose := flag.Bool("v", false, "log jetflow's info messages to stderr")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *after, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "selfdestruct:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, after time.Duration, verbose bool) error {
	nc, closeAll, err := embedded.Dial(url, embedded.Options{})
	if err != nil {
		return err
	}
	defer closeAll()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}

	messages, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: messagesBucket})
	if err != nil {
		return fmt.Errorf("messages bucket: %w", err)
	}

	// Worker: the two handlers.
	w, err := newWorker(ctx, js, logger, messages, after)
	if err != nil {
		return err
	}

	// Scheduler: publishes the destruct run when it is due.
	s, err := scheduler.New(ctx, js, scheduler.Config{Logger: logger})
	if err != nil {
		return err
	}
	p, err := producer.New(ctx, js, producer.Config{Logger: logger})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
		_ = s.Stop(sctx)
	}()

	return sendMessages(ctx, p, messages, after)
}

// newWorker is a worker with the two handlers: messages.send stores the
// message in messages and, if it self-destructs, schedules
// messages.destruct after the delay; messages.destruct deletes it.
func newWorker(ctx context.Context, js jetstream.JetStream, logger *slog.Logger, messages jetstream.KeyValue, after time.Duration) (*worker.Worker, error) {
	w, err := worker.New(ctx, js, worker.Config{Logger: logger})
	if err != nil {
		return nil, err
	}
	worker.Handle(w, SendMessage, func(ctx context.Context, j *worker.Job[SendArgs]) error {
		// The run id names the message, so a retried attempt overwrites
		// the same message instead of inserting a second one.
		id := "msg-" + j.ID()
		data, err := json.Marshal(Message{Author: j.Args.Author, Body: j.Args.Body})
		if err != nil {
			return jetflow.Permanent(err)
		}
		if _, err := messages.Put(ctx, id, data); err != nil {
			return err
		}
		if j.Args.SelfDestruct {
			if _, err := j.RunAfter(ctx, after, Destruct.With(DestructArgs{MessageID: id})); err != nil {
				return err
			}
		}
		return j.SetResult(id)
	})
	worker.Handle(w, Destruct, func(ctx context.Context, j *worker.Job[DestructArgs]) error {
		err := messages.Delete(ctx, j.Args.MessageID)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		}
		fmt.Printf("messages.destruct: message deleted at %s\n", time.Now().UTC().Format(clock))
		return nil
	})
	return w, nil
}

// sendMessages is the producer's side: two messages, one of them
// self-destructing. It waits for both to be stored and prints the
// messages table, then waits for the destruct run and prints the table
// again.
func sendMessages(ctx context.Context, p *producer.Producer, messages jetstream.KeyValue, after time.Duration) error {
	expiring, err := p.Enqueue(ctx, SendMessage.With(SendArgs{
		Author: "alice", Body: fmt.Sprintf("this message self-destructs in %s", after), SelfDestruct: true,
	}))
	if err != nil {
		return err
	}
	plain, err := p.Enqueue(ctx, SendMessage.With(SendArgs{Author: "bob", Body: "this message stays"}))
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, after+time.Minute)
	defer cancel()
	sent, err := p.Wait(wctx, expiring)
	if err != nil {
		return fmt.Errorf("messages.send: %w", err)
	}
	if r, err := p.Wait(wctx, plain); err != nil || r.State != jetflow.Success {
		return fmt.Errorf("messages.send of bob's message: %v %v", r, err)
	}
	if sent.State != jetflow.Success || len(sent.Children) != 1 {
		return fmt.Errorf("messages.send ended %s with %d scheduled runs: %s", sent.State, len(sent.Children), sent.Error)
	}
	fmt.Printf("messages.send: %s; messages.destruct scheduled in %s\n", sent.State, after)
	if err := printMessages(ctx, messages, "before"); err != nil {
		return err
	}

	destructID := sent.Children[0]
	if r, err := p.Get(ctx, destructID); err == nil {
		fmt.Printf("messages.destruct: %s, due at %s (now %s)\n",
			r.State, r.ScheduledTime.Format(clock), time.Now().UTC().Format(clock))
	}
	done, err := p.Wait(wctx, destructID)
	if err != nil {
		return fmt.Errorf("messages.destruct: %w", err)
	}
	fmt.Printf("messages.destruct run: %s\n", done.State)
	if done.State != jetflow.Success {
		return fmt.Errorf("messages.destruct ended %s: %s", done.State, done.Error)
	}
	return printMessages(ctx, messages, "after")
}

// printMessages prints the messages table, sorted by author.
func printMessages(ctx context.Context, messages jetstream.KeyValue, when string) error {
	// kv.ListKeys: the whole list or an error, never a listing that waits
	// for ever or stops short.
	keys, err := kv.ListKeys(ctx, messages, ">")
	if err != nil {
		return err
	}
	var list []Message
	for _, key := range keys {
		e, err := messages.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		var m Message
		if err := json.Unmarshal(e.Value(), &m); err != nil {
			return err
		}
		list = append(list, m)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Author < list[j].Author })
	fmt.Printf("messages %s: %d\n", when, len(list))
	for _, m := range list {
		fmt.Printf("  %s: %s\n", m.Author, m.Body)
	}
	return nil
}
