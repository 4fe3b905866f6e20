package testserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Partition puts a TCP proxy in front of the client port and the route
// port of each node of a nats-server cluster, so that a test can cut one
// node off from the others and heal the cut, without firewall tools.
//
// Each node is started with its cluster's routes pointing at the other
// nodes' route proxies, and advertises its own proxies
// (--cluster_advertise, --client_advertise): clients learn only proxy
// addresses, and a node never opens an implicit route around a proxy (it
// finds the advertised address among its configured routes). A route
// connection is identified by the node that dialed it, read from its
// first protocol lines (CONNECT names the server id, INFO the server
// name), before anything of it reaches the node dialed.
//
// A cut of node X stops the routes between X and every other node, both
// ways, and with Clients set the connections of X's clients too. By
// default the connections are closed and new ones refused at once (X's
// clients then reconnect to the other nodes); with Hold they stay open
// and nothing passes, new ones included, until Heal (a black hole: what
// was sent is delivered at the heal, as TCP retransmits after a short
// partition).
type Partition struct {
	t testing.TB

	mu    sync.Mutex
	cond  *sync.Cond
	nodes map[string]*partNode
	ids   map[string]string // server id -> server name, learned from INFO lines
	cut   *Cut
	conns map[*partConn]bool
	lns   []net.Listener
}

// Cut says what Partition.Cut stops.
type Cut struct {
	// Node is the server name (-n) of the node cut off.
	Node string
	// Clients: the node's client connections are cut too, not only its
	// routes to the other nodes.
	Clients bool
	// Hold keeps the connections open and holds their traffic (a black
	// hole) instead of closing them and refusing new ones.
	Hold bool
}

func (c Cut) String() string {
	s := "routes"
	if c.Clients {
		s = "all"
	}
	if c.Hold {
		return s + "/hold"
	}
	return s + "/reset"
}

type partNode struct {
	name                   string
	clientPort, routePort  int // the node's own ports
	clientProxy, routeProx net.Listener
}

type partConn struct {
	route  bool
	target string // the node the connection goes to
	dialer string // a route's dialing node, once identified
	a, b   net.Conn
}

// NewPartition returns a partition with no node; proxies close when the
// test ends.
func NewPartition(t testing.TB) *Partition {
	p := &Partition{t: t, nodes: map[string]*partNode{}, ids: map[string]string{}, conns: map[*partConn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(p.close)
	return p
}

// Add starts the two proxies of node name, whose own client and route
// ports are clientPort and routePort, and returns the proxies' ports: the
// node advertises them, and every client and every other node's route
// uses them.
func (p *Partition) Add(name string, clientPort, routePort int) (proxyClient, proxyRoute int) {
	p.t.Helper()
	n := &partNode{name: name, clientPort: clientPort, routePort: routePort}
	var err error
	if n.clientProxy, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		p.t.Fatal(err)
	}
	if n.routeProx, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.nodes[name] = n
	p.lns = append(p.lns, n.clientProxy, n.routeProx)
	p.mu.Unlock()
	go p.accept(n, n.clientProxy, false)
	go p.accept(n, n.routeProx, true)
	return n.clientProxy.Addr().(*net.TCPAddr).Port, n.routeProx.Addr().(*net.TCPAddr).Port
}

// ClientURL is the URL of node name's client proxy.
func (p *Partition) ClientURL(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return "nats://" + p.nodes[name].clientProxy.Addr().String()
}

// Cut cuts a node off as c says (one cut at a time: a cut replaces the
// one before, which heals).
func (p *Partition) Cut(c Cut) {
	p.mu.Lock()
	if p.nodes[c.Node] == nil {
		p.mu.Unlock()
		p.t.Fatalf("partition: no node %q", c.Node)
	}
	p.cut = &c
	var drop []*partConn
	for pc := range p.conns {
		if p.affected(pc) && !c.Hold {
			drop = append(drop, pc)
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, pc := range drop {
		p.drop(pc)
	}
}

// Heal ends the cut: held traffic passes, new connections are let through.
func (p *Partition) Heal() {
	p.mu.Lock()
	p.cut = nil
	p.cond.Broadcast()
	p.mu.Unlock()
}

// affected reports whether the cut stops pc. Callers hold p.mu.
func (p *Partition) affected(pc *partConn) bool {
	c := p.cut
	if c == nil {
		return false
	}
	if !pc.route {
		return c.Clients && pc.target == c.Node
	}
	return pc.target == c.Node || pc.dialer == c.Node
}

func (p *Partition) close() {
	p.mu.Lock()
	p.cut = nil
	p.cond.Broadcast()
	lns := p.lns
	var all []*partConn
	for pc := range p.conns {
		all = append(all, pc)
	}
	p.mu.Unlock()
	for _, ln := range lns {
		_ = ln.Close()
	}
	for _, pc := range all {
		p.drop(pc)
	}
}

func (p *Partition) drop(pc *partConn) {
	_ = pc.a.Close()
	if pc.b != nil {
		_ = pc.b.Close()
	}
	p.mu.Lock()
	delete(p.conns, pc)
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *Partition) accept(n *partNode, ln net.Listener, route bool) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.serve(n, c, route)
	}
}

// serve proxies one connection to node n.
func (p *Partition) serve(n *partNode, c net.Conn, route bool) {
	pc := &partConn{route: route, target: n.name, a: c}
	p.mu.Lock()
	p.conns[pc] = true
	refuse := p.affected(pc) && !p.cut.Hold
	p.mu.Unlock()
	if refuse {
		p.drop(pc)
		return
	}
	port := n.clientPort
	if route {
		port = n.routePort
	}
	s, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		p.drop(pc)
		return
	}
	p.mu.Lock()
	pc.b = s
	_, open := p.conns[pc]
	p.mu.Unlock()
	if !open {
		_ = s.Close()
		return
	}
	go p.pipe(pc, s, c, p.learner()) // server to client: learns ids from INFO
	r := bufio.NewReaderSize(c, 64<<10)
	if route {
		// Read the dialer's first lines, holding them, until they name it.
		var held []byte
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		for pc.dialer == "" {
			line, err := r.ReadSlice('\n')
			held = append(held, line...)
			if err != nil && err != bufio.ErrBufferFull {
				p.drop(pc)
				return
			}
			if name := p.identify(line); name != "" {
				p.mu.Lock()
				pc.dialer = name
				p.mu.Unlock()
			}
		}
		_ = c.SetReadDeadline(time.Time{})
		p.mu.Lock()
		refuse := p.affected(pc) && !p.cut.Hold
		p.mu.Unlock()
		if refuse {
			p.drop(pc)
			return
		}
		if !p.send(pc, s, held) {
			return
		}
	}
	p.pipe(pc, r, s, nil)
}

// learner returns a function that learns server ids and names from the
// INFO lines at the start of what a server sends.
func (p *Partition) learner() func([]byte) {
	var start []byte
	done := false
	return func(b []byte) {
		if done {
			return
		}
		start = append(start, b...)
		for {
			i := bytes.IndexByte(start, '\n')
			if i < 0 {
				if len(start) > 64<<10 {
					done = true
				}
				return
			}
			p.identify(start[:i+1])
			start = start[i+1:]
			if len(start) == 0 {
				done = true // only the first lines: the rest is traffic
				return
			}
		}
	}
}

// identify returns the server name a route's protocol line names: an
// INFO's server_name (its server_id is learned), or a CONNECT's name (a
// server id) when that id is known.
func (p *Partition) identify(line []byte) string {
	line = bytes.TrimSpace(line)
	switch {
	case bytes.HasPrefix(line, []byte("INFO ")):
		var info struct {
			ID   string `json:"server_id"`
			Name string `json:"server_name"`
		}
		if json.Unmarshal(bytes.TrimPrefix(line, []byte("INFO ")), &info) != nil || info.Name == "" {
			return ""
		}
		p.mu.Lock()
		p.ids[info.ID] = info.Name
		p.mu.Unlock()
		return info.Name
	case bytes.HasPrefix(line, []byte("CONNECT ")):
		var conn struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(bytes.TrimPrefix(line, []byte("CONNECT ")), &conn) != nil {
			return ""
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.ids[conn.Name]
	}
	return ""
}

// send writes b to dst once the cut lets pc's traffic pass; false when pc
// was closed.
func (p *Partition) send(pc *partConn, dst net.Conn, b []byte) bool {
	p.mu.Lock()
	for p.conns[pc] && p.affected(pc) {
		p.cond.Wait()
	}
	open := p.conns[pc]
	p.mu.Unlock()
	if !open {
		return false
	}
	if _, err := dst.Write(b); err != nil {
		p.drop(pc)
		return false
	}
	return true
}

// pipe copies src to dst, holding while a cut stops pc, until either
// side closes.
func (p *Partition) pipe(pc *partConn, src io.Reader, dst net.Conn, seen func([]byte)) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if seen != nil {
				seen(buf[:n])
			}
			if !p.send(pc, dst, buf[:n]) {
				return
			}
		}
		if err != nil {
			p.drop(pc)
			return
		}
	}
}
