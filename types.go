package hotcount

import (
	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/hotkeys"
	"github.com/hotcount/hotcount/internal/autoscale"
	"github.com/hotcount/hotcount/internal/durability"
	"github.com/hotcount/hotcount/internal/engine"
	"github.com/hotcount/hotcount/internal/ns"
	"github.com/hotcount/hotcount/meta"
)

// The result types. Each is defined once, in the package that produces
// it, and named here for users of the Client.
type (
	// Reading is the value of one counter (see engine.Reading).
	Reading = engine.Reading
	// ShardReport says where a counter's sub-counters live and what they
	// hold (see meta.ShardReport).
	ShardReport = meta.ShardReport
	// HotKey is one hot counter with its measured rates.
	HotKey = hotkeys.HotKey
	// Decision is one automatic grow or shrink of a counter's N.
	Decision = hotkeys.Decision
	// NodeWrites is the cache write traffic of one node (see
	// engine.NodeWrites).
	NodeWrites = engine.NodeWrites
	// Restore describes one repair of a cache node that lost its data
	// (see durability.Restore).
	Restore = durability.Restore
	// CheckpointReport is the outcome of one checkpoint round (see
	// durability.CheckpointReport).
	CheckpointReport = durability.CheckpointReport
	// RebuildReport is the outcome of Rebuild.
	RebuildReport = durability.RebuildReport
	// RebuildOptions limits Rebuild to some counters and asks for a dry
	// run (see durability.RebuildOptions).
	RebuildOptions = durability.RebuildOptions
	// BufferStats are the gauges and counters of the buffered deltas (see
	// buffer.Stats), Stats.Buffer.
	BufferStats = buffer.Stats
	// CleanupReport is the outcome of Client.Cleanup.
	CleanupReport = durability.CleanupReport
	// Series is one series of the durable store's statistics in the
	// Prometheus data model, Stats.Durability.Series() lists them (see
	// durability.Series); serve and the proxy export them.
	Series = durability.Series
	// SeriesPoint is one value of a Series, with its label values.
	SeriesPoint = durability.Point
	// Namespace holds the settings of the counters whose keys start with
	// a prefix (see ns.Namespace).
	Namespace = ns.Namespace
	// Mode is a durability mode, chosen per namespace.
	Mode = ns.Mode
)

// The durability modes (see ns.ModeFast and ns.ModeDurable).
const (
	ModeFast    = ns.ModeFast
	ModeDurable = ns.ModeDurable
)

// Stats are the Client's running totals and gauges.
type Stats struct {
	// Buffer sums the gauges and counters of the buffered deltas: the
	// unflushed delta and the oldest unflushed age (the loss window),
	// flushes, errors, retries.
	Buffer BufferStats
	// Durability counts group commits, rollups, checkpoints and restores
	// (zero without a durable store).
	Durability durability.Stats
	// Rebalance counts the checks, moves and failures of automatic
	// re-placement.
	Rebalance autoscale.RebalanceStats
	// Decisions counts the controller's grows, shrinks and failed
	// resizes (cold counters turning hot and back; automatic N).
	Decisions autoscale.DecisionStats
	// Counters counts the counters this process used lately by state,
	// and the ones it removed past their deadline.
	Counters engine.Counts
	// Regions are the figures of the links to the peer regions (nil
	// without Config.Region).
	Regions []RegionLink
}
