package pool

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
)

func TestDecideSlot(t *testing.T) {
	t.Parallel()
	const (
		pend = jetflow.Pending
		run  = jetflow.InProgress
		done = jetflow.Success
	)
	// found is a check of slot attempt 2 whose item is in state with attempts.
	found := func(start, old bool, state jetflow.State, attempts int) slotCheck {
		return slotCheck{start: start, old: old, attempt: 2, read: itemFound, state: state, attempts: attempts}
	}
	read := func(start, old bool, r itemRead) slotCheck {
		return slotCheck{start: start, old: old, attempt: 2, read: r}
	}
	for _, tc := range []struct {
		name string
		c    slotCheck
		want slotVerdict
	}{
		{"young slot, not a term's start: not read", found(false, false, done, 2), slotKeep},
		{"read failed", read(false, true, itemUnreadable), slotKeep},
		{"read failed at a term's start", read(true, true, itemUnreadable), slotKeep},
		{"garbage record, old", read(false, true, itemBad), slotOrphan},
		{"garbage record, old, at a term's start", read(true, true, itemBad), slotOrphan},
		{"garbage record, young, at a term's start", read(true, false, itemBad), slotKeep},
		{"no record, old", read(false, true, itemMissing), slotOrphan},
		{"no record, at a term's start", read(true, true, itemMissing), slotKeep},
		{"no record, young, at a term's start", read(true, false, itemMissing), slotKeep},
		{"no such id, old", read(false, true, itemNoID), slotOrphan},
		{"no such id, at a term's start", read(true, true, itemNoID), slotKeep},
		{"attempt finished", found(false, true, done, 2), slotEnded},
		{"attempt finished, at a term's start, young", found(true, false, done, 2), slotEnded},
		{"attempt failed, retry pending", found(false, true, pend, 2), slotEnded},
		{"a later attempt runs", found(false, true, run, 3), slotEnded},
		{"a later attempt runs, at a term's start", found(true, false, run, 3), slotEnded},
		{"attempt running", found(false, true, run, 2), slotRunning},
		{"attempt running, at a term's start", found(true, true, run, 2), slotKeep},
		{"attempt not started", found(false, true, pend, 1), slotNotStarted},
		{"attempt not started, at a term's start", found(true, true, pend, 1), slotKeep},
		{"new item not started", found(false, true, pend, 0), slotNotStarted},
	} {
		if got := decideSlot(tc.c); got != tc.want {
			t.Errorf("%s: decideSlot(%+v) = %d, want %d", tc.name, tc.c, got, tc.want)
		}
	}
}

func TestItemReadOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want itemRead
	}{
		{nil, itemFound},
		{fmt.Errorf("item x: %w", jetflow.ErrNotFound), itemMissing},
		{fmt.Errorf("item x: %w", jetflow.ErrBadRecord), itemBad},
		{fmt.Errorf("item x: %w", jetflow.ErrInvalidRunID), itemNoID},
		{errors.New("timeout"), itemUnreadable},
	} {
		if got := itemReadOf(tc.err); got != tc.want {
			t.Errorf("itemReadOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestRepairOf(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	grace := time.Minute
	ended := func(ago time.Duration) *jetflow.Run {
		return &jetflow.Run{State: jetflow.Success, CompletedTime: now.Add(-ago)}
	}
	for _, tc := range []struct {
		name string
		run  *jetflow.Run
		err  error
		want runRepair
	}{
		{"no run", nil, jetflow.ErrNotFound, runMissing},
		{"read failed", nil, errors.New("timeout"), runFine},
		{"running", &jetflow.Run{State: jetflow.InProgress}, nil, runFine},
		{"ended within the grace", ended(grace - time.Second), nil, runFine},
		{"ended a grace ago", ended(grace), nil, runUnsettled},
	} {
		if got := repairOf(tc.run, tc.err, now, grace); got != tc.want {
			t.Errorf("%s: repairOf = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestSlotOld(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	grace := time.Minute
	for _, tc := range []struct {
		name          string
		granted, seen time.Time
		want          bool
	}{
		{"granted and seen just now", now, now, false},
		{"granted a grace ago", now.Add(-grace), now, true},
		{"seen a grace ago, granted in the future", now.Add(time.Hour), now.Add(-grace), true},
		{"granted in the future, seen now", now.Add(time.Hour), now, false},
	} {
		if got := slotOld(now, tc.granted.UnixNano(), tc.seen, grace); got != tc.want {
			t.Errorf("%s: slotOld = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMarkSourceOf(t *testing.T) {
	t.Parallel()
	it := &Item{ID: "a"}
	for _, tc := range []struct {
		name    string
		attempt int
		q       queued
		err     error
		want    markSource
	}{
		{"new item's entry", 1, queued{Attempt: 1, Item: it}, nil, markEntry},
		{"a retry's slot", 2, queued{Attempt: 1, Item: it}, nil, markNoEntry},
		{"no entry", 1, queued{}, jetflow.ErrNotFound, markNoEntry},
		{"garbage entry", 1, queued{}, jetflow.ErrBadRecord, markNoEntry},
		{"read failed", 1, queued{}, errors.New("timeout"), markUnread},
		{"a retry's entry", 1, queued{Attempt: 2}, nil, markNoEntry},
		{"entry without its item", 1, queued{Attempt: 1}, nil, markNoEntry},
	} {
		if got := markSourceOf(tc.attempt, tc.q, tc.err); got != tc.want {
			t.Errorf("%s: markSourceOf = %d, want %d", tc.name, got, tc.want)
		}
	}
}
