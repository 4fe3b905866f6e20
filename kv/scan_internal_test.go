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

// A scan of the whole runs bucket goes through an unfiltered consumer
// (WholeStream): it still visits each record once, its last write only,
// and no removed one.
func TestScanVisitsEachLiveRecordOnceAtItsLastWrite(t *testing.T) {
	ts, st := openedStore(t)
	ctx := context.Background()
	info, err := ts.JS.Stream(ctx, "KV_jetflow_runs")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := info.CachedInfo().Config; !WholeStream(cfg, "$KV.jetflow_runs.>") || cfg.MaxMsgsPerSubject != 1 {
		t.Fatalf("the runs bucket (subjects %v, %d a subject) is not read unfiltered: the test tests nothing", cfg.Subjects, cfg.MaxMsgsPerSubject)
	}
	put := func(id, state string) {
		t.Helper()
		m := nats.NewMsg("$KV.jetflow_runs." + id)
		m.Header.Set(HeaderState, state)
		m.Data = []byte("{}")
		if _, err := ts.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{}
	for i := range 40 {
		id := fmt.Sprintf("r%d", i)
		put(id, "pending")
		want[id] = "pending"
	}
	for i := 0; i < 40; i += 2 { // every other record written again
		id := fmt.Sprintf("r%d", i)
		put(id, "success")
		want[id] = "success"
	}
	kvb, err := ts.JS.KeyValue(ctx, "jetflow_runs")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 40; i += 10 { // and a few removed
		id := fmt.Sprintf("r%d", i)
		if err := kvb.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		delete(want, id)
	}
	got := map[string]string{}
	err = st.Scan(ctx, func(h Header) {
		if _, dup := got[h.ID]; dup {
			t.Errorf("record %s visited twice", h.ID)
		}
		got[h.ID] = string(h.State)
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("scan visited\n%v\nwant\n%v", got, want)
	}
}
