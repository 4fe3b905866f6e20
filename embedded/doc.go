// Package embedded runs a nats-server with JetStream inside the process: the
// zero-setup default for development, tests and single-machine services.
//
// Durability is a named choice. SyncInterval (the default) fsyncs every
// 10 ms: a process crash loses nothing, a power loss at most the last
// interval's writes. SyncAlways fsyncs every write before it is
// acknowledged: a power loss loses nothing acknowledged, at 10-30x the cost.
//
//	srv, err := embedded.Start(embedded.Options{Dir: "/var/lib/myapp/nats"})
//	if err != nil { ... }
//	defer srv.Stop()
//	nc, err := srv.Connect()
//
// The server listens on 127.0.0.1 and a random port by default, so other
// processes on the machine (the jetflow CLI, a second worker) can connect to
// srv.ClientURL(). It has no login by default: anyone who can reach the
// address can use JetStream. Before listening on another Host, set a login
// (Options.User and Password, or Token) and TLS (Options.TLSCert and
// TLSKey, with TLSCA for client certificates); srv.Connect logs in with
// them. When the service outgrows one machine, the same jetflow
// code connects to a NATS cluster by URL instead; Options.Cluster joins an
// embedded server to a cluster for tests and small 3-node setups.
package embedded
