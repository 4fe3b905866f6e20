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
}

// New returns a Clock over local (time.Now when nil), with no offset until
// the first Probe.
func New(local func() time.Time) *Clock {
	if local == nil {
		local = time.Now
	}
	return &Clock{local: local}
}

// Now is the server's time as estimated here.
func (c *Clock) Now() time.Time { return c.local().Add(-c.Offset()) }

// Offset is the local clock minus the server's (positive: ahead).
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Probe measures the offset with tries stream info requests on nc (the
// stream must exist; every jetflow role may look its streams up) and keeps
// the estimate of the shortest round trip.
func (c *Clock) Probe(ctx context.Context, nc *nats.Conn, apiPrefix, stream string, tries int) error {
	best, bestRTT := time.Duration(0), time.Duration(-1)
	for range max(tries, 1) {
		off, rtt, err := c.sample(ctx, nc, apiPrefix+"STREAM.INFO."+stream)
		if err != nil {
			return err
		}
		if bestRTT < 0 || rtt < bestRTT {
			best, bestRTT = off, rtt
		}
	}
	c.offset.Store(int64(best))
	return nil
}

func (c *Clock) sample(ctx context.Context, nc *nats.Conn, subj string) (off, rtt time.Duration, err error) {
	t0 := c.local()
	m, err := nc.RequestWithContext(ctx, subj, nil)
	t1 := c.local()
	if err != nil {
		return 0, 0, err
	}
	var info struct {
		TS time.Time `json:"ts"`
	}
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return 0, 0, fmt.Errorf("srvclock: %s: %w", subj, err)
	}
	if info.TS.IsZero() {
		return 0, 0, fmt.Errorf("srvclock: %s: the server's answer has no time", subj)
	}
	return Estimate(t0, t1, info.TS), t1.Sub(t0), nil
}

// Estimate is the offset of a clock that read t0 before a request and t1
// after its answer, which the server stamped server: local minus server,
// at the middle of the round trip.
func Estimate(t0, t1, server time.Time) time.Duration {
	mid := t0.Add(t1.Sub(t0) / 2)
	return mid.Sub(server)
}
