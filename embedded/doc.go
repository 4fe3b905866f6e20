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
// srv.ClientURL(). When the service outgrows one machine, the same jetflow
// code connects to a NATS cluster by URL instead; Options.Cluster joins an
// embedded server to a cluster for tests and small 3-node setups.
package embedded
