// Package integration proves jetflow's guarantees end to end, with real
// processes: a nats-server binary (one node, or a three-node cluster) built
// from the module's own nats-server dependency, and jetflow roles run by
// the helper program internal/jfproc, so that tests can SIGKILL a worker
// mid-run, SIGSTOP it past its AckWait, kill the scheduler's leader, restart
// the server under 1000 delayed runs, or kill a cluster node. The package
// holds tests only; this file documents it.
package integration
