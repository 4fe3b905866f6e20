package kv

import (
	"errors"
	"fmt"

	"github.com/jetflow-dev/jetflow"
)

// The one rule for a state write whose reply is lost (a timeout, no
// responders, a connection closed) or that a leader refused: it may have
// landed, so the writer reads the key back from the stream's leader and
// Settle decides from that read alone:
//
//	the leader did not answer (or a replica    Unread      read and write again later
//	behind did, not past the write's revision)
//	the key as the write expected it           NotLanded   write again (a refusal from an
//	(unchanged at its revision, or missing                 uncommitted proposal proves nothing)
//	for a create)
//	this very write                            Landed      it counts, at the stored revision
//	an earlier write of this writer's          Rebase      write again over it (its claim or
//	                                                       heartbeat landed unseen)
//	anything else                              Superseded  give up: ErrSuperseded
//	missing where a revision was expected      Gone        the record expired or never was
//
// CreateConfirmed is this rule for creates (Missing, Ours, Theirs:
// NotLanded, Landed, Superseded). The callers: the worker's claims,
// heartbeats and outcomes (engine.ReadBack), a workflow's journal entries,
// the pool's grants.

// Verdict is Settle's decision on a write whose reply was lost.
type Verdict uint8

const (
	// Unread: no answer the writer may go on from.
	Unread Verdict = iota
	// NotLanded: the key is as the write expected it: write again.
	NotLanded
	// Landed: the stored value is this very write.
	Landed
	// Rebase: the stored value is an earlier write of this writer's, which
	// this one may go over: write again at the stored revision.
	Rebase
	// Superseded: another writer changed the key: its write stands.
	Superseded
	// Gone: nothing stored where the write expected a revision.
	Gone
)

var verdictNames = [...]string{Unread: "unread", NotLanded: "not landed", Landed: "landed", Rebase: "rebase", Superseded: "superseded", Gone: "gone"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", v)
}

// ErrSuperseded: a write whose reply was lost, or that was refused, found
// the key changed by another writer, whose write stands. It is a conflict
// (errors.Is(err, ErrConflict) holds).
var ErrSuperseded = fmt.Errorf("%w: changed by another writer", ErrConflict)

// ReadBack is a read of a key after a write of it was refused or went
// unanswered.
type ReadBack struct {
	// Err is the read's error: ErrNotFound when nothing is stored,
	// jetflow.ErrBadRecord when what is stored is not the writer's kind.
	Err error
	// Leader: the stream's leader answered (not a direct get, which a
	// replica behind may answer).
	Leader bool
	// Rev is the stored revision.
	Rev uint64
	// Same: the stored value is this very write. Base: it is an earlier
	// write this one may go over.
	Same, Base bool
}

// Settle decides a write that expected revision rev (0: create-only) from
// its read-back rb: the table above.
func Settle(rev uint64, rb ReadBack) Verdict {
	missing := errors.Is(rb.Err, ErrNotFound)
	switch {
	case errors.Is(rb.Err, jetflow.ErrBadRecord):
		return Superseded
	case rb.Err != nil && !missing, !rb.Leader && behind(rev, missing, rb.Rev):
		return Unread
	case missing && rev == 0:
		return NotLanded
	case missing:
		return Gone
	case rb.Rev == rev:
		return NotLanded
	case rb.Same:
		return Landed
	case rb.Base:
		return Rebase
	}
	return Superseded
}

// behind reports whether a direct get's answer may come from a replica
// behind the write: missing after a create, or not past the expected
// revision.
func behind(rev uint64, missing bool, stored uint64) bool {
	if missing {
		return rev == 0
	}
	return stored <= rev
}
