package bench

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"slices"
	"strings"
)

// Where the time goes: a CPU profile of a phase, each sample charged to the
// component that asked for the work. Walking a sample's stack from the
// leaf, the first frame of a known component names it (encoding/json
// before jetflow, so JSON that jetflow encodes counts as JSON); samples
// of the garbage collector and of nothing known count as "Go runtime".

// component names the part of the process a function belongs to.
func component(fn string) string {
	switch {
	case strings.HasPrefix(fn, "github.com/nats-io/nats-server/"):
		return "nats-server"
	case strings.HasPrefix(fn, "github.com/nats-io/nats.go"), strings.HasPrefix(fn, "github.com/nats-io/nats%2ego"):
		return "nats.go client"
	case strings.HasPrefix(fn, "encoding/json."):
		return "encoding/json"
	case strings.HasPrefix(fn, "github.com/jetflow-dev/jetflow/cmd/"):
		return "bench harness"
	case strings.HasPrefix(fn, "github.com/jetflow-dev/jetflow/"):
		return "jetflow"
	case strings.HasPrefix(fn, "runtime.gcBgMarkWorker"), strings.HasPrefix(fn, "runtime.gcAssist"), strings.HasPrefix(fn, "runtime.bgsweep"), strings.HasPrefix(fn, "runtime.bgscavenge"):
		return "Go GC"
	}
	return ""
}

// Share is one component's part of the CPU samples of a profile.
type Share struct {
	Component string
	Fraction  float64
	// Syscalls is the fraction of all samples spent in system calls on
	// this component's behalf.
	Syscalls float64
}

// profiled runs f under the CPU profiler and returns each component's
// share of the samples, largest first.
func profiled(f func() error) ([]Share, error) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, fmt.Errorf("bench: profile: %w", err) // a profile already runs (go test -cpuprofile)
	}
	err := f()
	pprof.StopCPUProfile()
	if err != nil {
		return nil, err
	}
	return shares(buf.Bytes())
}

// fmtShares is the profile summary printed in the notes.
func fmtShares(sh []Share) string {
	parts := make([]string, 0, len(sh))
	for _, s := range sh {
		if s.Fraction < 0.01 {
			continue
		}
		p := fmt.Sprintf("%s %.0f%%", s.Component, 100*s.Fraction)
		if s.Syscalls >= 0.01 {
			p += fmt.Sprintf(" (syscalls %.0f%%)", 100*s.Syscalls)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// shares reads a CPU profile (gzipped profile.proto) and charges each
// sample to a component.
func shares(data []byte) ([]Share, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	p, err := parseProfile(raw)
	if err != nil {
		return nil, err
	}
	total := int64(0)
	by := map[string]int64{}
	sys := map[string]int64{}
	for _, s := range p.samples {
		if len(s.values) == 0 {
			continue
		}
		v := s.values[len(s.values)-1] // cpu nanoseconds
		total += v
		comp, inSys := "", false
		for _, loc := range s.locs {
			for _, fid := range p.locFuncs[loc] {
				name := p.strings[p.funcNames[fid]]
				if strings.HasPrefix(name, "syscall.") || strings.HasPrefix(name, "internal/runtime/syscall") {
					inSys = true
				}
				if comp == "" {
					comp = component(name)
				}
			}
			if comp != "" {
				break
			}
		}
		if comp == "" {
			comp = "Go runtime"
		}
		by[comp] += v
		if inSys {
			sys[comp] += v
		}
	}
	if total == 0 {
		return nil, nil
	}
	out := make([]Share, 0, len(by))
	for c, v := range by {
		out = append(out, Share{Component: c, Fraction: float64(v) / float64(total), Syscalls: float64(sys[c]) / float64(total)})
	}
	slices.SortFunc(out, func(a, b Share) int {
		switch {
		case a.Fraction > b.Fraction:
			return -1
		case a.Fraction < b.Fraction:
			return 1
		}
		return strings.Compare(a.Component, b.Component)
	})
	return out, nil
}

// profile is what shares needs of a profile.proto.
type profile struct {
	samples   []sample
	locFuncs  map[uint64][]uint64 // location id -> function ids, leaf first
	funcNames map[uint64]int64    // function id -> name string index
	strings   []string
}

type sample struct {
	locs   []uint64
	values []int64
}

var errProfile = errors.New("bench: malformed profile")

// parseProfile decodes the fields of profile.proto that shares reads:
// Profile.sample (2), .location (4), .function (5), .string_table (6).
func parseProfile(b []byte) (*profile, error) {
	p := &profile{locFuncs: map[uint64][]uint64{}, funcNames: map[uint64]int64{}}
	err := fields(b, func(num int, wire int, v uint64, msg []byte) error {
		switch num {
		case 2:
			var s sample
			err := fields(msg, func(num, wire int, v uint64, m []byte) error {
				switch num {
				case 1:
					return packed(wire, v, m, func(x uint64) { s.locs = append(s.locs, x) })
				case 2:
					return packed(wire, v, m, func(x uint64) { s.values = append(s.values, int64(x)) })
				}
				return nil
			})
			p.samples = append(p.samples, s)
			return err
		case 4:
			var id uint64
			var funcs []uint64
			err := fields(msg, func(num, wire int, v uint64, m []byte) error {
				switch num {
				case 1:
					id = v
				case 4: // Line
					return fields(m, func(num, wire int, v uint64, _ []byte) error {
						if num == 1 {
							funcs = append(funcs, v)
						}
						return nil
					})
				}
				return nil
			})
			p.locFuncs[id] = funcs
			return err
		case 5:
			var id uint64
			var name int64
			err := fields(msg, func(num, wire int, v uint64, _ []byte) error {
				switch num {
				case 1:
					id = v
				case 2:
					name = int64(v)
				}
				return nil
			})
			p.funcNames[id] = name
			return err
		case 6:
			p.strings = append(p.strings, string(msg))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, n := range p.funcNames {
		if n < 0 || n >= int64(len(p.strings)) {
			return nil, errProfile
		}
	}
	return p, nil
}

// fields calls f for each field of a protobuf message: its number, wire
// type, varint value (wire 0) and bytes (wire 2).
func fields(b []byte, f func(num, wire int, v uint64, msg []byte) error) error {
	for len(b) > 0 {
		key, n := uvarint(b)
		if n <= 0 {
			return errProfile
		}
		b = b[n:]
		num, wire := int(key>>3), int(key&7)
		var v uint64
		var msg []byte
		switch wire {
		case 0:
			v, n = uvarint(b)
			if n <= 0 {
				return errProfile
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return errProfile
			}
			b = b[8:]
		case 2:
			l, n := uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return errProfile
			}
			msg, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return errProfile
			}
			b = b[4:]
		default:
			return errProfile
		}
		if err := f(num, wire, v, msg); err != nil {
			return err
		}
	}
	return nil
}

// packed reads a repeated varint field, packed (wire 2) or not (wire 0).
func packed(wire int, v uint64, msg []byte, add func(uint64)) error {
	if wire == 0 {
		add(v)
		return nil
	}
	for len(msg) > 0 {
		x, n := uvarint(msg)
		if n <= 0 {
			return errProfile
		}
		add(x)
		msg = msg[n:]
	}
	return nil
}

func uvarint(b []byte) (uint64, int) {
	var x uint64
	for i := 0; i < len(b) && i < 10; i++ {
		x |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return x, i + 1
		}
	}
	return 0, 0
}
