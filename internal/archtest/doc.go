// Package archtest holds the tests of jetflow's rules over its own code: the
// import rules, as docs/architecture.md draws them; the code-shape limits
// of issue 27; reads of a run record only through kv.Store.Show or Decide;
// no state-changing call's error set aside. It has no code of its own.
package archtest
