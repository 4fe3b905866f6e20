package workflow

import (
	"context"
	"errors"
	"time"

	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/producer"
)

// errStopped ends RestartRecordOnly's Restart where it dies.
var errStopped = errors.New("the restart died here")

// RestartRecordOnly is a Restart of workflow src into newID that dies
// right after its commit point, as Restart writes it (wfwire.Start): the
// new workflow's record, held by the Restart, and the first copy steps of
// the journal copy; then nothing (no release, no first segment).
func RestartRecordOnly(ctx context.Context, p *producer.Producer, src, newID string, copy int) error {
	r, jr, snap, err := restartable(ctx, p, src)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	a := segArgs{WF: newID, N: 1, Input: r.Args, Scheduled: now, Created: now, Forked: true, Fork: src}
	st := wfwire.Start{Record: recordOf(r.Name, a), SegArgs: mustJSON(a), CallerID: true,
		Fork: func(ctx context.Context) (bool, error) {
			for _, e := range forkCopy(currentRun(snap), nil)[:copy] {
				if _, err := jr.putEntry(ctx, newID, e); err != nil {
					return false, err
				}
			}
			return false, errStopped
		}}
	if err := st.Do(ctx, engine.Of(p), jr.kv); !errors.Is(err, errStopped) {
		return errors.Join(errors.New("want the restart stopped after its record"), err)
	}
	return nil
}
