package main

// The workflows that continue as new (it.chain, it.entity) and the updater
// role that sends it.entity its updates from a process of its own, for the
// workflow fault scenarios.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// PerRun is how many waits (it.chain) or updates (it.entity) one run of
// the workflow takes before it continues as new.
const PerRun = 5

// Carry is the input and result of it.chain and it.entity: what the test
// asks (Gens, Target, SleepMs) and the state each run carries to the next.
type Carry struct {
	Gens    int      `json:"gens,omitempty"`    // it.chain: the runs (generations) to go through
	Target  int      `json:"target,omitempty"`  // it.entity: the valid updates to take
	SleepMs int      `json:"sleepMs,omitempty"` // it.chain: each wait's durable sleep
	Gen     int      `json:"gen"`               // the run this input starts (1 for the first)
	Count   int      `json:"count"`             // it.chain: ticks done
	Applied []string `json:"applied,omitempty"` // it.entity: the tokens of the updates taken, in order
}

// Add is it.entity's update "add": its token is appended to the state.
// A token starting with "bad" is refused by the validator.
type Add struct {
	Token string `json:"token"`
}

// chainDef is it.chain: each run does PerRun ticks (an inline step noted
// in the ledger as "<id>/g<gen>/t<i>", returning 1) each followed by a
// durable sleep, then continues as new with the count carried, until run
// Gens, which returns the state.
func chainDef(led *ledger) *workflow.Workflow[Carry, Carry] {
	return workflow.Define("it.chain", func(wf *workflow.Context, in Carry) (Carry, error) {
		in.Gen = max(in.Gen, 1)
		for i := range PerRun {
			n, err := workflow.Step(wf, fmt.Sprintf("tick-%d", i), func(context.Context) (int, error) {
				if err := led.note(fmt.Sprintf("%s/g%d/t%d", wf.ID(), in.Gen, i), 0); err != nil {
					os.Exit(3)
				}
				return 1, nil
			})
			if err != nil {
				return in, err
			}
			in.Count += n
			wf.Sleep(time.Duration(in.SleepMs) * time.Millisecond)
		}
		if in.Gen >= in.Gens {
			return in, nil
		}
		in.Gen++
		return in, workflow.ContinueAsNew(wf, in)
	})
}

// entityDef is it.entity: each run takes PerRun valid "add" updates (the
// handler appends the token and answers the count applied so far), then
// continues as new with the tokens carried, until Target are applied.
var entityDef = workflow.Define("it.entity", func(wf *workflow.Context, in Carry) (Carry, error) {
	in.Gen = max(in.Gen, 1)
	for range PerRun {
		if len(in.Applied) >= in.Target {
			return in, nil
		}
		err := workflow.AwaitUpdate(wf, "add", 0, func(a Add) (int, error) {
			in.Applied = append(in.Applied, a.Token)
			return len(in.Applied), nil
		}, func(a Add) error {
			if strings.HasPrefix(a.Token, "bad") {
				return errors.New("a bad token")
			}
			return nil
		})
		if err != nil {
			return in, err
		}
	}
	if len(in.Applied) >= in.Target {
		return in, nil
	}
	in.Gen++
	return in, workflow.ContinueAsNew(wf, in)
})

// inboxDef is it.inbox: each run takes PerRun events "tick" (their
// payload a token, appended to the state), then continues as new with
// the tokens carried, until Target are taken.
var inboxDef = workflow.Define("it.inbox", func(wf *workflow.Context, in Carry) (Carry, error) {
	in.Gen = max(in.Gen, 1)
	for range PerRun {
		if len(in.Applied) >= in.Target {
			return in, nil
		}
		tok, err := workflow.AwaitEvent[string](wf, "tick", 0)
		if err != nil {
			return in, err
		}
		in.Applied = append(in.Applied, tok)
	}
	if len(in.Applied) >= in.Target {
		return in, nil
	}
	in.Gen++
	return in, workflow.ContinueAsNew(wf, in)
})

// registerEntities serves it.chain, it.entity and it.inbox on w.
func registerEntities(w *worker.Worker, led *ledger) error {
	if err := workflow.Register(w, chainDef(led)); err != nil {
		return err
	}
	if err := workflow.Register(w, inboxDef); err != nil {
		return err
	}
	return workflow.Register(w, entityDef)
}

// runUpdater sends each of the -count workflows <id-prefix>-<i> (it.entity)
// -updates valid "add" updates (tokens u0, u1, ...) and one refused one
// ("bad<k>") after every fifth but the last, through the producer (no workflow
// import), one workflow at a time per goroutine (-parallel), the k-th
// update of each not before -spread*k/updates. Each outcome is a marker:
// ANSWER <wf> <token> <answer>, REJECTED <wf> <token>, UPTIMEOUT <wf>
// <token> (the update was stored and is not sent again: a second send
// could apply it twice), ENDED <wf> <token> (the workflow has ended: a
// wrong outcome for the test). Any other error means nothing was stored: the
// same update is sent again (UPRETRY). With -events it sends each
// workflow (it.inbox) events "tick" instead, tokens t0, t1, ... (sendEvent).
func runUpdater(ctx context.Context, c config, js jetstream.JetStream, scfg streams.Config, log *slog.Logger, setup func(func(context.Context) error) error) error {
	var p *producer.Producer
	err := setup(func(ctx context.Context) error {
		var err error
		p, err = producer.New(ctx, js, producer.Config{Streams: scfg, Logger: log})
		return err
	})
	if err != nil {
		return err
	}
	marker("READY updater %s", c.id)
	start := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(c.parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				updateOne(ctx, c, p, fmt.Sprintf("%s-%d", c.idPfx, i), start)
			}
		}()
	}
	for i := range c.count {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	marker("DONE")
	return nil
}

// updateOne sends workflow wf its updates (with -events, its events),
// paced over -spread.
func updateOne(ctx context.Context, c config, p *producer.Producer, wf string, start time.Time) {
	for k := range c.updates {
		select {
		case <-time.After(time.Until(start.Add(c.spread * time.Duration(k) / time.Duration(c.updates)))):
		case <-ctx.Done():
			return
		}
		if c.events {
			sendEvent(ctx, c, p, wf, fmt.Sprintf("t%d", k))
			continue
		}
		sendUpdate(ctx, c, p, wf, fmt.Sprintf("u%d", k))
		if k%PerRun == PerRun-1 && k < c.updates-1 {
			// A refused update after every fifth but the last.
			sendUpdate(ctx, c, p, wf, fmt.Sprintf("bad%d", k))
		}
	}
}

// sendEvent sends event "tick" with payload token until a call stores
// it: SENT <wf> <token>, or UNSURE <wf> <token> when its store went
// unanswered until the call's ctx ended (it may be stored: not sent
// again). Any other error means nothing was stored: sent again (EVRETRY).
func sendEvent(ctx context.Context, c config, p *producer.Producer, wf, token string) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
		err := p.SendEvent(cctx, wf, "tick", token)
		cancel()
		switch {
		case err == nil:
			marker("SENT %s %s", wf, token)
			return
		case errors.Is(err, producer.ErrEventUnconfirmed):
			marker("UNSURE %s %s %s", wf, token, strings.ReplaceAll(err.Error(), "\n", " "))
			return
		case errors.Is(err, producer.ErrWorkflowEnded):
			marker("ENDED %s %s", wf, token)
			return
		}
		marker("EVRETRY %s %s %s", wf, token, strings.ReplaceAll(err.Error(), "\n", " "))
		time.Sleep(100 * time.Millisecond)
	}
}

// sendUpdate sends one update until it is answered, refused or stored
// without an answer in time.
func sendUpdate(ctx context.Context, c config, p *producer.Producer, wf, token string) {
	in, _ := json.Marshal(Add{Token: token})
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
		out, err := p.UpdateWorkflow(cctx, wf, "add", in)
		cancel()
		switch {
		case err == nil:
			marker("ANSWER %s %s %s", wf, token, out)
			return
		case errors.Is(err, workflow.ErrUpdateRejected):
			marker("REJECTED %s %s", wf, token)
			return
		case errors.Is(err, workflow.ErrUpdateTimeout):
			marker("UPTIMEOUT %s %s %s", wf, token, strings.ReplaceAll(err.Error(), "\n", " "))
			return
		case errors.Is(err, producer.ErrWorkflowEnded):
			marker("ENDED %s %s", wf, token)
			return
		}
		marker("UPRETRY %s %s %s", wf, token, strings.ReplaceAll(err.Error(), "\n", " "))
		time.Sleep(100 * time.Millisecond)
	}
}
