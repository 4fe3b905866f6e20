package streams

// JournalBucket holds the journals of durable workflows (package workflow):
// per workflow id, its cursor (<id>.wf), one entry per step (<id>.s.<step
// id>), the events sent to it (<id>.ev.<name>.<unique>) and which await
// consumed each (<id>.claim.<event revision>).
func (c Config) JournalBucket() string { return c.prefix() + "_journal" }

// PayloadsBucket is the object store bucket of large payloads: args,
// results and event payloads above a quarter of the server's max payload,
// which records and messages then hold by reference (docs/wire-format.md,
// "Large payloads").
func (c Config) PayloadsBucket() string { return c.prefix() + "_payloads" }

// ObjectStream is the stream behind an object store bucket.
func ObjectStream(bucket string) string { return "OBJ_" + bucket }
