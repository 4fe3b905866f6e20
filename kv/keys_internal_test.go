package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/nats-io/nats.go/jetstream"
)

// ListKeys returns every key of the filter, or an error: a listing that a
// deadline cut short (its channel closes as at the end) is not taken for
// the whole list.
func TestListKeysWholeOrError(t *testing.T) {
	ts := testserver.Start(t)
	ctx := context.Background()
	b, err := ts.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "keys"})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 300 {
		k := fmt.Sprintf("q.%03d", i)
		want = append(want, k)
		if _, err := b.Put(ctx, k, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Put(ctx, "other.x", nil); err != nil {
		t.Fatal(err)
	}
	got, err := ListKeys(ctx, b, "q.*")
	slices.Sort(got)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ListKeys: %d keys, %v; want %d", len(got), err, len(want))
	}
	if got, err := ListKeys(ctx, b, "none.*"); err != nil || len(got) != 0 {
		t.Fatalf("no keys: %v, %v", got, err)
	}
	defer func(d time.Duration) { listAttempt = d }(listAttempt)
	listAttempt = time.Nanosecond // every attempt ends before its listing
	if got, err := ListKeys(ctx, b, "q.*"); !errors.Is(err, ErrListStalled) {
		t.Fatalf("listings cut short: %d keys, %v; want ErrListStalled", len(got), err)
	}
}
