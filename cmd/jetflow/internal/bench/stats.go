package bench

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Percentiles of a latency sample.
type Percentiles struct {
	N             int
	P50, P99, Max time.Duration
}

func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(d))+0.5) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return Percentiles{N: len(d), P50: at(0.50), P99: at(0.99), Max: d[len(d)-1]}
}

// Cost is what one run costs on the wire, counted from the streams after the
// end-to-end phase (so it follows the code, whatever its design).
type Cost struct {
	RecordWrites float64 // messages stored in the runs bucket per run
	JobPublishes float64 // messages stored in the function stream per run
	Acks         float64 // acks per run (one per delivery)
	Wire         float64 // messages the producer and worker connections sent and received per run
}

// Writes is the total number of messages a run puts on the wire.
func (c Cost) Writes() float64 { return c.RecordWrites + c.JobPublishes + c.Acks }

func (c Cost) String() string {
	desc := ""
	switch {
	case near(c.RecordWrites, 1) && near(c.JobPublishes, 1) && near(c.Acks, 1):
		desc = ": job publish (the pending record), outcome record create, ack"
	case near(c.RecordWrites, 2) && near(c.JobPublishes, 1) && near(c.Acks, 1):
		desc = ": job publish (the pending record), claim (inProgress) record create, outcome record write, ack"
	}
	return fmt.Sprintf("%s writes per run%s (measured: %.2f record writes + %.2f job publishes + %.2f acks; %.1f messages on the wire per run, raw: 4)",
		trimFloat(c.Writes()), desc, c.RecordWrites, c.JobPublishes, c.Acks, c.Wire)
}

func near(a, b float64) bool { return a > b-0.02 && a < b+0.02 }

func trimFloat(f float64) string {
	if near(f, float64(int(f+0.5))) {
		return strconv.Itoa(int(f + 0.5))
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

// fmtRate formats a rate with thousands separators: 38,512.
func fmtRate(r float64) string {
	n := int64(r + 0.5)
	s := strconv.FormatInt(n, 10)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// fmtDur formats a latency in ms with one decimal, or µs below 1 ms.
func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDur(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
}
