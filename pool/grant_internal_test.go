package pool

import (
	"errors"
	"testing"

	"github.com/jetflow-dev/jetflow"
)

func TestQueuedStep(t *testing.T) {
	t.Parallel()
	it := &Item{ID: "a"}
	for _, tc := range []struct {
		name string
		q    queued
		seq  uint64
		err  error
		want grantStep
	}{
		{"the entry granted", queued{Attempt: 1, Item: it}, 7, nil, grantOn},
		{"canceled", queued{}, 0, jetflow.ErrNotFound, grantGone},
		{"garbage", queued{}, 0, jetflow.ErrBadRecord, grantGone},
		{"read failed", queued{}, 0, errors.New("timeout"), grantLater},
		{"replaced by a newer entry", queued{Attempt: 1, Item: it}, 9, nil, grantGone},
		{"entry without its item", queued{Attempt: 1}, 7, nil, grantGone},
	} {
		if got := queuedStep(tc.q, tc.seq, tc.err, 7); got != tc.want {
			t.Errorf("%s: queuedStep = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestExistingStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cur  *Item
		err  error
		want grantStep
	}{
		{"pending, never started: a slot of it was taken back", &Item{State: jetflow.Pending}, nil, grantFromRecord},
		{"canceled before it started", &Item{State: jetflow.Canceled}, nil, grantStale},
		{"a duplicate entry of a started item", &Item{State: jetflow.InProgress, Attempts: 1}, nil, grantStale},
		{"pending retry: a duplicate entry", &Item{State: jetflow.Pending, Attempts: 1}, nil, grantStale},
		{"gone since", nil, jetflow.ErrNotFound, grantStale},
		{"garbage", nil, jetflow.ErrBadRecord, grantStale},
		{"read failed", nil, errors.New("timeout"), grantLater},
	} {
		if got := existingStep(tc.cur, tc.err); got != tc.want {
			t.Errorf("%s: existingStep = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestPendingStep(t *testing.T) {
	t.Parallel()
	const granted = 100
	pending := func(attempts int, mark *slotMark) *Item {
		return &Item{State: jetflow.Pending, Attempts: attempts, revoked: mark}
	}
	for _, tc := range []struct {
		name    string
		cur     *Item
		err     error
		lastTry bool
		want    grantStep
	}{
		{"pending for this attempt", pending(1, nil), nil, false, grantOn},
		{"marked for an earlier grant", pending(1, &slotMark{Attempt: 2, Granted: granted - 1}), nil, false, grantOn},
		{"marked for an earlier attempt", pending(1, &slotMark{Attempt: 1, Granted: granted}), nil, false, grantOn},
		{"this grant's slot taken back", pending(1, &slotMark{Attempt: 2, Granted: granted}), nil, false, grantRevoked},
		{"too many lost compare-and-swaps", pending(1, nil), nil, true, grantLater},
		{"gone", nil, jetflow.ErrNotFound, false, grantStale},
		{"gone, last try", nil, jetflow.ErrNotFound, true, grantStale},
		{"garbage", nil, jetflow.ErrBadRecord, false, grantStale},
		{"read failed", nil, errors.New("timeout"), false, grantLater},
		{"canceled", &Item{State: jetflow.Canceled, Attempts: 1}, nil, false, grantStale},
		{"already running it", &Item{State: jetflow.InProgress, Attempts: 2}, nil, false, grantStale},
		{"pending for another attempt", pending(2, nil), nil, false, grantStale},
	} {
		if got := pendingStep(tc.cur, tc.err, 2, granted, tc.lastTry); got != tc.want {
			t.Errorf("%s: pendingStep = %d, want %d", tc.name, got, tc.want)
		}
	}
}
