package wfwire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Queries and updates (docs/wire-format.md, "Queries and updates").

// ErrNoQueryHandler: no worker of the workflow's definition answered the
// query, or the workflow's code (as far as it has run) registered no
// handler of that name.
var ErrNoQueryHandler = errors.New("workflow: no query handler")

// ErrUpdateRejected: the workflow's validator refused the update; it
// changed nothing.
var ErrUpdateRejected = errors.New("workflow: update rejected")

// ErrUpdateTimeout: the update was not answered before the caller's
// deadline; it stays stored and may still be handled.
var ErrUpdateTimeout = errors.New("workflow: update not answered in time")

// QuerySubject is the core NATS subject on which the workers of
// definition name answer queries (a queue group of that name).
func QuerySubject(prefix, name string) string { return prefix + ".wfquery." + name }

// QueryRequest is a query's request body.
type QueryRequest struct {
	WF   string `json:"wf"`
	Name string `json:"name"`
}

// Answer is a query's reply, and an update's answer (journal key
// AnswerKey).
type Answer struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Code is the error's code (workflow.RegisterError), "noHandler" or
	// "rejected".
	Code string `json:"code,omitempty"`
}

// Answer codes of the errors defined here.
const (
	CodeNoHandler = "noHandler"
	CodeRejected  = "rejected"
)

// Err is the answer's error (nil on success), wrapping the sentinel of its
// code when it is one of this package's; other codes are the caller's to
// map (of is consulted first, may be nil).
func (a *Answer) Err(of func(code string) error) error {
	if a.Error == "" && a.Code == "" {
		return nil
	}
	var s error
	if of != nil {
		s = of(a.Code)
	}
	switch {
	case s != nil:
	case a.Code == CodeNoHandler:
		s = ErrNoQueryHandler
	case a.Code == CodeRejected:
		s = ErrUpdateRejected
	}
	if s == nil {
		return errors.New(a.Error)
	}
	return &codedError{msg: a.Error, err: s}
}

type codedError struct {
	msg string
	err error
}

func (e *codedError) Error() string { return e.msg }
func (e *codedError) Unwrap() error { return e.err }

// Query asks a worker of definition def to answer query name of workflow
// id, from the state its code replays to: the raw reply.
func Query(ctx context.Context, nc *nats.Conn, prefix, def, id, name string) (*Answer, error) {
	req, _ := json.Marshal(QueryRequest{WF: id, Name: name})
	msg, err := nc.RequestWithContext(ctx, QuerySubject(prefix, def), req)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w: no worker of %s is running", ErrNoQueryHandler, def)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow %s: query %s: %w", id, name, err)
	}
	var a Answer
	if err := json.Unmarshal(msg.Data, &a); err != nil {
		return nil, fmt.Errorf("workflow %s: query %s: reply %q: %w", id, name, msg.Data, err)
	}
	return &a, nil
}

// UpdatePrefix is the prefix of the journal keys of workflow wf's updates
// named name: <wf>.up.<name>.<unique>.
func UpdatePrefix(wf, name string) string { return wf + ".up." + name + "." }

// AnswerKey is the journal key of the answer to workflow wf's update
// whose key ends in unique.
func AnswerKey(wf, unique string) string { return wf + ".ans." + unique }

// UpdateUnique is the unique part of update key key.
func UpdateUnique(key string) string { return key[strings.LastIndexByte(key, '.')+1:] }

// StoreUpdate stores update name with input (its journal value an Event)
// for workflow wf (StoreOnce), and returns the key of its answer. An error
// that matches ErrUpdateTimeout says the update may be stored (a try went
// unanswered and ctx ended); any other says it is not.
func StoreUpdate(ctx context.Context, journal jetstream.KeyValue, wf, name string, input json.RawMessage, now time.Time) (string, error) {
	unique := nuid.Next()
	b, _ := json.Marshal(Event{Name: name, Payload: input, Sent: now.UTC()})
	unsure, err := StoreOnce(ctx, journal, UpdatePrefix(wf, name)+unique, b)
	switch {
	case err == nil:
		return AnswerKey(wf, unique), nil
	case unsure:
		return "", fmt.Errorf("%w: workflow %s: update %s may be stored: %w", ErrUpdateTimeout, wf, name, err)
	}
	return "", fmt.Errorf("workflow %s: store update %s: %w", wf, name, err)
}

// ErrEventUnconfirmed: an event's store went unanswered (a server
// restart) and the caller's ctx ended before it was confirmed: the event
// may be stored, and sending it again may deliver it twice.
var ErrEventUnconfirmed = errors.New("workflow: event store unconfirmed")

// StoreEvent stores event ev (its journal value) named name for workflow
// wf, once (StoreOnce). ErrEventUnconfirmed: it may be stored; any other
// error: it is not.
func StoreEvent(ctx context.Context, journal jetstream.KeyValue, wf, name string, ev []byte) error {
	unsure, err := StoreOnce(ctx, journal, EventKey(wf, name), ev)
	switch {
	case err == nil:
		return nil
	case unsure:
		return fmt.Errorf("%w: workflow %s: event %s: %w", ErrEventUnconfirmed, wf, name, err)
	}
	return fmt.Errorf("workflow %s: store event %s: %w", wf, name, err)
}

// WakeUnconfirmed resumes the workflow in the background when err says a
// store of an update or event went unanswered until its caller's ctx
// ended (ErrUpdateTimeout, ErrEventUnconfirmed): it may be stored, and
// nothing else would resume the workflow for it (a workflow that parked
// before it was stored waits for its next wake). wake is tried, 100 ms
// apart, for up to unconfirmedWake past ctx; a resume that finds nothing
// new costs the workflow one segment.
func WakeUnconfirmed(ctx context.Context, err error, wake func(ctx context.Context) error) {
	if !errors.Is(err, ErrUpdateTimeout) && !errors.Is(err, ErrEventUnconfirmed) {
		return
	}
	go func() {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unconfirmedWake)
		defer cancel()
		for wake(wctx) != nil {
			select {
			case <-wctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// unconfirmedWake bounds WakeUnconfirmed's tries.
const unconfirmedWake = 30 * time.Second

// StoreOnce creates key (this call's alone: it ends in a unique part)
// with value b in the journal. A create whose reply was lost (a timeout,
// a server restart) is made again, each try within storeTry, and a
// refusal as already there is this call's earlier try, confirmed by a
// read (kv.CreateConfirmed). unsure reports, with an error, that a try
// went unanswered: the value may be stored.
func StoreOnce(ctx context.Context, journal jetstream.KeyValue, key string, b []byte) (unsure bool, err error) {
	create := func(ctx context.Context) error {
		for {
			tctx, cancel := context.WithTimeout(ctx, storeTry)
			_, err := journal.Create(tctx, key, b)
			cancel()
			if errors.Is(err, jetstream.ErrKeyExists) {
				return fmt.Errorf("%w: %w", kv.ErrRefused, err)
			}
			if !kv.Transient(err) {
				return err
			}
			unsure = true
			select {
			case <-ctx.Done():
				return err
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	find := func(ctx context.Context) (kv.Found, error) {
		_, err := journal.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return kv.Missing, nil
		case err != nil:
			return kv.Missing, err
		}
		return kv.Ours, nil
	}
	err = kv.CreateConfirmed(ctx, create, find)
	return err != nil && (unsure || errors.Is(err, kv.ErrUnconfirmed)), err
}

// storeTry bounds one try of an update's store: one whose reply is lost
// is made again within the caller's ctx.
const storeTry = 2 * time.Second

// AwaitAnswer waits for the answer under key until ctx ends
// (ErrUpdateTimeout, the update stays stored; so is a watch that fails).
// Besides the watch, it reads the key every answerPoll: a watch that a
// server restart left silent does not keep an answer stored meanwhile
// from its caller.
func AwaitAnswer(ctx context.Context, journal jetstream.KeyValue, key string) (*Answer, error) {
	w, err := journal.Watch(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: watch %s: %w", ErrUpdateTimeout, key, err)
	}
	defer func() { _ = w.Stop() }()
	poll := time.NewTicker(answerPoll)
	defer poll.Stop()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrUpdateTimeout, context.Cause(ctx))
		case <-poll.C:
			e, err = journal.Get(ctx, key)
			if err != nil {
				continue // not answered yet, or not read: the watch and the next poll go on
			}
		case u, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("%w: watch of %s ended", ErrUpdateTimeout, key)
			}
			e = u
		}
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var a Answer
		if err := json.Unmarshal(e.Value(), &a); err != nil {
			return nil, fmt.Errorf("%w: answer %s: %w", ErrUpdateTimeout, key, err)
		}
		return &a, nil
	}
}

// answerPoll is how often AwaitAnswer reads the answer's key besides its
// watch.
const answerPoll = time.Second

// SendUpdate stores update name with input for workflow wf, resumes it
// (wake), and waits for its answer until ctx ends.
func SendUpdate(ctx context.Context, journal jetstream.KeyValue, wf, name string, input json.RawMessage, now time.Time, wake func(ctx context.Context) error) (*Answer, error) {
	key, err := StoreUpdate(ctx, journal, wf, name, input, now)
	if err != nil {
		WakeUnconfirmed(ctx, err, wake)
		return nil, err
	}
	// Stored: from here on the update may be handled, so every error is
	// ErrUpdateTimeout (a retry would send it twice). The resume is tried
	// until ctx ends.
	for err := wake(ctx); err != nil; err = wake(ctx) {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: workflow %s: update %s stored, resume failed: %w", ErrUpdateTimeout, wf, name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return AwaitAnswer(ctx, journal, key)
}
