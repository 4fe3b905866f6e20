package scheduler

import (
	"context"
	"time"
)

// SetAfterFire installs a hook called after a fire's run exists and before
// the cron is advanced (set it before the evaluator starts).
func SetAfterFire(c *Crons, f func(ctx context.Context, name string, t time.Time)) { c.afterFire = f }

// RunCronsWhileLeader runs s's cron evaluator (cronLoop) while s holds the
// lease, until ctx ends; the returned channel closes when it has stopped.
// It stands in for the cronLoop call in lead(); when both run, cronLoop's
// own guard keeps one evaluator per scheduler.
func RunCronsWhileLeader(ctx context.Context, s *Scheduler) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var cancel context.CancelFunc
		var loop chan struct{}
		stop := func() {
			if cancel != nil {
				cancel()
				<-loop
				cancel = nil
			}
		}
		defer stop()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			leader := s.IsLeader()
			if leader && cancel == nil {
				lctx, lcancel := context.WithCancel(ctx)
				cancel = lcancel
				loop = make(chan struct{})
				go func(done chan struct{}) {
					defer close(done)
					s.cronLoop(lctx)
				}(loop)
			} else if !leader {
				stop()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return done
}

// CheckCode runs the check of the code-defined crons against the stored
// ones that a standby makes (it logs each new difference).
func CheckCode(ctx context.Context, c *Crons) (map[string]string, error) { return c.checkCode(ctx) }

// IndexCaughtUp reports whether s's run index says it follows every
// record write (the repair sweep then reads its candidates, not every
// record).
func IndexCaughtUp(s *Scheduler) bool { return s.index.Stats().CaughtUp }
