package kv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A scan whose consumer stops delivering with records pending (here: it
// gives each message a microsecond, so that it gives up while they are
// still on their way) is an error, never a part taken for the whole: every
// record, or ErrFetchStalled. With the old rule (a quiet consumer means
// the records were removed) it returned a part, and no error.
func TestScanWholeOrStalled(t *testing.T) {
	ts, st := openedStore(t)
	ctx := context.Background()
	const n = 3000
	for i := range n {
		m := nats.NewMsg(fmt.Sprintf("$KV.jetflow_runs.r%d", i))
		m.Header.Set(HeaderState, "pending")
		m.Data = []byte("{}")
		if _, err := ts.JS.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-ts.JS.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("records not acknowledged")
	}
	count := func() (int, error) {
		seen := 0
		err := st.Scan(ctx, func(Header) { seen++ })
		return seen, err
	}
	if seen, err := count(); err != nil || seen != n {
		t.Fatalf("scan: %d records, %v; want %d", seen, err, n)
	}
	quiet := scanQuiet
	t.Cleanup(func() { scanQuiet = quiet })
	scanQuiet = time.Microsecond
	stalled := 0
	for range 5 {
		seen, err := count()
		switch {
		case errors.Is(err, ErrFetchStalled):
			stalled++
		case err != nil:
			t.Fatal(err)
		case seen != n:
			t.Fatalf("scan returned %d of %d records and no error", seen, n)
		}
	}
	t.Logf("%d of 5 scans stalled (ErrFetchStalled); the others read all %d", stalled, n)
}
