//go:build !unix

package bench

import "time"

// cpuTime is not measured on this platform; CPU figures print as 0.
func cpuTime() time.Duration { return 0 }
