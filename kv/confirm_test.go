package kv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
)

// TestCreateConfirmed: a refused create is reported stored or taken only on
// the leader's word; where the leader holds nothing it is made again.
func TestCreateConfirmed(t *testing.T) {
	other := errors.New("boom")
	cases := []struct {
		name    string
		creates []error    // what each try of create returns
		finds   []kv.Found // what each find after a refusal answers
		want    error      // nil: stored by this call
		tries   int
	}{
		{"stored at once", []error{nil}, nil, nil, 1},
		{"refused, ours on the leader", []error{kv.ErrRefused}, []kv.Found{kv.Ours}, nil, 1},
		{"refused, another's on the leader", []error{kv.ErrExists}, []kv.Found{kv.Theirs}, kv.ErrExists, 1},
		{"refused by a deposed leader, then stored", []error{kv.ErrRefused, kv.ErrRefused, nil}, []kv.Found{kv.Missing, kv.Missing}, nil, 3},
		{"refused, missing, then ours", []error{kv.ErrExists, kv.ErrExists}, []kv.Found{kv.Missing, kv.Ours}, nil, 2},
		{"not a refusal", []error{other}, nil, other, 1},
		{"never confirmed", nil, nil, kv.ErrUnconfirmed, -1},
		// The store's refusal is an ErrExists: an unconfirmed create must
		// not match it (it would be reported as stored).
		{"never confirmed, refused as existing", []error{kv.ErrExists, kv.ErrExists, kv.ErrExists, kv.ErrExists, kv.ErrExists, kv.ErrExists, kv.ErrExists, kv.ErrExists, kv.ErrExists, kv.ErrExists}, nil, kv.ErrUnconfirmed, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			tries, finds := 0, 0
			err := kv.CreateConfirmed(ctx, func(context.Context) error {
				tries++
				if tries > len(c.creates) {
					return kv.ErrRefused
				}
				return c.creates[tries-1]
			}, func(context.Context) (kv.Found, error) {
				finds++
				if finds > len(c.finds) {
					return kv.Missing, nil
				}
				return c.finds[finds-1], nil
			})
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if errors.Is(c.want, kv.ErrUnconfirmed) && errors.Is(err, kv.ErrExists) {
				t.Fatalf("err = %v matches kv.ErrExists: a create nobody stored would be reported as taken", err)
			}
			if c.tries >= 0 && tries != c.tries {
				t.Fatalf("%d tries, want %d", tries, c.tries)
			}
			if c.tries < 0 && tries < 2 {
				t.Fatalf("%d tries: a refusal the leader does not confirm is tried again", tries)
			}
		})
	}
}

// A single server's streams have no replicas: their leader always has its
// quorum.
func TestLeaderHasQuorumOnOneServer(t *testing.T) {
	ts := testserver.Start(t)
	ctx := context.Background()
	if err := streams.Provision(ctx, ts.JS, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	ok, err := kv.LeaderHasQuorum(ctx, ts.JS, streams.Config{}.WithDefaults().FunctionStream())
	if err != nil || !ok {
		t.Fatalf("quorum %v, %v; want true", ok, err)
	}
	if _, err := kv.LeaderHasQuorum(ctx, ts.JS, "NO_SUCH_STREAM"); err == nil {
		t.Fatal("a stream that does not exist: no error")
	}
}
