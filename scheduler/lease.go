package scheduler

import "github.com/jetflow-dev/jetflow/kv"

// ErrNotLeader: the lease is held by another scheduler.
var ErrNotLeader = kv.ErrNotLeader

// LeaseInfo says who holds the scheduler's lease.
type LeaseInfo = kv.LeaseInfo
