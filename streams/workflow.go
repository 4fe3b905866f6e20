package streams

// JournalBucket holds the journals of durable workflows (package workflow):
// per workflow id, its cursor (<id>.wf), one entry per step (<id>.s.<step
// id>), the events sent to it (<id>.ev.<name>.<unique>) and which await
// consumed each (<id>.claim.<event revision>).
func (c Config) JournalBucket() string { return c.prefix() + "_journal" }
