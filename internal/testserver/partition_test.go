package testserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// fakeNode is a server that greets each connection with the INFO line of
// a route (server_id, server_name) and then echoes every line back.
func fakeNode(t *testing.T, name string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "INFO {\"server_id\":\"ID%s\",\"server_name\":%q}\r\n", name, name)
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, "echo "+l); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// routeConn dials the route proxy port as node from: its CONNECT names
// its server id, its INFO its name (as a nats-server's route does).
type routeConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialRoute(t *testing.T, port int, from string) *routeConn {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &routeConn{c: c, r: bufio.NewReader(c)}
	fmt.Fprintf(c, "CONNECT {\"name\":\"ID%s\"}\r\nINFO {\"server_id\":\"ID%s\",\"server_name\":%q}\r\n", from, from, from)
	return rc
}

// roundTrip sends a line and reports whether its echo came back within d
// (echoes of earlier lines are skipped).
func (rc *routeConn) roundTrip(line string, d time.Duration) (string, bool) {
	_ = rc.c.SetDeadline(time.Now().Add(d))
	defer func() { _ = rc.c.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(rc.c, line+"\r\n"); err != nil {
		return "", false
	}
	for {
		l, err := rc.r.ReadString('\n')
		if err != nil {
			return "", false
		}
		if strings.HasPrefix(l, "echo ") && strings.Contains(l, line) {
			return strings.TrimSpace(l), true
		}
	}
}

func TestPartition(t *testing.T) {
	p := NewPartition(t)
	routes := map[string]int{}
	clients := map[string]int{}
	for _, n := range []string{"a", "b", "c"} {
		clients[n], routes[n] = p.Add(n, fakeNode(t, n), fakeNode(t, n))
	}
	ab := dialRoute(t, routes["b"], "a") // a's route to b
	cb := dialRoute(t, routes["b"], "c") // c's route to b
	ba := dialRoute(t, routes["a"], "b") // b's route to a
	cl, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", clients["a"]))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	client := &routeConn{c: cl, r: bufio.NewReader(cl)}
	for _, rc := range []*routeConn{ab, cb, ba, client} {
		if _, ok := rc.roundTrip("hello", 2*time.Second); !ok {
			t.Fatal("no echo through the proxy before a cut")
		}
	}

	// Routes only, connections reset: a's routes both ways close, c's
	// route to b stays, a's client stays.
	p.Cut(Cut{Node: "a"})
	if _, ok := ab.roundTrip("cut", time.Second); ok {
		t.Error("a's route to b passes during a's cut")
	}
	if _, ok := ba.roundTrip("cut", time.Second); ok {
		t.Error("b's route to a passes during a's cut")
	}
	if _, ok := cb.roundTrip("cut", 2*time.Second); !ok {
		t.Error("c's route to b stopped by a's cut")
	}
	if _, ok := client.roundTrip("cut", 2*time.Second); !ok {
		t.Error("a's client stopped by a routes-only cut")
	}
	if _, ok := dialRoute(t, routes["b"], "a").roundTrip("again", time.Second); ok {
		t.Error("a new route from a to b passes during a's cut")
	}
	if _, ok := dialRoute(t, routes["b"], "c").roundTrip("again", 2*time.Second); !ok {
		t.Error("a new route from c to b refused during a's cut")
	}
	p.Heal()
	if _, ok := dialRoute(t, routes["b"], "a").roundTrip("healed", 2*time.Second); !ok {
		t.Error("a new route from a to b refused after the heal")
	}

	// Everything, held: a's client connection stays open, its traffic
	// waits for the heal.
	p.Cut(Cut{Node: "a", Clients: true, Hold: true})
	if _, ok := client.roundTrip("held", 500*time.Millisecond); ok {
		t.Error("a's client passes during a held cut of everything")
	}
	ab2 := dialRoute(t, routes["b"], "a")
	if _, ok := ab2.roundTrip("held", 500*time.Millisecond); ok {
		t.Error("a new route from a to b passes during a held cut")
	}
	p.Heal()
	// What was held arrives at the heal, in order.
	_ = client.c.SetDeadline(time.Now().Add(2 * time.Second))
	for _, want := range []string{"echo held"} {
		l, err := client.r.ReadString('\n')
		if err != nil || strings.TrimSpace(l) != want {
			t.Errorf("after the heal, the client read %q, %v; want %q", l, err, want)
		}
	}
	if _, ok := client.roundTrip("after", 2*time.Second); !ok {
		t.Error("a's client does not pass after the heal")
	}
	if _, ok := ab2.roundTrip("after", 2*time.Second); !ok {
		t.Error("the route held during the cut does not pass after the heal")
	}
}
