package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow"
)

// Run ids derived from others. Each is deterministic, so that whoever
// computes it again (a redelivered attempt, another scheduler, a retry of
// the same call) finds the run instead of making a second one.

// ChildID is the id of the n-th run (from 0) that attempt attempt of run
// parent schedules: "<parent>-<attempt>-<n>", or its hash when that is not
// a valid id (too long).
func ChildID(parent string, attempt, n int) string {
	return jetflow.DerivedID(fmt.Sprintf("%s-%d-%d", parent, attempt, n))
}

// maxChildScan bounds the children ChildAttempt tries for a hashed id.
const maxChildScan = 1024

// ChildAttempt returns the attempt of parent that scheduled child id, and
// false when id is not a child id of parent (or one of a hashed id beyond
// the first maxChildScan children of an attempt up to maxAttempt).
func ChildAttempt(parent, id string, maxAttempt int) (int, bool) {
	if rest, ok := strings.CutPrefix(id, parent+"-"); ok {
		a, n, ok := strings.Cut(rest, "-")
		attempt, err := strconv.Atoi(a)
		if _, nerr := strconv.Atoi(n); ok && errors.Join(err, nerr) == nil && attempt > 0 {
			return attempt, true
		}
	}
	if !strings.HasPrefix(id, "h") {
		return 0, false
	}
	for a := 1; a <= maxAttempt; a++ {
		for n := range maxChildScan {
			if ChildID(parent, a, n) == id {
				return a, true
			}
		}
	}
	return 0, false
}

// CronRunID is the id of the run cron name starts for time t:
// "cron-<name>-<unix seconds>".
func CronRunID(name string, t time.Time) string {
	return "cron-" + name + "-" + strconv.FormatInt(t.Unix(), 10)
}

// CronTriggerID is the id of the run of cron name started by hand at t
// (scheduler.Crons.Trigger, the dashboard's Trigger now):
// "trigger-<name>-<unix seconds>", one per cron and second, so that a
// repeated click starts it once; "trigger-<t in base 36 nanoseconds>" when
// the name makes that no valid run id.
func CronTriggerID(name string, t time.Time) string {
	id := "trigger-" + name + "-" + strconv.FormatInt(t.Unix(), 10)
	if jetflow.ValidateRunID(id) != nil {
		id = "trigger-" + strconv.FormatInt(t.UnixNano(), 36)
	}
	return id
}

// ParseCronRunID splits a cron run id into the cron's name and time.
func ParseCronRunID(id string) (name string, t time.Time, ok bool) {
	rest, found := strings.CutPrefix(id, "cron-")
	if !found {
		return "", time.Time{}, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return "", time.Time{}, false
	}
	sec, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil || !plainDigits(rest[i+1:]) {
		return "", time.Time{}, false
	}
	return rest[:i], time.Unix(sec, 0).UTC(), true
}

// DeadLetterID is the id of the failed record of a message that cannot be
// a run of its own id: "dlq-<stream>-<stream sequence>".
func DeadLetterID(stream string, seq uint64) string {
	return "dlq-" + stream + "-" + strconv.FormatUint(seq, 10)
}

// CompletionID is the id of the on-complete callback run of run id.
func CompletionID(id string) string { return jetflow.CompletionID(id) }

// plainDigits reports whether s is a number as ParseInt reads it with no
// sign: not empty, not starting with '-' or '+'.
func plainDigits(s string) bool {
	return s != "" && s[0] != '-' && s[0] != '+'
}
