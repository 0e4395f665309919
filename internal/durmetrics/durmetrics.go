// Package durmetrics holds the Prometheus series of a Client's durable
// store: the group commits of the event log, rollups, checkpoints and
// restores, the view healer, and the clean-up pass with what it measured
// of the stores. serve's /metrics and the proxy's admin port (when it has
// a durable store) export them under the same names and labels, so the
// alert rules and dashboards of deploy/ watch either.
//
// The series are read from one hotcount.Stats per scrape that the caller
// takes (it exports its own series from the same snapshot): Collect
// takes the snapshot instead of reading it.
package durmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hotcount/hotcount"
)

// metric is one unlabelled gauge or counter read from Stats.
type metric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(s *hotcount.Stats) float64
}

func gauge(name, help string, f func(s *hotcount.Stats) float64) metric {
	return metric{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, f}
}

func counter(name, help string, f func(s *hotcount.Stats) float64) metric {
	return metric{prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, f}
}

// metrics are the durable store's unlabelled series.
var metrics = []metric{
	counter("hotcount_durable_batches_total", "Group commits of the durable event log.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Batches) }),
	counter("hotcount_durable_events_total", "Durable increments committed.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Events) }),
	counter("hotcount_durable_failed_events_total", "Durable increments whose group commit failed.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.FailedEvents) }),
	counter("hotcount_durable_view_misses_total", "Committed durable increments missing from the cache view (the view is behind until it heals).",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.ViewMisses) }),
	counter("hotcount_rollups_total", "Rollup runs of the durable event log.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Rollups) }),
	counter("hotcount_rollup_folded_events_total", "Events the rollup folded into totals.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Folded) }),
	counter("hotcount_rollup_errors_total", "Rollup runs that failed.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.RollupErrors) }),
	counter("hotcount_checkpoints_total", "Fast-mode checkpoint rounds.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Checkpoints) }),
	counter("hotcount_checkpoint_errors_total", "Checkpoint rounds that failed.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.CheckpointErrors) }),
	counter("hotcount_checkpoint_saved_total", "Sub-counter checkpoints written.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Saved) }),
	gauge("hotcount_checkpoint_tracked_counters", "Fast-mode counters watched for checkpoints.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Tracked) }),
	counter("hotcount_checkpoint_untracked_total", "Counter touches not watched because the tracking bound was reached.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Untracked) }),
	counter("hotcount_restores_total", "Cache nodes found empty and restored from checkpoints.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Restores) }),
	counter("hotcount_restored_subcounters_total", "Sub-counters restored from checkpoints.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.RestoredKeys) }),
	gauge("hotcount_restored_amount", "Signed sum restored into sub-counters from checkpoints since start.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.RestoredAmount) }),
	counter("hotcount_heal_sweeps_total", "Sweeps that compared the cache view of durable counters with the log.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.HealSweeps) }),
	counter("hotcount_heal_errors_total", "Sweeps of the view healer that failed.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.HealErrors) }),
	counter("hotcount_view_repairs_total", "Cache views of durable counters the healer corrected to their log value.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Repairs) }),
	gauge("hotcount_view_repaired_amount", "Signed sum of the healer's corrections since start (positive: views were behind).",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.RepairedAmount) }),
	gauge("hotcount_view_behind_counters", "Durable counters whose cache view the healer found off and has not repaired yet.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.Behind) }),
	counter("hotcount_durable_clears_total", "Clears (and expiries at once) recorded in the durable store.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.GC.Clears) }),
	counter("hotcount_durable_clear_errors_total", "Clears the durable store failed to record (the cache was cleared; the call returned the error).",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.GC.ClearErrors) }),
	counter("hotcount_cleanup_passes_total", "Clean-up passes of the durable store.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.GC.Passes) }),
	counter("hotcount_cleanup_errors_total", "Clean-up passes that failed, in whole or in part.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.GC.PassErrors) }),
	counter("hotcount_cleanup_expired_counters_total", "Expired counters the clean-up pass cleared from the durable store.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.GC.Expired) }),
	counter("hotcount_cleanup_moved_deadlines_total", "Deadline records the clean-up pass moved to a later deadline (the counter lives on).",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.GC.Moved) }),
	counter("hotcount_cleanup_unsettled_total", "Counters a clean-up pass could not settle (left for the next pass).",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.GC.Errors) }),
	counter("hotcount_cleanup_noted_deadlines_total", "Deadline estimates (counters of a namespace with a TTL) written to the durable store.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.GC.Noted) }),
	gauge("hotcount_cleanup_pending_deadlines", "Deadline estimates waiting for the next clean-up pass.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.GC.Pending) }),
	counter("hotcount_durable_pruned_ids_total", "Idempotency ids pruned past the dedup window.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.GC.PrunedIDs) }),
	counter("hotcount_durable_pruned_tombstones_total", "Tombstones of cleared counters pruned past their retention.",
		func(s *hotcount.Stats) float64 { return float64(s.Durability.GC.PrunedTombstones) }),
}

// Metrics describes and collects the series of the durable store.
type Metrics struct {
	lastCkpt   *prometheus.Desc
	lastClean  *prometheus.Desc
	storeRows  *prometheus.Desc
	storeBytes *prometheus.Desc
	cacheKeys  *prometheus.Desc
	cacheBytes *prometheus.Desc
}

// New returns the descriptions of the durable store's series.
func New() *Metrics {
	return &Metrics{
		lastCkpt: prometheus.NewDesc("hotcount_checkpoint_last_success_timestamp_seconds",
			"Unix time the last successful checkpoint round ended (absent before the first).", nil, nil),
		lastClean: prometheus.NewDesc("hotcount_cleanup_last_success_timestamp_seconds",
			"Unix time the last successful clean-up pass ended (absent before the first).", nil, nil),
		storeRows: prometheus.NewDesc("hotcount_durable_store_rows",
			"Rows of each table of the durable store, as the last clean-up pass counted them.", []string{"table"}, nil),
		storeBytes: prometheus.NewDesc("hotcount_durable_store_bytes",
			"Bytes the durable store holds (tables, indexes; SQLite: with its log), as the last clean-up pass measured them.", nil, nil),
		cacheKeys: prometheus.NewDesc("hotcount_cache_keys",
			"Keys each cache primary holds (DBSIZE), as the last clean-up pass read them.", []string{"node"}, nil),
		cacheBytes: prometheus.NewDesc("hotcount_cache_memory_bytes",
			"Memory each cache primary uses (used_memory), as the last clean-up pass read it.", []string{"node"}, nil),
	}
}

// Describe sends the descriptions of every series (as
// prometheus.Collector's Describe).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range metrics {
		ch <- d.desc
	}
	ch <- m.lastCkpt
	ch <- m.lastClean
	ch <- m.storeRows
	ch <- m.storeBytes
	ch <- m.cacheKeys
	ch <- m.cacheBytes
}

// Collect sends the series of st; a time not reached yet (the first
// checkpoint, the first clean-up pass) and a measure not taken yet are
// left out.
func (m *Metrics) Collect(ch chan<- prometheus.Metric, st *hotcount.Stats) {
	for _, d := range metrics {
		ch <- prometheus.MustNewConstMetric(d.desc, d.kind, d.value(st))
	}
	if t := st.Durability.LastCheckpoint; !t.IsZero() {
		ch <- prometheus.MustNewConstMetric(m.lastCkpt, prometheus.GaugeValue, float64(t.UnixNano())/1e9)
	}
	gc := &st.Durability.GC
	if !gc.LastPass.IsZero() {
		ch <- prometheus.MustNewConstMetric(m.lastClean, prometheus.GaugeValue, float64(gc.LastPass.UnixNano())/1e9)
	}
	if gc.StoreRows != nil {
		for table, n := range gc.StoreRows {
			ch <- prometheus.MustNewConstMetric(m.storeRows, prometheus.GaugeValue, float64(n), table)
		}
		ch <- prometheus.MustNewConstMetric(m.storeBytes, prometheus.GaugeValue, float64(gc.StoreBytes))
	}
	for _, n := range gc.Cache {
		ch <- prometheus.MustNewConstMetric(m.cacheKeys, prometheus.GaugeValue, float64(n.Keys), n.Node)
		ch <- prometheus.MustNewConstMetric(m.cacheBytes, prometheus.GaugeValue, float64(n.Bytes), n.Node)
	}
}
