//go:build race

package sim

// The race detector slows the simulation about tenfold (and one goroutine
// has no races to find): the short run takes fewer seeds under it.
const raceEnabled = true
