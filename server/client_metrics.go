package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// clientMetric is one gauge or counter read from the Client at scrape time.
type clientMetric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(b *ClientBackend) float64
}

func gauge(name, help string, f func(b *ClientBackend) float64) clientMetric {
	return clientMetric{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, f}
}

func counter(name, help string, f func(b *ClientBackend) float64) clientMetric {
	return clientMetric{prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, f}
}

// clientMetrics are the Client's own gauges: buffered deltas, durability
// and automatic N.
var clientMetrics = []clientMetric{
	gauge("hotcount_buffer_unflushed_delta", "Sum of this process's buffered deltas not yet acknowledged by the cache.",
		func(b *ClientBackend) float64 { return float64(b.BufferStats().Unflushed) }),
	gauge("hotcount_buffer_unflushed_keys", "Keys holding a buffered delta.",
		func(b *ClientBackend) float64 { return float64(b.BufferStats().PendingKeys) }),
	gauge("hotcount_buffer_oldest_unflushed_seconds", "Age of the oldest buffered delta not yet acknowledged (the loss window of a crash).",
		func(b *ClientBackend) float64 { return b.BufferStats().OldestUnflushed.Seconds() }),
	counter("hotcount_buffer_flushes_total", "Flush rounds.",
		func(b *ClientBackend) float64 { return float64(b.BufferStats().Flushes) }),
	counter("hotcount_buffer_flush_errors_total", "Flush rounds that failed in part or whole.",
		func(b *ClientBackend) float64 { return float64(b.BufferStats().FlushErrors) }),
	counter("hotcount_buffer_retries_total", "Flushed increments sent again with their token.",
		func(b *ClientBackend) float64 { return float64(b.BufferStats().Retries) }),
	counter("hotcount_buffer_writes_total", "Flushed increments the cache applied.",
		func(b *ClientBackend) float64 { return float64(b.BufferStats().OpsApplied) }),
	counter("hotcount_buffer_duplicates_skipped_total", "Retried increments the cache had applied already (counted once).",
		func(b *ClientBackend) float64 { return float64(b.BufferStats().OpsSkipped) }),
	counter("hotcount_buffer_backpressure_total", "Increments refused because the buffer bound was reached.",
		func(b *ClientBackend) float64 { return float64(b.BufferStats().Backpressure) }),
	counter("hotcount_durable_batches_total", "Group commits of the durable event log.",
		func(b *ClientBackend) float64 { return float64(b.DurabilityStats().Batches) }),
	counter("hotcount_durable_events_total", "Durable increments committed.",
		func(b *ClientBackend) float64 { return float64(b.DurabilityStats().Events) }),
	counter("hotcount_checkpoints_total", "Fast-mode checkpoint rounds.",
		func(b *ClientBackend) float64 { return float64(b.DurabilityStats().Checkpoints) }),
	counter("hotcount_checkpoint_errors_total", "Checkpoint rounds that failed.",
		func(b *ClientBackend) float64 { return float64(b.DurabilityStats().CheckpointErrors) }),
	counter("hotcount_restores_total", "Cache nodes found empty and restored from checkpoints.",
		func(b *ClientBackend) float64 { return float64(b.DurabilityStats().Restores) }),
	counter("hotcount_restored_amount_total", "Sum restored into sub-counters from checkpoints.",
		func(b *ClientBackend) float64 { return float64(b.DurabilityStats().RestoredAmount) }),
	gauge("hotcount_auto_n_recent_decisions", "Automatic grow and shrink decisions kept in the recent history (see /v1/hotkeys).",
		func(b *ClientBackend) float64 { return float64(len(b.AutoNDecisions())) }),
}

// Describe implements prometheus.Collector.
func (b *ClientBackend) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range clientMetrics {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector: the Client's gauges, read now.
func (b *ClientBackend) Collect(ch chan<- prometheus.Metric) {
	for _, m := range clientMetrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(b))
	}
}
