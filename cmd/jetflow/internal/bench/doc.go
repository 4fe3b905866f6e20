// Package bench measures jetflow against raw JetStream on the same machine,
// in the same run, so that every figure is printed beside the raw figure it
// should be judged by (DESIGN.md, "Cost model").
//
// For each durability mode (embedded.SyncInterval, embedded.SyncAlways) Run
// starts a fresh embedded server on file storage in a temporary directory
// and measures:
//
//   - raw JetStream: async publish of N messages to a work-queue stream
//     (bounded window of 4096 pending acks), then Consume + Ack of all N;
//   - jetflow enqueue: N runs through producer.EnqueueAsync (pipelined, as
//     raw publishes), producer.Batch (1000 per call) and Enqueue from 64
//     goroutines, beside the raw publish rate;
//   - jetflow end to end: N no-op runs enqueued with EnqueueAsync, then run
//     by a worker, timed from the first enqueue to the last terminal record,
//     beside raw publish-then-consume (the headline ratio: the same shape of
//     work); the same with the worker running while the runs are enqueued
//     (overlapped); and, unless skipped, with every run claimed first;
//   - Enqueue from 1000 goroutines, each calling again as soon as its call
//     returns (a web service enqueueing per request), beside raw
//     synchronous js.Publish from as many goroutines before and after;
//   - where the time goes (first mode only): the e2e and many-goroutines
//     phases repeated under the CPU profiler, each sample charged to the
//     component that asked for it (nats-server, nats.go, jetflow, JSON, GC);
//   - scheduling lateness: runs scheduled with RunAt due at a steady 1,000/s
//     for 5 s, a scheduler running, lateness = handler start - scheduled
//     time; beside raw JetStream publish-to-consume latency at the same pace.
//     Each of the two starts from a collected heap, a second after the
//     phases before deleted their streams.
//
// Behind flags: RunEnqueueMany (Enqueue from 10, 100 and 1000 goroutines)
// and RunDelayedScale (the delayed store with 10k, 100k and 1M runs
// waiting: a scheduler's start and a standby's takeover to the first fire,
// the tick, the heap, and lateness meanwhile).
//
// Beside each rate it prints the process's CPU time per message or run
// (server included): on a machine shared with other work the CPU ratio is
// steadier than the wall-clock ratio, and it is what the pipelined design is
// budgeted by. The e2e phase also counts, from the streams and connections,
// how many writes and messages on the wire a run costs.
//
// Everything runs in one process (producer, worker, scheduler and server),
// as in ../shared/reference/run-lifecycle-cost.md. The command is
// `jetflow bench`; the Go benchmarks in this package serve profiling:
//
//	go test -run '^$' -bench EndToEnd -benchtime 100000x -cpuprofile cpu.out ./cmd/jetflow/internal/bench
//	go tool pprof -top -cum cpu.out
package bench
