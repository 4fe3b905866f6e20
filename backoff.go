package jetflow

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is exponential backoff with full jitter: the delay before attempt
// n+1 (after n failures) is uniform in [0, min(Max, Initial*Base^(n-1))],
// or exactly that cap when NoJitter is set.
type Backoff struct {
	Initial  time.Duration // default 1s
	Base     float64       // default 2
	Max      time.Duration // default 1h
	NoJitter bool
}

// WithDefaults fills zero fields.
func (p Backoff) WithDefaults() Backoff {
	if p.Initial <= 0 {
		p.Initial = time.Second
	}
	if p.Base < 1 {
		p.Base = 2
	}
	if p.Max <= 0 {
		p.Max = time.Hour
	}
	return p
}

// Cap is the largest delay after n failures (n >= 1).
func (p Backoff) Cap(n int) time.Duration {
	p = p.WithDefaults()
	if n < 1 {
		n = 1
	}
	d := float64(p.Initial) * math.Pow(p.Base, float64(n-1))
	if d > float64(p.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.Max
	}
	return time.Duration(d)
}

// Delay is the delay after n failures.
func (p Backoff) Delay(n int) time.Duration {
	c := p.Cap(n)
	if p.NoJitter || c <= 0 {
		return c
	}
	return time.Duration(rand.Int64N(int64(c) + 1))
}
