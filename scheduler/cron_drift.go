package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// drift remembers the differences between this process's code-defined
// crons and the stored ones that it has warned of, by cron name.
type drift struct {
	mu     sync.Mutex
	warned map[string]string
}

// checkCode compares this process's code-defined crons (CronConfig.Crons)
// with the stored ones and logs a warning for each one missing from the
// store or stored with another definition (schedule, function, arguments,
// overlap or catch-up), naming the cron and the difference, once per
// difference: a standby deployed with other crons than the leader's learns
// it at once instead of when it becomes leader. A scheduler calls it when
// it starts and, while it stands by, every RepairInterval; the leader's
// Sync makes the two equal. It returns the differences found now, by cron
// name, and does nothing without code-defined crons.
func (c *Crons) checkCode(ctx context.Context) (map[string]string, error) {
	if c.code == nil {
		return nil, nil
	}
	found := map[string]string{}
	for i := range c.code {
		want := &c.code[i]
		cur, _, err := c.load(ctx, want.Name)
		switch {
		case errors.Is(err, ErrCronNotFound):
			found[want.Name] = "missing from the stored crons (code: " + want.Spec.String() + ")"
			continue
		case errors.Is(err, ErrBadCronRecord):
			found[want.Name] = "stored record unusable: " + err.Error()
			continue
		case err != nil && cur == nil:
			return nil, err
		}
		if d := definitionDiff(cur, want); d != "" {
			found[want.Name] = d
		}
	}
	c.drift.mu.Lock()
	defer c.drift.mu.Unlock()
	if c.drift.warned == nil {
		c.drift.warned = map[string]string{}
	}
	for _, r := range c.code {
		d, ok := found[r.Name]
		if !ok {
			delete(c.drift.warned, r.Name) // equal now: a new difference warns again
			continue
		}
		if c.drift.warned[r.Name] == d {
			continue
		}
		c.drift.warned[r.Name] = d
		c.log.WarnContext(ctx, "code-defined cron differs from the stored one (the leader's code is in force)", "cron", r.Name, "difference", d)
	}
	return found, nil
}

// definitionDiff names what differs between the stored definition cur and
// this process's want ("" when they are the same).
func definitionDiff(cur, want *cronRecord) string {
	var diffs []string
	if cur.Spec != want.Spec {
		diffs = append(diffs, fmt.Sprintf("schedule: stored %s, code %s", cur.Spec.String(), want.Spec.String()))
	}
	if cur.Function != want.Function || cur.Kind != want.Kind {
		diffs = append(diffs, fmt.Sprintf("function: stored %s (%s), code %s (%s)", cur.Function, cur.Kind, want.Function, want.Kind))
	}
	if string(cur.Args) != string(want.Args) {
		diffs = append(diffs, fmt.Sprintf("args: stored %.200s, code %.200s", cur.Args, want.Args))
	}
	if cur.Overlap != want.Overlap {
		diffs = append(diffs, fmt.Sprintf("overlap: stored %t, code %t", cur.Overlap, want.Overlap))
	}
	if cur.CatchUp != want.CatchUp {
		diffs = append(diffs, fmt.Sprintf("catchUp: stored %d, code %d", cur.CatchUp, want.CatchUp))
	}
	if cur.Origin != OriginCode && len(diffs) == 0 {
		diffs = append(diffs, "stored as a runtime cron")
	}
	return strings.Join(diffs, "; ")
}

// codeCheckLoop checks the code-defined crons against the stored ones
// (Crons.checkCode) once the first campaign for the lease is over, and
// then every RepairInterval, while this scheduler does not lead.
func (s *Scheduler) codeCheckLoop(ctx context.Context) {
	t := time.NewTimer(s.cfg.LeaseTTL / 5)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.IsLeader() {
			if _, err := s.Crons().checkCode(ctx); err != nil && ctx.Err() == nil {
				s.log.Debug("checking the code-defined crons", "error", err)
			}
		}
		t.Reset(s.cfg.RepairInterval)
	}
}
