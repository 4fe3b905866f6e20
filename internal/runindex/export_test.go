package runindex

import "github.com/nats-io/nats.go/jetstream"

// SetCounted sets the hook run between a window's count and its fetch
// (nil: none).
func SetCounted(f func(st jetstream.Stream, lo, hi uint64)) { counted = f }
