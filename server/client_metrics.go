package server

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hotcount/hotcount"
)

// clientMetric is one gauge or counter read from the Client's Stats at
// scrape time.
type clientMetric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(s *hotcount.Stats) float64
}

func gauge(name, help string, f func(s *hotcount.Stats) float64) clientMetric {
	return clientMetric{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, f}
}

func counter(name, help string, f func(s *hotcount.Stats) float64) clientMetric {
	return clientMetric{prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, f}
}

// clientMetrics are the Client's own gauges and counters: buffered deltas,
// durability.
var clientMetrics = []clientMetric{
	gauge("hotcount_buffer_unflushed_delta", "Sum of this process's buffered deltas not yet acknowledged by the cache.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.Unflushed) }),
	gauge("hotcount_buffer_unflushed_keys", "Keys holding a buffered delta.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.PendingKeys) }),
	gauge("hotcount_buffer_oldest_unflushed_seconds", "Age of the oldest buffered delta not yet acknowledged (the loss window of a crash).",
		func(s *hotcount.Stats) float64 { return s.Buffer.OldestUnflushed.Seconds() }),
	counter("hotcount_buffer_flushes_total", "Flush rounds.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.Flushes) }),
	counter("hotcount_buffer_flush_errors_total", "Flush rounds that failed in part or whole.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.FlushErrors) }),
	counter("hotcount_buffer_retries_total", "Flushed increments sent again with their token.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.Retries) }),
	counter("hotcount_buffer_writes_total", "Flushed increments the cache applied.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.OpsApplied) }),
	counter("hotcount_buffer_duplicates_skipped_total", "Retried increments the cache had applied already (counted once).",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.OpsSkipped) }),
	counter("hotcount_buffer_backpressure_total", "Increments refused because the buffer bound was reached.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.Backpressure) }),
	counter("hotcount_durable_batches_total", "Group commits of the durable event log.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Batches) }),
	counter("hotcount_durable_events_total", "Durable increments committed.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Events) }),
	counter("hotcount_checkpoints_total", "Fast-mode checkpoint rounds.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Checkpoints) }),
	counter("hotcount_checkpoint_errors_total", "Checkpoint rounds that failed.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.CheckpointErrors) }),
	counter("hotcount_restores_total", "Cache nodes found empty and restored from checkpoints.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Restores) }),
	counter("hotcount_restored_amount_total", "Sum restored into sub-counters from checkpoints.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.RestoredAmount) }),
}

// clientCollector exports the Client's stats and measured rates at scrape
// time.
type clientCollector struct {
	c         Backend
	nodeRate  *prometheus.Desc
	nodeTotal *prometheus.Desc
	decisions *prometheus.Desc
}

func newClientCollector(c Backend) *clientCollector {
	return &clientCollector{
		c: c,
		nodeRate: prometheus.NewDesc("hotcount_node_write_rate",
			"Cache writes per second this process sends to each node.", []string{"node"}, nil),
		nodeTotal: prometheus.NewDesc("hotcount_cache_writes_total",
			"Cache writes this process sent to each node.", []string{"node"}, nil),
		decisions: prometheus.NewDesc("hotcount_auto_n_recent_decisions",
			"Automatic grow and shrink decisions kept in the recent history (see /v1/hotkeys).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (cc *clientCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range clientMetrics {
		ch <- m.desc
	}
	ch <- cc.nodeRate
	ch <- cc.nodeTotal
	ch <- cc.decisions
}

// Collect implements prometheus.Collector: the Client's stats, read now.
func (cc *clientCollector) Collect(ch chan<- prometheus.Metric) {
	st := cc.c.Stats()
	for _, m := range clientMetrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(&st))
	}
	for _, n := range cc.c.Nodes(context.Background()) {
		ch <- prometheus.MustNewConstMetric(cc.nodeRate, prometheus.GaugeValue, n.Rate, n.Node)
		ch <- prometheus.MustNewConstMetric(cc.nodeTotal, prometheus.CounterValue, float64(n.Total), n.Node)
	}
	ch <- prometheus.MustNewConstMetric(cc.decisions, prometheus.GaugeValue, float64(len(cc.c.Decisions())))
}
