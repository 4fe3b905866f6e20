// Package integration proves jetflow's guarantees end to end, with real
// processes: a nats-server binary (one node, or a three-node cluster) built
// from the module's own nats-server dependency, and jetflow roles run by
// the helper program internal/jfproc, so that tests can SIGKILL a worker
// mid-run, SIGSTOP it past its AckWait, kill the scheduler's leader, restart
// the server under 1000 delayed runs, or kill a cluster node; and, on the
// three-node cluster, cut a node off from the others through the TCP
// proxies of testserver.Partition, or SIGSTOP the server leading the runs
// bucket. The package holds tests only; this file documents it.
//
// The fault suite (TestFault*) runs short by default; JETFLOW_FAULTS=long
// runs its long versions (task faults). JETFLOW_FAULT_CLAIM_AFTER=<duration>
// gives the cluster failover's workers that ClaimAfter: late claims on the
// cluster, an opt-in there (docs/scaling.md, "Late claims on a cluster").
// JETFLOW_FAULT_LOGS=<dir> has every worker, scheduler and producer process
// the tests start write its debug log to a file of its own in dir (their
// usual output is unchanged): where a run's time went, for diagnosis.
// JETFLOW_FAULT_SEED=<n> replays the fault durations of a scenario that
// draws them (partitions, pauses; each logs its seed).
package integration
