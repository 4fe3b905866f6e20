// Package demo holds the example functions that `jetflow dev` serves and
// schedules at start: demo.hello (a retryable function that reports
// progress), demo.flaky (fails its first attempts on purpose, to show
// retries with backoff) and demo.report (at-most-once).
//
// It is application code, like examples/: it belongs to cmd/jetflow (its
// internal/), above the roles, and uses them (producer, worker) the way a
// service does.
package demo
