package dashboard

import (
	"context"
	"errors"
	"net/http"

	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/nats-io/nats.go/jetstream"
)

// triggers reads every trigger (kv.ReadTriggers): its definition, the
// counters of the runners running it now and what its consumer holds. No
// bucket yet is no trigger.
func (h *handler) triggers(ctx context.Context) ([]kv.TriggerInfo, error) {
	st := engine.Of(h.p).Store()
	list, err := kv.ReadTriggers(ctx, st.JetStream(), st.Config())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return []kv.TriggerInfo{}, nil
	}
	return list, err
}

type triggersData struct {
	common
	Triggers []triggerRow
}

// triggerRow is a trigger on the page, with its state.
type triggerRow struct {
	kv.TriggerInfo
	State string
}

func (h *handler) triggersPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	list, err := h.triggers(ctx)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	rows := make([]triggerRow, len(list))
	for i, ti := range list {
		rows[i] = triggerRow{TriggerInfo: ti, State: ti.State()}
	}
	h.render(w, r, h.pages.triggers, http.StatusOK, triggersData{common: h.common("triggers", "Triggers"), Triggers: rows})
}

func (h *handler) apiTriggers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	list, err := h.triggers(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"triggers": list})
}
