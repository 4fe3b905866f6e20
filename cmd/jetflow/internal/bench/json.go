package bench

// JSON is the figures of one mode for --json: rates in runs or messages
// per second, durations in nanoseconds, ratios beside raw JetStream
// measured in the same run.
type JSON struct {
	Mode                 string  `json:"mode"`
	N                    int     `json:"n"`
	RawPublish           float64 `json:"raw_publish_per_s"`
	RawPublishConsume    float64 `json:"raw_publish_consume_per_s"`
	EnqueueAsync         float64 `json:"enqueue_async_per_s"`
	EnqueueBatch         float64 `json:"enqueue_batch_per_s"`
	EnqueueConcurrent    float64 `json:"enqueue_concurrent_per_s"`
	EndToEnd             float64 `json:"end_to_end_per_s"`
	EndToEndOverlap      float64 `json:"end_to_end_overlap_per_s"`
	EndToEndClaimFirst   float64 `json:"end_to_end_claim_first_per_s,omitempty"`
	EnqueueRatio         float64 `json:"enqueue_ratio"`
	EnqueueBatchRatio    float64 `json:"enqueue_batch_ratio"`
	EndToEndRatio        float64 `json:"end_to_end_ratio"`
	EndToEndCPURatio     float64 `json:"end_to_end_cpu_ratio"`
	ClaimFirstRatio      float64 `json:"claim_first_ratio,omitempty"`
	RawCPUPerMessageNS   int64   `json:"raw_cpu_per_message_ns"`
	EndToEndCPUPerRunNS  int64   `json:"end_to_end_cpu_per_run_ns"`
	LatenessP50NS        int64   `json:"lateness_p50_ns"`
	LatenessP99NS        int64   `json:"lateness_p99_ns"`
	LatenessMaxNS        int64   `json:"lateness_max_ns"`
	LatenessRuns         int     `json:"lateness_runs"`
	LatenessNotSucceeded int     `json:"lateness_not_succeeded"`
	RawLatencyP99NS      int64   `json:"raw_latency_p99_ns"`
	// Enqueue from ManyGoroutines goroutines beside raw synchronous
	// publishes from as many.
	EnqueueMany            float64 `json:"enqueue_many_per_s"`
	RawSyncMany            float64 `json:"raw_sync_many_per_s"`
	EnqueueManyRatio       float64 `json:"enqueue_many_ratio"`
	EnqueueManyCPUPerRunNS int64   `json:"enqueue_many_cpu_per_run_ns"`
	RawSyncManyCPUPerMsgNS int64   `json:"raw_sync_many_cpu_per_message_ns"`
	// The floor (not in SyncAlways mode): CPU of a raw record write, and
	// the CPU ratios a run of one (ClaimFirst: two) record writes would
	// reach if nothing else cost anything.
	RawRecordWriteCPUNS  int64   `json:"raw_record_write_cpu_ns"`
	EndToEndCPUCeiling   float64 `json:"end_to_end_cpu_ceiling"`
	ClaimFirstCPUCeiling float64 `json:"claim_first_cpu_ceiling"`
}

// JSONOf is r for --json.
func JSONOf(r Result) JSON {
	j := JSON{
		Mode: r.Mode.String(), N: r.N,
		RawPublish: r.RawPublish, RawPublishConsume: r.RawPublishConsume,
		EnqueueAsync: r.EnqueueAsync, EnqueueBatch: r.EnqueueBatch, EnqueueConcurrent: r.EnqueueConc,
		EndToEnd: r.EndToEnd, EndToEndOverlap: r.EndToEndOverlap, EndToEndClaimFirst: r.EndToEndClaimFirst,
		EnqueueRatio: r.EnqueueRatio(), EnqueueBatchRatio: r.EnqueueBatchRatio(),
		EndToEndRatio: r.EndToEndRatio(), EndToEndCPURatio: r.EndToEndCPURatio(),
		RawCPUPerMessageNS: r.RawPublishConsumeCPU.Nanoseconds(), EndToEndCPUPerRunNS: r.EndToEndCPU.Nanoseconds(),
		LatenessP50NS: r.Lateness.P50.Nanoseconds(), LatenessP99NS: r.Lateness.P99.Nanoseconds(),
		LatenessMaxNS: r.Lateness.Max.Nanoseconds(), LatenessRuns: r.LatenessN, LatenessNotSucceeded: r.LatenessBad,
		RawLatencyP99NS: r.RawLatency.P99.Nanoseconds(),
		EnqueueMany:     r.Many.Jetflow.Rate(), RawSyncMany: r.Many.Raw.Rate(), EnqueueManyRatio: r.Many.Ratio(),
		EnqueueManyCPUPerRunNS: per(r.Many.Jetflow.CPU, r.Many.Jetflow.Calls).Nanoseconds(),
		RawSyncManyCPUPerMsgNS: per(r.Many.Raw.CPU, r.Many.Raw.Calls).Nanoseconds(),
	}
	if r.Floor.Write > 0 {
		j.RawRecordWriteCPUNS = r.Floor.Write.Nanoseconds()
		j.EndToEndCPUCeiling = r.Floor.Ceiling(r.RawPublishConsumeCPU, 1)
		j.ClaimFirstCPUCeiling = r.Floor.Ceiling(r.RawPublishConsumeCPU, 2)
	}
	if r.EndToEndClaimFirst > 0 {
		j.ClaimFirstRatio = ratio(r.EndToEndClaimFirst, r.RawPublishConsume)
	}
	return j
}
