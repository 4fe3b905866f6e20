package kv_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// gate is a TCP proxy to a server whose traffic can be held: the
// connection stays up, but nothing passes until it is opened again, as
// when a cluster does not answer a request.
type gate struct {
	ln   net.Listener
	hold sync.RWMutex
}

func newGate(t *testing.T, port int) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
			go g.pipe(c, s)
			go g.pipe(s, c)
		}
	}()
	return g
}

func (g *gate) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			g.hold.RLock()
			_, werr := dst.Write(buf[:n])
			g.hold.RUnlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				_ = dst.Close()
			}
			return
		}
	}
}

// A watch whose consumer is not created in time is given up with
// ErrWatchSlow, not waited for the client's whole timeout; one started
// again once the server answers works.
func TestWatchWithinGivesUpASlowStart(t *testing.T) {
	env := testserver.Start(t)
	g := newGate(t, env.Port)
	nc, err := nats.Connect("nats://"+g.ln.Addr().String(), nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "watched"})
	if err != nil {
		t.Fatal(err)
	}

	g.hold.Lock() // the server does not answer
	w, err := kv.WatchWithin(ctx, b, ">", jetstream.UpdatesOnly())
	g.hold.Unlock()
	if !errors.Is(err, kv.ErrWatchSlow) || w != nil {
		t.Fatalf("watch started while the server did not answer: %v, %v; want kv.ErrWatchSlow", w, err)
	}

	w, err = kv.WatchWithin(ctx, b, "a.>", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatalf("watch started again: %v", err)
	}
	defer func() { _ = w.Stop() }()
	if _, err := b.Put(ctx, "b.1", []byte("other")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "a.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w.Updates():
		if e == nil || e.Key() != "a.1" || string(e.Value()) != "x" {
			t.Fatalf("update %v, want a.1=x", e)
		}
	case <-ctx.Done():
		t.Fatal("no update")
	}
}
