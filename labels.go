package hotcount

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/meta"
)

// ErrNoMetadata: the store keeps no counter metadata, so N cannot change.
var ErrNoMetadata = errors.New("hotcount: the store keeps no counter metadata")

// Resize changes the number of sub-counters of key to n. Growing is safe at
// once (readers see the new labels before writers use them); shrinking
// folds each removed sub-counter into a remaining one, waiting out the
// metadata TTL first. Every step is idempotent and journaled: a Resize
// interrupted anywhere is finished by Resume (or the next Resize) without
// loss or duplication.
func (c *Client) Resize(ctx context.Context, key string, n int) error {
	if err := c.checkMeta(key); err != nil {
		return err
	}
	if n < 1 || n > MaxN {
		return fmt.Errorf("%w: n must be 1..%d, got %d", ErrConfig, MaxN, n)
	}
	if err := c.meta.Resize(ctx, key, n); err != nil {
		return fmt.Errorf("resize %q: %w", key, err)
	}
	c.cache.drop(key)
	return nil
}

// Resume finishes any fold of key that was interrupted.
func (c *Client) Resume(ctx context.Context, key string) error {
	if err := c.checkMeta(key); err != nil {
		return err
	}
	return c.meta.Resume(ctx, key)
}

// Shards reports where key's sub-counters live: per label the sub-key,
// slot, primary and value, and how many collide on a primary.
func (c *Client) Shards(ctx context.Context, key string) (meta.ShardReport, error) {
	if err := c.checkMeta(key); err != nil {
		return meta.ShardReport{}, err
	}
	return c.meta.Shards(ctx, key)
}

// Rebalance moves key's sub-counters back onto distinct primaries after a
// slot migration made two of them share one (grow new labels, fold the
// colliding ones). changed reports whether anything moved.
func (c *Client) Rebalance(ctx context.Context, key string) (changed bool, err error) {
	if err := c.checkMeta(key); err != nil {
		return false, err
	}
	return c.meta.Rebalance(ctx, key)
}

func (c *Client) checkMeta(key string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := keyspace.Validate(key); err != nil {
		return err
	}
	if c.meta == nil {
		return ErrNoMetadata
	}
	return nil
}

// metaMargin is how long, beyond the metadata TTL, a fold waits for the
// increments already on their way to a label it stops writing: half the
// TTL, and at least 500 ms, so that a writer paused between choosing a
// label and sending its increment (GC, scheduling) is not a straggler.
func metaMargin(ttl time.Duration) time.Duration {
	if ttl == 0 {
		ttl = meta.DefaultTTL
	}
	return max(ttl/2, 500*time.Millisecond)
}

// durableMeta adapts a durable.Backend to meta.Durable ("no record" is nil
// data, not an error).
type durableMeta struct{ b durable.Backend }

// SaveMeta implements meta.Durable.
func (d durableMeta) SaveMeta(ctx context.Context, key string, data []byte) error {
	return d.b.SaveMeta(ctx, key, data)
}

// LoadMeta implements meta.Durable: no record is nil data, not an error.
func (d durableMeta) LoadMeta(ctx context.Context, key string) ([]byte, error) {
	data, err := d.b.LoadMeta(ctx, key)
	if errors.Is(err, durable.ErrNotFound) {
		return nil, nil
	}
	return data, err
}
