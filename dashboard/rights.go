package dashboard

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go"
)

// rightsTTL is how long the answer of a rights probe is kept.
const rightsTTL = time.Minute

// probeTimeout bounds one rights probe.
const probeTimeout = 2 * time.Second

// probeKey is the key a rights probe writes to, in each bucket probed. The
// write cannot succeed (mayWrite): no record of that key is stored or
// changed, whether one exists or not.
const probeKey = natsperm.ProbeKey

// right is a write the dashboard's buttons make: a page shows a button
// only when its NATS user has the right (mayWrite), as a button it may
// not use could only answer 403 (docs/permissions.md).
type right int

const (
	// writeRuns: write run records (the runs bucket): the run page's
	// Cancel and Re-run, the crons page's Trigger now. Cancel also
	// publishes a cancel notice and purges the waiting entry, and Re-run
	// and Trigger now publish the run, but without those the record is
	// still written and the action done (docs/permissions.md).
	writeRuns right = iota
	// writePaused: write the functions bucket's pause marks
	// (=paused.<function>): the functions page's Pause and Resume.
	writePaused
	// writeCrons: write cron records (the crons bucket): the crons page's
	// Pause and Resume.
	writeCrons
	numRights
)

// probe is the write that asks the server for right r: a write of the
// key the right's buttons write, in the same bucket.
func (h *handler) probe(r right) *nats.Msg {
	cfg := engine.Of(h.p).Store().Config()
	var bucket, key string
	switch r {
	case writeRuns:
		bucket, key = cfg.RunsBucket(), probeKey
	case writePaused:
		bucket, key = cfg.FunctionsBucket(), kv.PausedKey(probeKey)
	case writeCrons:
		bucket, key = cfg.CronsBucket(), kv.CronDefPrefix+probeKey
	}
	// At a revision no key has: the stream refuses it, if the server lets
	// it through.
	return kv.PutMsg(bucket, key, nil, kv.PutExpect(math.MaxInt64))
}

// rights remembers what this dashboard's NATS user may write, as probed.
// One lock for all: probes never overlap on the connection, so that one's
// violation is never taken for another's.
type rights struct {
	mu    sync.Mutex
	may   [numRights]bool
	asked [numRights]time.Time
}

// mayWrite reports whether the dashboard's NATS user has right r. It asks
// the server with a write that cannot succeed, a conditional write at a
// revision no key has (probe): allowed, the stream refuses it (wrong last
// sequence) and stores nothing; denied, the server answers with a
// permissions violation. Any other answer (a timeout, an outage, a bucket
// not provisioned) says yes, unremembered: the buttons are shown, and the
// server still refuses what it must. An answer is kept rightsTTL.
func (h *handler) mayWrite(ctx context.Context, r right) bool {
	h.rights.mu.Lock()
	defer h.rights.mu.Unlock()
	if at := h.rights.asked[r]; !at.IsZero() && time.Since(at) < rightsTTL {
		return h.rights.may[r]
	}
	msg := h.probe(r)
	js := engine.Of(h.p).Store().JetStream()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	// Only a violation of the probe's own subject answers it.
	err := natsperm.Do(ctx, js.Conn(), func(ctx context.Context) error {
		_, err := js.PublishMsg(ctx, msg)
		return err
	}, msg.Subject)
	switch {
	case errors.Is(err, nats.ErrPermissionViolation):
		h.rights.may[r] = false
	case err == nil || kv.IsWrongSequence(err):
		h.rights.may[r] = true
	default:
		return true // not known: not remembered
	}
	h.rights.asked[r] = time.Now()
	return h.rights.may[r]
}
