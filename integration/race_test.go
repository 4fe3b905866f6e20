//go:build race

package integration_test

// raceEnabled builds the helper program with -race too, so that data races
// in a worker or scheduler process fail the test that ran it.
const raceEnabled = true
