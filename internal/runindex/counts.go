package runindex

import (
	"time"

	"github.com/jetflow-dev/jetflow"
)

// Checkpoint is what the indexer stores on the checkpoint subject: the
// counts as of one sequence of the runs stream. A new indexer resumes from
// it.
type Checkpoint struct {
	// Seq is the runs stream sequence the counts reflect: every write up
	// to it, none after.
	Seq uint64 `json:"seq"`
	// IndexSeq is the runs stream sequence up to which index entries are
	// stored.
	IndexSeq uint64 `json:"indexSeq"`
	// Rebuilding is true while the indexer recounts every record: the
	// counts are then the last exact ones, true at At.
	Rebuilding bool `json:"rebuilding,omitempty"`
	// At is when the counts were true (the server's time of the last
	// write they reflect, or of the checkpoint when nothing was written
	// since).
	At time.Time `json:"at"`
	// Width is the granularity of terminal counts, in seconds: terminal
	// runs are counted by the slot of Width seconds of their terminal
	// write. Retention/168, at most an hour, at least a second.
	Width int64 `json:"width"`
	// Leader names the indexer that wrote it.
	Leader string `json:"leader"`
	// Retention of terminal records (streams.Config.Retention).
	Retention time.Duration `json:"retention"`
	// Functions holds the counts of each function.
	Functions map[string]*FunctionCounts `json:"functions"`

	// AsOf is when the checkpoint was stored (the server's time), set when
	// read.
	AsOf time.Time `json:"-"`
}

// FunctionCounts are one function's runs in each state. Terminal runs are
// counted by slot (Unix time / Checkpoint.Width: an hour at the default
// retention) of the server's time of their terminal write, which starts
// their retention, so that the slots whose records have expired drop out.
type FunctionCounts struct {
	Pending    int64                             `json:"pending,omitempty"`
	InProgress int64                             `json:"inProgress,omitempty"`
	Terminal   map[jetflow.State]map[int64]int64 `json:"terminal,omitempty"`
}

// Counts are the runs in each state, as the dashboard and the CLI show
// them.
type Counts struct {
	Pending    int64 `json:"pending"`
	InProgress int64 `json:"inProgress"`
	Success    int64 `json:"success"`
	Failed     int64 `json:"failed"`
	Canceled   int64 `json:"canceled"`
	Total      int64 `json:"total"`
}

// Of returns c's count of state s (Total for "").
func (c Counts) Of(s jetflow.State) int64 {
	switch s {
	case jetflow.Pending:
		return c.Pending
	case jetflow.InProgress:
		return c.InProgress
	case jetflow.Success:
		return c.Success
	case jetflow.Failed:
		return c.Failed
	case jetflow.Canceled:
		return c.Canceled
	}
	return c.Total
}

// Add counts n runs in state s.
func (c *Counts) Add(s jetflow.State, n int64) {
	switch s {
	case jetflow.Pending:
		c.Pending += n
	case jetflow.InProgress:
		c.InProgress += n
	case jetflow.Success:
		c.Success += n
	case jetflow.Failed:
		c.Failed += n
	case jetflow.Canceled:
		c.Canceled += n
	default:
		return
	}
	c.Total += n
}

// SlotWidth is the granularity of terminal counts for a retention, in
// seconds: retention/168 (an hour for the default 7 days), between a
// second and an hour.
func SlotWidth(retention time.Duration) int64 {
	return min(max(int64(retention/time.Second)/168, 1), int64(time.Hour/time.Second))
}

// TerminalSince is the start of the oldest slot whose terminal records are
// all still kept at now: terminal counts cover the runs that ended at or
// after it. The slot before it is partly expired and left out.
func TerminalSince(now time.Time, retention time.Duration, width int64) time.Time {
	if width <= 0 {
		width = SlotWidth(retention)
	}
	first := now.Add(-retention).Unix()
	h := (first + width - 1) / width // ceil: a slot starting before first is partly gone
	return time.Unix(h*width, 0).UTC()
}

// Sum returns the counts of function fn (every function when fn is "") as
// of now: terminal runs that ended at or after TerminalSince.
func (cp *Checkpoint) Sum(fn string, now time.Time) Counts {
	var c Counts
	width := cp.width()
	from := TerminalSince(now, cp.Retention, width).Unix() / width
	add := func(f *FunctionCounts) {
		c.Add(jetflow.Pending, f.Pending)
		c.Add(jetflow.InProgress, f.InProgress)
		for st, hours := range f.Terminal {
			for h, n := range hours {
				if h >= from {
					c.Add(st, n)
				}
			}
		}
	}
	if fn != "" {
		if f := cp.Functions[fn]; f != nil {
			add(f)
		}
		return c
	}
	for _, f := range cp.Functions {
		add(f)
	}
	return c
}

func (cp *Checkpoint) width() int64 {
	if cp.Width <= 0 {
		cp.Width = SlotWidth(cp.Retention)
	}
	return cp.Width
}

func (f *FunctionCounts) add(s jetflow.State, slot int64, n int64) {
	switch s {
	case jetflow.Pending:
		f.Pending += n
	case jetflow.InProgress:
		f.InProgress += n
	default:
		if f.Terminal == nil {
			f.Terminal = map[jetflow.State]map[int64]int64{}
		}
		m := f.Terminal[s]
		if m == nil {
			m = map[int64]int64{}
			f.Terminal[s] = m
		}
		m[slot] += n
	}
}

// prune drops the slots whose records have all expired at now.
func (cp *Checkpoint) prune(now time.Time) {
	from := now.Add(-cp.Retention).Unix()/cp.width() - 1
	for fn, f := range cp.Functions {
		for st, hours := range f.Terminal {
			for h := range hours {
				if h < from {
					delete(hours, h)
				}
			}
			if len(hours) == 0 {
				delete(f.Terminal, st)
			}
		}
		if f.Pending == 0 && f.InProgress == 0 && len(f.Terminal) == 0 {
			delete(cp.Functions, fn)
		}
	}
}

func timeNow() time.Time { return time.Now().UTC() }
