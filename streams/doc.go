// Package streams declares and provisions every JetStream stream and bucket
// jetflow uses, and names the subjects and headers of its wire format.
//
// Layout, for the default prefix "jetflow":
//
//	stream JETFLOW_FN        work queue, subjects jetflow.fn.<function>.<run id>
//	bucket jetflow_runs      the status table, key = run id
//	bucket jetflow_delayed   runs due later, key = <due unix second>.<run id>
//	bucket jetflow_leases    scheduler leader lease
//	bucket jetflow_functions functions that workers serve
//	bucket jetflow_crons     cron jobs
//	bucket jetflow_journal   workflow journals (package workflow)
//	bucket jetflow_pools     work pools (package pool): a stream that allows
//	                         message deletes, TTLs and atomic batches
//	stream JETFLOW_RUNIDX    the run index (docs/runindex.md)
//
// Provision is idempotent (create or update), so every process may call it
// at start. Replicas and storage come from Config.
package streams
