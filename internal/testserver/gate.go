package testserver

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
)

// Gate is a TCP proxy to a server whose traffic a test can hold: the
// connection stays up but nothing passes, as when a server or a cluster
// does not answer. Hold holds both ways; HoldRepliesAfter holds what the
// server sends once the client has sent a given byte string (a write lands,
// its reply is lost).
type Gate struct {
	ln net.Listener

	mu      sync.Mutex
	cond    *sync.Cond
	up      bool   // client to server held
	down    bool   // server to client held
	trigger []byte // seen from the client: hold server to client
	conns   []net.Conn
}

// Close cuts every connection through the gate and stops accepting new
// ones: to its clients, the server is gone for good (a process cut off).
func (g *Gate) Close() {
	_ = g.ln.Close()
	g.Open()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		_ = c.Close()
	}
}

// NewGate starts a gate to the server listening on port; it closes when
// the test ends.
func NewGate(t testing.TB, port int) *Gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{ln: ln}
	g.cond = sync.NewCond(&g.mu)
	t.Cleanup(g.Close)
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
			g.mu.Lock()
			g.conns = append(g.conns, c, s)
			g.mu.Unlock()
			go g.pipe(s, c, true)
			go g.pipe(c, s, false)
		}
	}()
	return g
}

// URL is the address clients connect to.
func (g *Gate) URL() string { return "nats://" + g.ln.Addr().String() }

// Hold stops traffic both ways until Open.
func (g *Gate) Hold() {
	g.mu.Lock()
	g.up, g.down = true, true
	g.mu.Unlock()
}

// HoldRepliesAfter holds what the server sends, from the moment the client
// sends b (before b reaches the server) until Open.
func (g *Gate) HoldRepliesAfter(b []byte) {
	g.mu.Lock()
	g.trigger = append([]byte(nil), b...)
	g.mu.Unlock()
}

// Open lets everything held pass.
func (g *Gate) Open() {
	g.mu.Lock()
	g.up, g.down, g.trigger = false, false, nil
	g.cond.Broadcast()
	g.mu.Unlock()
}

// Holding reports whether the gate holds anything now.
func (g *Gate) Holding() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.up || g.down
}

func (g *Gate) pipe(dst, src net.Conn, fromClient bool) {
	buf := make([]byte, 64<<10)
	var tail []byte // the end of the last read, for a trigger split across reads
	for {
		n, err := src.Read(buf)
		if n > 0 {
			g.mu.Lock()
			if fromClient && g.trigger != nil {
				seen := append(tail, buf[:n]...)
				if bytes.Contains(seen, g.trigger) {
					g.down, g.trigger = true, nil
				}
				tail = append(tail[:0], seen[max(0, len(seen)-64):]...)
			}
			for fromClient && g.up || !fromClient && g.down {
				g.cond.Wait()
			}
			g.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}
