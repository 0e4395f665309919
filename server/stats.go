package server

import (
	"net/http"
	"time"

	"github.com/hotcount/hotcount"
)

// statsResponse is the answer of GET /v1/stats: the Client's loss-window
// gauges and running totals, for the dashboard and for scripts (the same
// figures as /metrics).
type statsResponse struct {
	Buffer     bufferStats     `json:"buffer"`
	Durability durabilityStats `json:"durability"`
	Rebalance  rebalanceStats  `json:"rebalance"`
	// Regions is this server's region and its links to the peer regions
	// (the figures of the hotcount_region_* metrics).
	Regions regionsStats `json:"regions"`
	// NodeBudget is the cache writes per second one node may take.
	NodeBudget float64 `json:"node_budget"`
	// Errors counts this server's error answers by class since start
	// (hotcount_http_errors_total); classes with none are left out.
	Errors map[string]uint64 `json:"errors"`
}

type bufferStats struct {
	UnflushedDelta    int64  `json:"unflushed_delta"`
	UnflushedAbsDelta uint64 `json:"unflushed_abs_delta"`
	UnflushedKeys     int    `json:"unflushed_keys"`
	InFlight          int    `json:"in_flight"`
	OldestUnflushedMS int64  `json:"oldest_unflushed_ms"`
	Flushes           uint64 `json:"flushes"`
	FlushErrors       uint64 `json:"flush_errors"`
	Retries           uint64 `json:"retries"`
	Dropped           uint64 `json:"dropped"`
	Backpressure      uint64 `json:"backpressure"`
}

type durabilityStats struct {
	Checkpoints      uint64 `json:"checkpoints"`
	CheckpointErrors uint64 `json:"checkpoint_errors"`
	// LastCheckpoint is when the last successful checkpoint ended (null
	// before the first); CheckpointAgeMS is its age then.
	LastCheckpoint  *time.Time `json:"last_checkpoint"`
	CheckpointAgeMS *int64     `json:"checkpoint_age_ms"`
	Batches         uint64     `json:"batches"`
	Events          uint64     `json:"events"`
	FailedEvents    uint64     `json:"failed_events"`
	ViewMisses      uint64     `json:"view_misses"`
	Rollups         uint64     `json:"rollups"`
	RollupErrors    uint64     `json:"rollup_errors"`
	Restores        uint64     `json:"restores"`
	ViewRepairs     uint64     `json:"view_repairs"`
	ViewBehind      uint64     `json:"view_behind"`
}

type rebalanceStats struct {
	Checks int64 `json:"checks"`
	Moved  int64 `json:"moved"`
	Failed int64 `json:"failed"`
}

// regionsStats is the regions part of /v1/stats. A server started
// without a region answers enabled false, an empty region and no peers.
type regionsStats struct {
	Enabled bool   `json:"enabled"`
	Region  string `json:"region"`
	// Shipping reports whether this process holds its region's shipping
	// lease (only the holder ships and measures the links).
	Shipping bool        `json:"shipping"`
	Peers    []peerStats `json:"peers"`
}

// peerStats is one link to a peer region.
type peerStats struct {
	Peer           string `json:"peer"`
	ShippedRecords uint64 `json:"shipped_records"`
	ShippedBytes   uint64 `json:"shipped_bytes"`
	LinkErrors     uint64 `json:"link_errors"`
	// LastError is the last failed round's error, "" after a success.
	LastError string `json:"last_error"`
	// LagMS is the time since the last successful ship round (null when
	// another process holds the lease).
	LagMS *int64 `json:"lag_ms"`
	// LastSuccess is when a ship round last succeeded (null: never, or
	// not the lease holder); LastSuccessAgeMS is its age then.
	LastSuccess      *time.Time `json:"last_success"`
	LastSuccessAgeMS *int64     `json:"last_success_age_ms"`
}

// regions translates the Client's region links.
func regions(region string, links []hotcount.RegionLink) regionsStats {
	out := regionsStats{Enabled: region != "", Region: region, Peers: make([]peerStats, 0, len(links))}
	for _, l := range links {
		p := peerStats{Peer: l.Peer, ShippedRecords: l.Shipped, ShippedBytes: l.Bytes, LinkErrors: l.Errors, LastError: l.LastError}
		out.Shipping = out.Shipping || l.Holder
		if l.Holder {
			lag := l.Lag.Milliseconds()
			p.LagMS = &lag
		}
		if !l.LastSuccess.IsZero() {
			t := l.LastSuccess.UTC()
			age := max(0, time.Since(t).Milliseconds())
			p.LastSuccess, p.LastSuccessAgeMS = &t, &age
		}
		out.Peers = append(out.Peers, p)
	}
	return out
}

// handleStats reports the Client's stats.
func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) error {
	st := s.c.Stats()
	b, d := st.Buffer, st.Durability
	out := statsResponse{
		Buffer: bufferStats{
			UnflushedDelta: b.Unflushed, UnflushedAbsDelta: b.UnflushedAbs, UnflushedKeys: b.PendingKeys, InFlight: b.InFlight,
			OldestUnflushedMS: b.OldestUnflushed.Milliseconds(), Flushes: b.Flushes, FlushErrors: b.FlushErrors,
			Retries: b.Retries, Dropped: b.Dropped, Backpressure: b.Backpressure,
		},
		Durability: durabilityStats{
			Checkpoints: d.Checkpoints, CheckpointErrors: d.CheckpointErrors, Batches: d.Batches, Events: d.Events,
			FailedEvents: d.FailedEvents, ViewMisses: d.ViewMisses, Rollups: d.Rollups, RollupErrors: d.RollupErrors,
			Restores: d.Restores, ViewRepairs: d.Repairs, ViewBehind: d.Behind,
		},
		Rebalance:  rebalanceStats{Checks: st.Rebalance.Checks, Moved: st.Rebalance.Moved, Failed: st.Rebalance.Failed},
		Regions:    regions(s.c.Region(), st.Regions),
		NodeBudget: s.cfg.NodeBudget,
		Errors:     s.metrics.errorCounts(),
	}
	if !d.LastCheckpoint.IsZero() {
		t := d.LastCheckpoint.UTC()
		age := max(0, time.Since(t).Milliseconds())
		out.Durability.LastCheckpoint, out.Durability.CheckpointAgeMS = &t, &age
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
