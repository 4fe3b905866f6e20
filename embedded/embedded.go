package embedded

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Sync is the embedded server's fsync policy.
type Sync int

const (
	// SyncInterval fsyncs every Options.SyncEvery (default 10 ms).
	SyncInterval Sync = iota
	// SyncAlways fsyncs every write before acknowledging it.
	SyncAlways
)

func (s Sync) String() string {
	if s == SyncAlways {
		return "always"
	}
	return "interval"
}

// Options configure the embedded server. The zero value is usable except
// for Dir.
type Options struct {
	// Dir holds JetStream's data. Required.
	Dir string
	// Host to listen on. Default 127.0.0.1.
	Host string
	// Port for clients. Default -1: a random free port.
	Port int
	// Sync is the fsync policy. Default SyncInterval.
	Sync Sync
	// SyncEvery is the interval of SyncInterval. Default 10 ms.
	SyncEvery time.Duration
	// ServerName names the server. Default "jetflow".
	ServerName string
	// Cluster, when set, joins a cluster (integration tests, 3-node setups).
	Cluster *Cluster
	// ReadyTimeout bounds the wait for the server. Default 10 s.
	ReadyTimeout time.Duration
}

// Cluster configures clustering.
type Cluster struct {
	Name   string
	Host   string
	Port   int
	Routes []string // nats-route://host:port of the peers
}

// Server is a running embedded server.
type Server struct {
	*server.Server
}

// ErrNotReady: the server did not start within ReadyTimeout.
var ErrNotReady = errors.New("embedded: server not ready")

// Start starts the server and waits until it accepts clients.
func Start(o Options) (*Server, error) {
	if o.Dir == "" {
		return nil, errors.New("embedded: Options.Dir is required")
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = -1
	}
	if o.SyncEvery == 0 {
		o.SyncEvery = 10 * time.Millisecond
	}
	if o.ServerName == "" {
		o.ServerName = "jetflow"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 10 * time.Second
	}
	so := &server.Options{
		ServerName: o.ServerName,
		Host:       o.Host,
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.Dir,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: 8 * 1024 * 1024,
	}
	if o.Sync == SyncAlways {
		so.SyncAlways = true
	} else {
		so.SyncInterval = o.SyncEvery
	}
	if o.Cluster != nil {
		so.Cluster = server.ClusterOpts{Name: o.Cluster.Name, Host: o.Cluster.Host, Port: o.Cluster.Port}
		for _, r := range o.Cluster.Routes {
			u, err := parseURL(r)
			if err != nil {
				return nil, err
			}
			so.Routes = append(so.Routes, u)
		}
	}
	s, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(o.ReadyTimeout) {
		s.Shutdown()
		return nil, ErrNotReady
	}
	return &Server{Server: s}, nil
}

// Connect opens a client connection to the server; the caller closes it.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, opts...)
	return nats.Connect(s.ClientURL(), opts...)
}

// Stop shuts the server down and waits for it to finish.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}
