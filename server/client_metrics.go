package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hotcount/hotcount"
)

// pingTimeout bounds the reachability check a scrape makes
// (hotcount_cache_up).
const pingTimeout = time.Second

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

// clientMetrics are the Client's own gauges and counters: buffered deltas
// (the loss window), automatic re-placement and N, lifecycle; the durable
// layer's are durableSeries' (the proxy's admin port exports them too).
var clientMetrics = []clientMetric{
	gauge("hotcount_buffer_unflushed_delta", "Signed sum of this process's buffered deltas not yet acknowledged by the cache.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.Unflushed) }),
	gauge("hotcount_buffer_unflushed_abs_delta", "Sum of the magnitudes of the buffered deltas not yet acknowledged (what a crash would lose).",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.UnflushedAbs) }),
	gauge("hotcount_buffer_unflushed_keys", "Keys holding a buffered delta.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.PendingKeys) }),
	gauge("hotcount_buffer_in_flight_ops", "Flushed increments sent and not yet acknowledged.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.InFlight) }),
	gauge("hotcount_buffer_held_keys", "Entries counted against the back-pressure bound (keys plus increments in flight).",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.HeldKeys) }),
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
	counter("hotcount_buffer_permanent_errors_total", "Flush attempts a sub-counter rejected (overflow, not an integer).",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.PermanentErrors) }),
	counter("hotcount_buffer_dropped_total", "Flushed increments dropped because the cache refused them for the sub-counter bound.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.Dropped) }),
	gauge("hotcount_buffer_dropped_delta", "Signed sum of the dropped increments' deltas since start.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.DroppedDelta) }),
	counter("hotcount_buffer_backpressure_total", "Increments refused because the buffer bound was reached.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.Backpressure) }),
	counter("hotcount_cold_writes_total", "Cold keys' flushes sent as one plain INCRBY (no script, no extra key).",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.ColdWrites) }),
	counter("hotcount_cold_dropped_total", "Cold keys' flushes that got no reply (timeout, lost connection) and were not sent again: each may or may not have been applied.",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.ColdDropped) }),
	gauge("hotcount_cold_dropped_delta", "Signed sum of the deltas of the cold flushes dropped without a reply since start (at most this much is missing).",
		func(s *hotcount.Stats) float64 { return float64(s.Buffer.ColdDroppedDelta) }),
	counter("hotcount_rebalance_checks_total", "Looks at the slot map by automatic re-placement.",
		func(s *hotcount.Stats) float64 { return float64(s.Rebalance.Checks) }),
	counter("hotcount_rebalance_moved_total", "Counters whose colliding sub-counters automatic re-placement moved back onto distinct primaries.",
		func(s *hotcount.Stats) float64 { return float64(s.Rebalance.Moved) }),
	counter("hotcount_rebalance_failed_total", "Automatic re-placements that failed (retried at the next check).",
		func(s *hotcount.Stats) float64 { return float64(s.Rebalance.Failed) }),
	gauge("hotcount_placement_collisions", "Sub-counters beyond an even spread found by the last pass of automatic re-placement (0 when it is off).",
		func(s *hotcount.Stats) float64 { return float64(s.Rebalance.Collisions) }),
	counter("hotcount_resize_grows_total", "Counters the controller grew (cold counters turning hot; automatic N).",
		func(s *hotcount.Stats) float64 { return float64(s.Decisions.Grows) }),
	counter("hotcount_resize_shrinks_total", "Counters the controller folded back (hot counters cooling; automatic N).",
		func(s *hotcount.Stats) float64 { return float64(s.Decisions.Shrinks) }),
	counter("hotcount_resize_failures_total", "Resizes the controller started that failed.",
		func(s *hotcount.Stats) float64 { return float64(s.Decisions.Failed) }),
	gauge("hotcount_counters_sharded", "Sharded counters (with metadata) this process used lately.",
		func(s *hotcount.Stats) float64 { return float64(s.Counters.Sharded) }),
	gauge("hotcount_counters_cold", "Cold counters (one sub-counter) this process used lately.",
		func(s *hotcount.Stats) float64 { return float64(s.Counters.Cold) }),
	counter("hotcount_counters_expired_total", "Counters this process removed at or past their deadline.",
		func(s *hotcount.Stats) float64 { return float64(s.Counters.Expired) }),
}

// clientCollector exports the Client's stats and measurements at scrape
// time.
type clientCollector struct {
	c          Backend
	budget     float64
	dur        durableSeries
	nodeTotal  *prometheus.Desc
	cacheUp    *prometheus.Desc
	nodeBudget *prometheus.Desc
	// Per peer region.
	regionLag, regionShipped, regionBytes, regionErrors, regionLast, regionHolder *prometheus.Desc
}

func newClientCollector(c Backend, budget float64) *clientCollector {
	return &clientCollector{
		c:      c,
		budget: budget,
		dur:    newDurableSeries(),
		nodeTotal: prometheus.NewDesc("hotcount_cache_writes_total",
			"Cache writes this process sent to each node.", []string{"node"}, nil),
		cacheUp: prometheus.NewDesc("hotcount_cache_up",
			"1 if the cache answered a read at scrape time (bounded by 1 s), else 0.", nil, nil),
		nodeBudget: prometheus.NewDesc("hotcount_node_budget_writes_per_second",
			"Cache writes per second one node may take (the budget drawn on the dashboard).", nil, nil),
		regionLag: prometheus.NewDesc("hotcount_region_lag_seconds",
			"Time since the last successful ship round to the peer region (this region's shipping process only; about the ship interval when healthy).", []string{"peer"}, nil),
		regionShipped: prometheus.NewDesc("hotcount_region_shipped_records_total",
			"Contribution and fence records this process shipped to the peer region.", []string{"peer"}, nil),
		regionBytes: prometheus.NewDesc("hotcount_region_shipped_bytes_total",
			"Bytes of the records this process shipped to the peer region.", []string{"peer"}, nil),
		regionErrors: prometheus.NewDesc("hotcount_region_link_errors_total",
			"Ship rounds to the peer region that failed.", []string{"peer"}, nil),
		regionLast: prometheus.NewDesc("hotcount_region_last_success_timestamp_seconds",
			"Unix time of the last successful ship round to the peer region (absent before the first).", []string{"peer"}, nil),
		regionHolder: prometheus.NewDesc("hotcount_region_shipping",
			"1 if this process holds its region's shipping lease, else 0.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (cc *clientCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range clientMetrics {
		ch <- m.desc
	}
	cc.dur.Describe(ch)
	ch <- cc.nodeTotal
	ch <- cc.cacheUp
	ch <- cc.nodeBudget
	ch <- cc.regionLag
	ch <- cc.regionShipped
	ch <- cc.regionBytes
	ch <- cc.regionErrors
	ch <- cc.regionLast
	ch <- cc.regionHolder
}

// Collect implements prometheus.Collector: the Client's stats, read now.
func (cc *clientCollector) Collect(ch chan<- prometheus.Metric) {
	st := cc.c.Stats()
	for _, m := range clientMetrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(&st))
	}
	cc.dur.Collect(ch, &st)
	for i, l := range st.Regions {
		ch <- prometheus.MustNewConstMetric(cc.regionShipped, prometheus.CounterValue, float64(l.Shipped), l.Peer)
		ch <- prometheus.MustNewConstMetric(cc.regionBytes, prometheus.CounterValue, float64(l.Bytes), l.Peer)
		ch <- prometheus.MustNewConstMetric(cc.regionErrors, prometheus.CounterValue, float64(l.Errors), l.Peer)
		if !l.LastSuccess.IsZero() {
			ch <- prometheus.MustNewConstMetric(cc.regionLast, prometheus.GaugeValue, float64(l.LastSuccess.UnixNano())/1e9, l.Peer)
		}
		if l.Holder {
			ch <- prometheus.MustNewConstMetric(cc.regionLag, prometheus.GaugeValue, l.Lag.Seconds(), l.Peer)
		}
		if i == 0 {
			holder := 0.0
			if l.Holder {
				holder = 1
			}
			ch <- prometheus.MustNewConstMetric(cc.regionHolder, prometheus.GaugeValue, holder)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	up := 0.0
	if cc.c.Ping(ctx) == nil {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(cc.cacheUp, prometheus.GaugeValue, up)
	nctx, ncancel := context.WithTimeout(context.Background(), pingTimeout)
	defer ncancel()
	for _, n := range cc.c.Nodes(nctx) {
		ch <- prometheus.MustNewConstMetric(cc.nodeTotal, prometheus.CounterValue, float64(n.Total), n.Node)
	}
	ch <- prometheus.MustNewConstMetric(cc.nodeBudget, prometheus.GaugeValue, cc.budget)
}
