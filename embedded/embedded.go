package embedded

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
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

// DefaultSyncEvery is the fsync interval of SyncInterval when
// Options.SyncEvery is zero.
const DefaultSyncEvery = 10 * time.Millisecond

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
	// SyncEvery is the interval of SyncInterval. Default 10 ms. The
	// server syncs every stream this often even when idle: at 10 ms an
	// idle deployment spends about 2-3% of a core on it (two thirds of its
	// 3-5%), at 1 s next to nothing (docs/scaling.md, "What an idle deployment costs").
	// A write (or a read of the block it goes to) that meets an fsync of
	// its stream waits for it: on a slow disk that is much of the latency
	// tail of delayed runs (docs/scaling.md, "The delayed store"). Longer
	// intervals shorten the tail and widen what a power loss can lose.
	SyncEvery time.Duration
	// ServerName names the server. Default "jetflow".
	ServerName string
	// Cluster, when set, joins a cluster (integration tests, 3-node setups).
	Cluster *Cluster
	// ReadyTimeout bounds the wait for the server. Default 10 s.
	ReadyTimeout time.Duration

	// User and Password, when User is set, are the one login clients must
	// give (nats://user:password@host:port, or nats.UserInfo). Default: no
	// login, which is safe only on a loopback Host.
	User, Password string
	// Token, when set, is the token clients must give (nats.Token, or
	// nats://token@host:port) instead. Set either User or Token, not both.
	Token string
	// TLSCert and TLSKey are PEM files of the server's certificate and
	// key: with both set, clients must connect with TLS. Default: no TLS.
	TLSCert, TLSKey string
	// TLSCA is a PEM file of the certificate authorities that sign client
	// certificates: with it set (and TLSCert), every client must present a
	// certificate signed by one of them (mutual TLS).
	TLSCA string
	// Warnings, when set, receives the server's warnings and errors, one
	// line each. Default: the server logs nothing.
	Warnings io.Writer
	// MaxPayload is the largest message the server takes (bytes). Default
	// 8 MB; nats-server's own default is 1 MB. A run's args may take it
	// less 4 KB (kv.ArgsLimit).
	MaxPayload int32
}

// warnLog is a nats-server logger that writes warnings and errors only.
type warnLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *warnLog) line(level, format string, v []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "nats-server %s: %s\n", level, fmt.Sprintf(format, v...))
}

func (l *warnLog) Noticef(string, ...any)         {}
func (l *warnLog) Debugf(string, ...any)          {}
func (l *warnLog) Tracef(string, ...any)          {}
func (l *warnLog) Warnf(format string, v ...any)  { l.line("warning", format, v) }
func (l *warnLog) Errorf(format string, v ...any) { l.line("error", format, v) }
func (l *warnLog) Fatalf(format string, v ...any) { l.line("fatal", format, v) }

// Secured reports whether clients must log in or present a certificate.
func (o Options) Secured() bool { return o.User != "" || o.Token != "" || o.TLSCA != "" }

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
	opts Options
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
		o.SyncEvery = DefaultSyncEvery
	}
	if o.ServerName == "" {
		o.ServerName = "jetflow"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 10 * time.Second
	}
	if o.User != "" && o.Token != "" {
		return nil, errors.New("embedded: set Options.User or Options.Token, not both")
	}
	if o.User == "" && o.Password != "" {
		return nil, errors.New("embedded: Options.Password without Options.User")
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("embedded: Options.TLSCert and Options.TLSKey go together")
	}
	if o.TLSCA != "" && o.TLSCert == "" {
		return nil, errors.New("embedded: Options.TLSCA (client certificates) needs Options.TLSCert and TLSKey")
	}
	so := &server.Options{
		ServerName: o.ServerName,
		Host:       o.Host,
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.Dir,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: cmp.Or(o.MaxPayload, 8*1024*1024),
	}
	so.Username, so.Password, so.Authorization = o.User, o.Password, o.Token
	if o.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
			CertFile: o.TLSCert, KeyFile: o.TLSKey, CaFile: o.TLSCA, Verify: o.TLSCA != "", Timeout: 2,
		})
		if err != nil {
			return nil, fmt.Errorf("embedded: TLS: %w", err)
		}
		so.TLS, so.TLSConfig, so.TLSTimeout = true, tc, 2
		so.TLSCert, so.TLSKey, so.TLSCaCert, so.TLSVerify = o.TLSCert, o.TLSKey, o.TLSCA, o.TLSCA != ""
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
	if o.Warnings != nil {
		s.SetLogger(&warnLog{w: o.Warnings}, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(o.ReadyTimeout) {
		s.Shutdown()
		return nil, ErrNotReady
	}
	return &Server{Server: s, opts: o}, nil
}

// Connect opens a client connection to the server; the caller closes it.
// It logs in with the server's own Options.User and Password or Token, and
// with TLS it trusts the server's certificate (TLSCert, which may be
// self-signed) besides the system's roots. With TLSCA, pass the client's
// certificate: nats.ClientCert(certFile, keyFile). Later opts win.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	switch {
	case s.opts.User != "":
		base = append(base, nats.UserInfo(s.opts.User, s.opts.Password))
	case s.opts.Token != "":
		base = append(base, nats.Token(s.opts.Token))
	}
	if s.opts.TLSCert != "" {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		pem, err := os.ReadFile(s.opts.TLSCert)
		if err != nil {
			return nil, fmt.Errorf("embedded: %w", err)
		}
		pool.AppendCertsFromPEM(pem)
		base = append(base, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	return nats.Connect(s.ClientURL(), append(base, opts...)...)
}

// Stop shuts the server down and waits for it to finish.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}
