package worker

import (
	"math"
	"testing"
)

func TestReplayBefore(t *testing.T) {
	const before = int64(1_000)
	read := seqBound{read: true, ok: true, seq: 50}
	cases := []struct {
		name   string
		before int64
		bound  seqBound
		seq    uint64
		stored int64
		want   bool
	}{
		{"never disconnected", 0, seqBound{}, 1, 1, false},
		{"disconnected now", math.MaxInt64, read, 99, 2_000, true},
		{"stored before the reconnect, bound unread", before, seqBound{}, 10, 900, true},
		{"stored after the reconnect's slack, bound unread", before, seqBound{}, 10, 1_100, false},
		{"within the slack, bound unread", before, seqBound{}, 60, 999, true},
		{"within the slack, a sequence after the bound", before, read, 51, 999, false},
		{"the bound's own sequence", before, read, 50, 999, true},
		{"a sequence before the bound", before, read, 10, 900, true},
		{"cluster: no bound, the stored time tells", before, seqBound{read: true, seq: 50}, 51, 999, true},
		{"failed read: the stored time tells", before, seqBound{read: true}, 51, 999, true},
	}
	for _, c := range cases {
		if got := replayBefore(c.before, c.bound, c.seq, c.stored); got != c.want {
			t.Errorf("%s: replayBefore = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSeqFrom(t *testing.T) {
	cases := []struct {
		reply string
		seq   uint64
		ok    bool
	}{
		{"$JS.ACK.JOBS.c.1.42.7.1700000000000000000.0", 42, true},
		{"$JS.ACK.dom.hash.JOBS.c.1.43.7.1700000000000000000.0.tok", 43, true},
		{"$JS.ACK.JOBS.c.1.x.7.1.0", 0, false},
		{"not.an.ack", 0, false},
	}
	for _, c := range cases {
		if seq, ok := seqFrom(c.reply); seq != c.seq || ok != c.ok {
			t.Errorf("seqFrom(%q) = %d, %v; want %d, %v", c.reply, seq, ok, c.seq, c.ok)
		}
	}
}

// heldLong and mayBeReplay read when a message was stored from its ack
// subject (both its forms), with no Metadata parse.
func TestStoredFrom(t *testing.T) {
	cases := []struct {
		reply  string
		stored int64
		ok     bool
	}{
		{"$JS.ACK.JOBS.c.1.42.7.1700000000000000000.0", 1700000000000000000, true},
		{"$JS.ACK.dom.hash.JOBS.c.2.43.7.1700000000000000001.0.tok", 1700000000000000001, true},
		{"$JS.ACK.JOBS.c.1.42.7.x.0", 0, false},
		{"$JS.ACK.JOBS.c.1.42.7.18446744073709551615.0", 0, false},
		{"_INBOX.abc", 0, false},
	}
	for _, c := range cases {
		if stored, ok := storedFrom(c.reply); ok != c.ok || ok && stored != c.stored {
			t.Errorf("storedFrom(%q) = %d, %v; want %d, %v", c.reply, stored, ok, c.stored, c.ok)
		}
	}
}
