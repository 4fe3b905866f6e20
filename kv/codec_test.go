package kv

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
)

func TestCodecMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 9, 30, 1, 123456789, time.UTC)
	runs := []*jetflow.Run{
		{ID: "a", Name: "f.g", State: jetflow.Pending, ScheduledTime: now, CreationTime: now},
		{ID: "b-1", Name: "emails.send", Kind: jetflow.AtMostOnce, Args: json.RawMessage(`{"to":"a@b.c"}`),
			State: jetflow.Failed, ScheduledTime: now, CreationTime: now.Add(-time.Hour), StartedTime: now,
			Owner: "w1", Heartbeat: now, CompletedTime: now.Add(time.Second), Attempts: 3, MaxAttempts: 5,
			Timeout: time.Minute, Error: "boom \"quoted\" <tag> & \n newline \u00e9 \xff", Permanent: true,
			Parent: "p", HeldBy: "h", Children: []string{"c1", "c2"},
			Progress: &jetflow.Progress{Percent: 50, Processed: 1, Total: 2, Message: "half", Updated: now},
			Result:   json.RawMessage(`[1,2]`), OnComplete: &jetflow.Callback{Function: "done", Args: json.RawMessage(`{"x":1}`)},
			Pool: "pl", Priority: -1, Trace: map[string]string{"traceparent": "00-abc"},
			History: []jetflow.Attempt{
				{Attempt: 1, Worker: "w0", StartedTime: now, CompletedTime: now, Outcome: "failed", Error: "x \"y\""},
				{Attempt: 2, Outcome: "lost"},
			}},
		{ID: "c", Name: "x", State: jetflow.Success, ScheduledTime: now.In(time.FixedZone("X", 3600)), CreationTime: now},
	}
	for _, r := range runs {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EncodeRun(r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("codec differs from encoding/json:\n got %s\nwant %s", got, want)
		}
	}
}

func BenchmarkEncodeRun(b *testing.B) {
	now := time.Now()
	r := &jetflow.Run{ID: "QWERTYUIOPASDFGHJKLZXC", Name: "bench.noop", Kind: jetflow.Retryable,
		Args:  json.RawMessage(`{"s":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`),
		State: jetflow.Success, ScheduledTime: now, CreationTime: now, StartedTime: now, CompletedTime: now, Attempts: 1, Owner: "w"}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = EncodeRun(r)
	}
}
