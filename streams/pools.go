package streams

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PoolsBucket holds the work pools (package pool): per pool, its state,
// its dispatcher lease, its queue entries and its item records.
func (c Config) PoolsBucket() string { return c.prefix() + "_pools" }

// PoolsStreamConfig is the stream of the pools bucket, as Provision (and the
// pool package, when the bucket is missing) creates it. It is created as a
// stream rather than through the KV API, because the KV API denies message
// deletes, and queue entries are removed by sequence (no delete marker left
// behind); it also allows per-message TTLs and atomic batches.
func PoolsStreamConfig(c Config) jetstream.StreamConfig {
	c = c.WithDefaults()
	return jetstream.StreamConfig{
		Name:                   KVStream(c.PoolsBucket()),
		Description:            "jetflow: work pools (state, queues, items, leases)",
		Subjects:               []string{KVSubject(c.PoolsBucket(), ">")},
		MaxMsgsPerSubject:      1,
		MaxBytes:               -1,
		MaxMsgSize:             -1,
		MaxMsgs:                -1,
		MaxConsumers:           -1,
		Storage:                c.Storage,
		Replicas:               c.Replicas,
		AllowRollup:            true,
		AllowDirect:            true,
		Discard:                jetstream.DiscardNew,
		Duplicates:             2 * time.Minute,
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: time.Minute,
		AllowAtomicPublish:     true,
	}
}

// poolsProblems lists what keeps cfg, the pools bucket's stream, from
// serving the pool package.
func poolsProblems(cfg *jetstream.StreamConfig) []string {
	var p []string
	if cfg.DenyDelete {
		p = append(p, cfg.Name+" denies message deletes")
	}
	if !cfg.AllowAtomicPublish {
		p = append(p, cfg.Name+" does not allow atomic publish")
	}
	if !cfg.AllowMsgTTL {
		p = append(p, cfg.Name+" does not allow message TTLs")
	}
	return p
}
