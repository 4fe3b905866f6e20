package dashboard

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
)

// rightsTTL is how long the answer of a rights probe is kept.
const rightsTTL = time.Minute

// probeTimeout bounds one rights probe.
const probeTimeout = 2 * time.Second

// rights remembers what this dashboard's NATS user may write, as probed.
type rights struct {
	mu    sync.Mutex
	crons bool
	at    time.Time
}

// mayWriteCrons reports whether the dashboard's NATS user may write the
// crons bucket, as Pause and Resume do: the crons page shows those buttons
// only then (a read-only user's would answer 403, docs/permissions.md).
// It asks the server with a write that cannot succeed, a conditional write
// of a cron record at a revision no key has: allowed, the stream refuses
// it (wrong last sequence) and stores nothing; denied, the server answers
// with a permissions violation. Any other answer (a timeout, an outage)
// shows the buttons, which the server still refuses if it must. The answer
// is kept rightsTTL.
func (h *handler) mayWriteCrons(ctx context.Context) bool {
	h.rights.mu.Lock()
	defer h.rights.mu.Unlock()
	if !h.rights.at.IsZero() && time.Since(h.rights.at) < rightsTTL {
		return h.rights.crons
	}
	eng := engine.Of(h.p)
	st := eng.Store()
	msg := kv.PutMsg(st.Config().CronsBucket(), kv.CronDefPrefix+"jetflow-dashboard-probe", nil, kv.PutExpect(math.MaxInt64))
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := h.act(ctx, func(ctx context.Context) error {
		_, err := st.JetStream().PublishMsg(ctx, msg)
		return err
	})
	switch {
	case errors.Is(err, nats.ErrPermissionViolation):
		h.rights.crons, h.rights.at = false, time.Now()
	case err == nil || kv.IsWrongSequence(err):
		h.rights.crons, h.rights.at = true, time.Now()
	default:
		return true // not known: not remembered
	}
	return h.rights.crons
}
