package hotcount

import (
	"context"
	"fmt"

	"github.com/hotcount/hotcount/keyspace"
)

// Resize changes the number of sub-counters of key to n (1..keyspace.MaxN)
// and pins it there: automatic N and the cooling of a counter that turned
// hot leave a pinned counter alone until Unpin. Growing is safe at once
// (readers see the new labels before writers use them); shrinking folds
// each removed sub-counter into a remaining one, waiting out the metadata
// TTL first. Every step is idempotent and journaled: a Resize interrupted
// anywhere is finished by Resume (or the next Resize) without loss or
// duplication.
func (c *Client) Resize(ctx context.Context, key string, n int) error {
	if err := c.check(key); err != nil {
		return err
	}
	if n < 1 || n > keyspace.MaxN {
		return fmt.Errorf("%w: n must be 1..%d, got %d", ErrInvalidN, keyspace.MaxN, n)
	}
	return c.eng.Resize(ctx, key, n)
}

// Unpin undoes the pin of Resize: automatic N and cooling size key again
// (`hotcount resize --auto`). A counter that is not pinned is left as it is.
func (c *Client) Unpin(ctx context.Context, key string) error {
	if err := c.check(key); err != nil {
		return err
	}
	return c.eng.Unpin(ctx, key)
}

// Create gives a counter that does not exist yet (no metadata, nothing
// counted) n sub-counters, pinned as Resize pins them, and reports true.
// For a counter that exists with n sub-counters already it changes
// nothing and reports false; with another number it fails with ErrExists.
func (c *Client) Create(ctx context.Context, key string, n int) (created bool, err error) {
	if err := c.check(key); err != nil {
		return false, err
	}
	if n < 1 || n > keyspace.MaxN {
		return false, fmt.Errorf("%w: n must be 1..%d, got %d", ErrInvalidN, keyspace.MaxN, n)
	}
	return c.eng.Create(ctx, key, n)
}

// Resume finishes any fold of key that was interrupted.
func (c *Client) Resume(ctx context.Context, key string) error {
	if err := c.check(key); err != nil {
		return err
	}
	return c.eng.Resume(ctx, key)
}

// Shards reports where key's sub-counters live: per label the sub-key,
// slot, primary and value, and how many collide on a primary. It creates
// no state.
func (c *Client) Shards(ctx context.Context, key string) (ShardReport, error) {
	return c.ShardsN(ctx, key, 0)
}

// ShardsN is Shards, except that for a counter that does not exist yet
// (Exists false) it shows the placement n sub-counters would get (n 0: the
// counter's default).
func (c *Client) ShardsN(ctx context.Context, key string, n int) (ShardReport, error) {
	if err := c.check(key); err != nil {
		return ShardReport{}, err
	}
	if n < 0 || n > keyspace.MaxN {
		return ShardReport{}, fmt.Errorf("%w: n must be 1..%d, got %d", ErrInvalidN, keyspace.MaxN, n)
	}
	return c.eng.Shards(ctx, key, n)
}

// Rebalance moves key's sub-counters back onto distinct primaries after a
// slot migration made two of them share one (grow new labels, fold the
// colliding ones). changed reports whether anything moved.
func (c *Client) Rebalance(ctx context.Context, key string) (changed bool, err error) {
	if err := c.check(key); err != nil {
		return false, err
	}
	return c.eng.Rebalance(ctx, key)
}

// Checkpoint runs a checkpoint round now (the Client also runs one every
// checkpoint interval): it checks every cache node for data loss, restores
// lost nodes' fast-mode counters from their checkpoints, and saves the
// watched fast-mode counters.
func (c *Client) Checkpoint(ctx context.Context) (CheckpointReport, error) {
	if err := c.checkDurable("checkpoint"); err != nil {
		return CheckpointReport{}, err
	}
	return c.dur.Checkpoint(ctx)
}

// Restores returns the last node repairs this Client made (at most 16),
// oldest first.
func (c *Client) Restores() []Restore { return c.dur.Restores() }

// Rebuild recreates the cache view from the durable store: it repairs
// cache nodes that lost their data (fast mode, with the counters'
// label-set records) and corrects the view of every durable-mode counter
// the log has whose key starts with prefix ("" for all). A prefix limits
// the restore of lost nodes too (see RebuildWith). It refuses a store that
// does not belong to the cache cluster (ErrForeignStore). See
// durability.Service.Rebuild for when to run it.
func (c *Client) Rebuild(ctx context.Context, prefix string) (RebuildReport, error) {
	return c.RebuildWith(ctx, RebuildOptions{Prefix: prefix})
}

// RebuildKeys is Rebuild limited to the named counters, in every step;
// with no key it does nothing.
func (c *Client) RebuildKeys(ctx context.Context, keys ...string) (RebuildReport, error) {
	if len(keys) == 0 {
		return RebuildReport{}, c.checkDurable("rebuild")
	}
	return c.RebuildWith(ctx, RebuildOptions{Keys: keys})
}

// RebuildWith is Rebuild with options: a limit to some counters that
// applies to every step (a limited run never records a lost node as
// restored), and a dry run that reports what would change and writes
// nothing.
func (c *Client) RebuildWith(ctx context.Context, o RebuildOptions) (RebuildReport, error) {
	if err := c.checkDurable("rebuild"); err != nil {
		return RebuildReport{}, err
	}
	return c.dur.RebuildWith(ctx, o)
}

// Cleanup runs a clean-up pass now (the Client also runs one every
// Durability.CleanupInterval): it removes from the durable store what is
// left of counters whose deadline passed, prunes IDs and tombstones past
// their retention, and measures the store.
func (c *Client) Cleanup(ctx context.Context) (CleanupReport, error) {
	if err := c.checkDurable("cleanup"); err != nil {
		return CleanupReport{}, err
	}
	return c.dur.Cleanup(ctx)
}

// Rollup folds the durable-mode events older than the rollup age into
// their keys' totals now (the Client also does it in the background) and
// returns how many events it folded.
func (c *Client) Rollup(ctx context.Context) (int, error) {
	if err := c.checkDurable("rollup"); err != nil {
		return 0, err
	}
	return c.dur.Rollup(ctx)
}

func (c *Client) checkDurable(op string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if c.dur == nil {
		return fmt.Errorf("%s: %w: no durable store (Durability.Store)", op, ErrConfig)
	}
	return nil
}

// HotKeys returns up to n of the counters with the most increments
// arriving in this process (every mode), with their arrival and cache
// write rates and N; with automatic N, the controller's view too.
func (c *Client) HotKeys(ctx context.Context, n int) []HotKey { return c.scale.HotKeys(ctx, n) }

// Decisions returns the automatic-N controller's recent grow and shrink
// decisions, oldest first (none without automatic N).
func (c *Client) Decisions() []Decision { return c.scale.Decisions() }

// Nodes returns the cache write traffic this process sent to each node.
func (c *Client) Nodes(ctx context.Context) []NodeWrites { return c.eng.NodeWrites(ctx) }

// Stats returns the running totals and gauges: buffered deltas (the loss
// window), the durable layer, automatic re-placement.
func (c *Client) Stats() Stats {
	s := Stats{Buffer: c.eng.BufferStats()}
	if c.dur != nil {
		s.Durability = c.dur.Stats()
	}
	s.Rebalance = c.scale.Rebalances()
	s.Decisions = c.scale.DecisionCounts()
	s.Counters = c.eng.Counts()
	s.Regions = c.RegionLinks()
	return s
}
