package durability

import (
	"maps"
	"slices"
	"time"
)

// Series is one series of the durable store's statistics in the
// Prometheus data model, with no tie to a metrics library: serve's
// /metrics and the proxy's admin port (with a durable store) export them
// under these names, so that the alert rules and dashboards of deploy/
// watch either.
type Series struct {
	// Name and Help are the series' name and help text.
	Name, Help string
	// Counter is set for a counter; else the series is a gauge.
	Counter bool
	// Labels names the labels of the points (nil: none).
	Labels []string
	// Points are the series' values, one per set of label values. A
	// series with no point yet (the time of a first checkpoint not
	// reached, a measure not taken yet) has none.
	Points []Point
}

// Point is one value of a Series, with the values of its labels.
type Point struct {
	LabelValues []string
	Value       float64
}

// Series returns every series of s, in a fixed order; a series that has
// no value yet comes with no points, so that the series of the zero Stats
// describe them all.
func (s *Stats) Series() []Series {
	counter := func(name, help string, v uint64) Series {
		return Series{Name: name, Help: help, Counter: true, Points: []Point{{Value: float64(v)}}}
	}
	gauge := func(name, help string, v float64) Series {
		return Series{Name: name, Help: help, Points: []Point{{Value: v}}}
	}
	out := []Series{
		counter("hotcount_durable_batches_total", "Group commits of the durable event log.", s.Batches),
		counter("hotcount_durable_events_total", "Durable increments committed.", s.Events),
		counter("hotcount_durable_failed_events_total", "Durable increments whose group commit failed.", s.FailedEvents),
		counter("hotcount_durable_view_misses_total", "Committed durable increments missing from the cache view (the view is behind until it heals).", s.ViewMisses),
		counter("hotcount_rollups_total", "Rollup runs of the durable event log.", s.Rollups),
		counter("hotcount_rollup_folded_events_total", "Events the rollup folded into totals.", s.Folded),
		counter("hotcount_rollup_errors_total", "Rollup runs that failed.", s.RollupErrors),
		counter("hotcount_checkpoints_total", "Fast-mode checkpoint rounds.", s.Checkpoints),
		counter("hotcount_checkpoint_errors_total", "Checkpoint rounds that failed.", s.CheckpointErrors),
		counter("hotcount_checkpoint_saved_total", "Sub-counter checkpoints written.", s.Saved),
		gauge("hotcount_checkpoint_tracked_counters", "Fast-mode counters watched for checkpoints.", float64(s.Tracked)),
		counter("hotcount_checkpoint_untracked_total", "Counter touches not watched because the tracking bound was reached.", s.Untracked),
		counter("hotcount_restores_total", "Cache nodes found empty and restored from checkpoints.", s.Restores),
		counter("hotcount_restored_subcounters_total", "Sub-counters restored from checkpoints.", s.RestoredKeys),
		gauge("hotcount_restored_amount", "Signed sum restored into sub-counters from checkpoints since start.", float64(s.RestoredAmount)),
		counter("hotcount_heal_sweeps_total", "Sweeps that compared the cache view of durable counters with the log.", s.HealSweeps),
		counter("hotcount_heal_errors_total", "Sweeps of the view healer that failed.", s.HealErrors),
		counter("hotcount_view_repairs_total", "Cache views of durable counters the healer corrected to their log value.", s.Repairs),
		gauge("hotcount_view_repaired_amount", "Signed sum of the healer's corrections since start (positive: views were behind).", float64(s.RepairedAmount)),
		gauge("hotcount_view_behind_counters", "Durable counters whose cache view the healer found off and has not repaired yet.", float64(s.Behind)),
		counter("hotcount_durable_clears_total", "Clears (and expiries at once) recorded in the durable store.", s.GC.Clears),
		counter("hotcount_durable_clear_errors_total", "Clears the durable store failed to record (the cache was cleared; the call returned the error).", s.GC.ClearErrors),
		counter("hotcount_cleanup_passes_total", "Clean-up passes of the durable store.", s.GC.Passes),
		counter("hotcount_cleanup_errors_total", "Clean-up passes that failed, in whole or in part.", s.GC.PassErrors),
		counter("hotcount_cleanup_expired_counters_total", "Expired counters the clean-up pass cleared from the durable store.", s.GC.Expired),
		counter("hotcount_cleanup_moved_deadlines_total", "Deadline records the clean-up pass moved to a later deadline (the counter lives on).", s.GC.Moved),
		counter("hotcount_cleanup_unsettled_total", "Counters a clean-up pass could not settle (left for the next pass).", s.GC.Errors),
		counter("hotcount_cleanup_noted_deadlines_total", "Deadline estimates (counters of a namespace with a TTL) written to the durable store.", s.GC.Noted),
		gauge("hotcount_cleanup_pending_deadlines", "Deadline estimates waiting for the next clean-up pass.", float64(s.GC.Pending)),
		counter("hotcount_durable_pruned_ids_total", "Idempotency ids pruned past the dedup window.", s.GC.PrunedIDs),
		counter("hotcount_durable_pruned_tombstones_total", "Tombstones of cleared counters pruned past their retention.", s.GC.PrunedTombstones),
	}
	at := func(name, help string, t time.Time) Series {
		g := Series{Name: name, Help: help}
		if !t.IsZero() {
			g.Points = []Point{{Value: float64(t.UnixNano()) / 1e9}}
		}
		return g
	}
	gc := &s.GC
	rows := Series{Name: "hotcount_durable_store_rows", Help: "Rows of each table of the durable store, as the last clean-up pass counted them.", Labels: []string{"table"}}
	bytes := Series{Name: "hotcount_durable_store_bytes", Help: "Bytes the durable store holds (tables, indexes; SQLite: with its log), as the last clean-up pass measured them."}
	if gc.StoreRows != nil {
		for _, table := range slices.Sorted(maps.Keys(gc.StoreRows)) {
			rows.Points = append(rows.Points, Point{LabelValues: []string{table}, Value: float64(gc.StoreRows[table])})
		}
		bytes.Points = []Point{{Value: float64(gc.StoreBytes)}}
	}
	keys := Series{Name: "hotcount_cache_keys", Help: "Keys each cache primary holds (DBSIZE), as the last clean-up pass read them.", Labels: []string{"node"}}
	mem := Series{Name: "hotcount_cache_memory_bytes", Help: "Memory each cache primary uses (used_memory), as the last clean-up pass read it.", Labels: []string{"node"}}
	for _, n := range gc.Cache {
		keys.Points = append(keys.Points, Point{LabelValues: []string{n.Node}, Value: float64(n.Keys)})
		mem.Points = append(mem.Points, Point{LabelValues: []string{n.Node}, Value: float64(n.Bytes)})
	}
	return append(out,
		at("hotcount_checkpoint_last_success_timestamp_seconds", "Unix time the last successful checkpoint round ended (absent before the first).", s.LastCheckpoint),
		at("hotcount_cleanup_last_success_timestamp_seconds", "Unix time the last successful clean-up pass ended (absent before the first).", gc.LastPass),
		rows, bytes, keys, mem)
}
