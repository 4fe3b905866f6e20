// Package archtest holds the test of jetflow's import rules, as
// docs/architecture.md draws them: it has no code of its own.
package archtest
