// Package srvclock estimates how far this process's clock is from the NATS
// server's, so that times other processes act on (a retry's due time) are
// set in the server's time: a worker whose clock is 30 s ahead then
// neither delays nor hastens its retries.
//
// The estimate comes from JetStream API answers, which carry the server's
// time ("ts" in a stream info): the offset is the local time at the middle
// of the request minus the server's, and of a few requests the one with the
// shortest round trip is kept (its error is at most half that round trip).
package srvclock

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Clock is a local clock and its measured offset from the server's.
type Clock struct {
	local  func() time.Time
	offset atomic.Int64 // local minus server, ns
	pinned bool         // the offset stays 0 (NewPinned)
	// anchor: the server's time at a moment of this process's monotonic
	// clock, from the last Probe: Age counts from it, so neither the
	// local wall clock nor a jump of it enters an age.
	anchor atomic.Pointer[anchor]
}

type anchor struct {
	server time.Time // the server's time ...
	at     time.Time // ... at this local instant (with its monotonic reading)
}

// New returns a Clock over local (time.Now when nil), with no offset until
// the first Probe.
func New(local func() time.Time) *Clock {
	if local == nil {
		local = time.Now
	}
	return &Clock{local: local}
}

// NewPinned is New for a local clock that is to be taken as the server's
// (a test's fake clock shared by every process): Now is local, whatever a
// Probe measures; Age is measured all the same.
func NewPinned(local func() time.Time) *Clock {
	c := New(local)
	c.pinned = true
	return c
}

// Age is how long ago, on the server's clock, the server stamped t (a
// message's stored time), measured from the last Probe on this process's
// monotonic clock; ok is false before the first Probe.
func (c *Clock) Age(t time.Time) (age time.Duration, ok bool) {
	a := c.anchor.Load()
	if a == nil {
		return 0, false
	}
	return a.server.Add(time.Since(a.at)).Sub(t), true
}

// Now is the server's time as estimated here: the local clock, corrected
// by the offset when that is over Noise.
func (c *Clock) Now() time.Time {
	if off := c.Offset(); off.Abs() > Noise {
		return c.local().Add(-off)
	}
	return c.local()
}

// Noise is the offset taken as none: a probe's own error on a busy host is
// a few milliseconds, and jetflow's timing works in seconds.
const Noise = 100 * time.Millisecond

// Follow returns a clock that tells the server's time (Clock.Now over
// local, time.Now when nil), probed on nc now and again when it is used
// over every after the last probe (in the background, one probe at a
// time). A probe that fails leaves the last estimate (none: the local
// clock).
func Follow(ctx context.Context, local func() time.Time, nc *nats.Conn, apiPrefix, stream string, every time.Duration) func() time.Time {
	c := New(local)
	probe := func(ctx context.Context) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = c.Probe(pctx, nc, apiPrefix, stream, 3)
	}
	probe(ctx)
	var last atomic.Pointer[time.Time]
	var busy atomic.Bool
	t0 := time.Now()
	last.Store(&t0)
	return func() time.Time {
		if time.Since(*last.Load()) > every && busy.CompareAndSwap(false, true) {
			go func() {
				defer busy.Store(false)
				probe(context.Background())
				t := time.Now()
				last.Store(&t)
			}()
		}
		return c.Now()
	}
}

// Offset is the local clock minus the server's (positive: ahead).
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Probe measures the offset with tries stream info requests on nc (the
// stream must exist; every jetflow role may look its streams up) and keeps
// the estimate of the shortest round trip.
func (c *Clock) Probe(ctx context.Context, nc *nats.Conn, apiPrefix, stream string, tries int) error {
	best, bestRTT := time.Duration(0), time.Duration(-1)
	var bestAnchor anchor
	for range max(tries, 1) {
		off, rtt, a, err := c.sample(ctx, nc, apiPrefix+"STREAM.INFO."+stream)
		if err != nil {
			return err
		}
		if bestRTT < 0 || rtt < bestRTT {
			best, bestRTT, bestAnchor = off, rtt, a
		}
	}
	if !c.pinned {
		c.offset.Store(int64(best))
	}
	c.anchor.Store(&bestAnchor)
	return nil
}

func (c *Clock) sample(ctx context.Context, nc *nats.Conn, subj string) (off, rtt time.Duration, a anchor, err error) {
	m0, t0 := time.Now(), c.local()
	m, err := nc.RequestWithContext(ctx, subj, nil)
	t1, m1 := c.local(), time.Now()
	if err != nil {
		return 0, 0, a, err
	}
	var info struct {
		TS time.Time `json:"ts"`
	}
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return 0, 0, a, fmt.Errorf("srvclock: %s: %w", subj, err)
	}
	if info.TS.IsZero() {
		return 0, 0, a, fmt.Errorf("srvclock: %s: the server's answer has no time", subj)
	}
	a = anchor{server: info.TS, at: m0.Add(m1.Sub(m0) / 2)}
	return Estimate(t0, t1, info.TS), m1.Sub(m0), a, nil
}

// Estimate is the offset of a clock that read t0 before a request and t1
// after its answer, which the server stamped server: local minus server,
// at the middle of the round trip.
func Estimate(t0, t1, server time.Time) time.Duration {
	mid := t0.Add(t1.Sub(t0) / 2)
	return mid.Sub(server)
}
