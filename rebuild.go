package hotcount

import (
	"context"
	"fmt"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// rebuildChunk is the most counters rebuilt per round trip.
const rebuildChunk = 1000

// RebuildReport is the outcome of Rebuild.
type RebuildReport struct {
	// Keys is the number of durable-mode counters compared with the log.
	Keys int
	// Corrected is how many of them the cache view had wrong, and Delta
	// the sum of the corrections added (positive: the view was behind).
	Corrected int
	Delta     int64
	// Skipped counts counters found in the log whose key is not in durable
	// mode in this Client's Config (left alone).
	Skipped int
	// Restores lists the cache nodes found to have lost their data, whose
	// fast-mode counters were restored from checkpoints.
	Restores []Restore
}

// Rebuild recreates the cache view from the durable store.
//
// Fast-mode counters: every cache node's sentinel is checked and the
// counters of a node that lost its data are restored from their
// checkpoints, exactly as the background checkpointer does (idempotent: a
// node is restored once per loss, whoever runs it).
//
// Durable-mode counters whose key starts with prefix ("" for all): the
// exact total T is read from the log and the cache view's sum S from the
// sub-counters, and T−S is added to one sub-counter (with a token, so a
// retried correction counts once). The view is not cleared first, so
// readers never see it drop to zero.
//
// Run it while the writers of the rebuilt counters are paused: an
// increment that is committed but not yet flushed to the cache when its
// counter is compared is counted twice (once by the correction, once by
// its flush); one committed after T was read but flushed before S was read
// is subtracted. Either error is at most the increments in flight, and a
// second Rebuild with writers paused makes the view exact. This process's
// own buffered deltas are flushed first.
func (c *Client) Rebuild(ctx context.Context, prefix string) (RebuildReport, error) {
	var rep RebuildReport
	if err := c.rebuildStart(ctx, &rep); err != nil {
		return rep, err
	}
	lctx, cancel := context.WithTimeout(ctx, commitTimeout(c.cfg.Timeout))
	keys, err := c.dur.be.Keys(lctx, prefix)
	cancel()
	if err != nil {
		return rep, fmt.Errorf("rebuild: %w", err)
	}
	return rep, c.rebuildKeys(ctx, keys, &rep)
}

// RebuildKeys is Rebuild for the named durable-mode counters only (the
// fast-mode check of every node is the same).
func (c *Client) RebuildKeys(ctx context.Context, keys ...string) (RebuildReport, error) {
	var rep RebuildReport
	for _, k := range keys {
		if err := keyspace.Validate(k); err != nil {
			return rep, err
		}
	}
	if err := c.rebuildStart(ctx, &rep); err != nil {
		return rep, err
	}
	return rep, c.rebuildKeys(ctx, keys, &rep)
}

// rebuildStart flushes this process's deltas and repairs lost nodes.
func (c *Client) rebuildStart(ctx context.Context, rep *RebuildReport) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if c.dur == nil {
		return fmt.Errorf("rebuild: %w: no durable store (Config.Durable)", ErrConfig)
	}
	if c.buf != nil {
		if err := c.buf.Flush(ctx); err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
	}
	cr, err := c.dur.ck.round(ctx)
	rep.Restores = cr.Restores
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	return nil
}

// rebuildKeys corrects the view of keys, rebuildChunk at a time.
func (c *Client) rebuildKeys(ctx context.Context, keys []string, rep *RebuildReport) error {
	var durableKeys []string
	for _, k := range keys {
		if keyspace.Validate(k) != nil || c.cfg.namespace(k).Mode != ModeDurable {
			rep.Skipped++
			continue
		}
		durableKeys = append(durableKeys, k)
	}
	token := newID()
	for start := 0; start < len(durableKeys); start += rebuildChunk {
		if err := c.rebuildChunk(ctx, durableKeys[start:min(start+rebuildChunk, len(durableKeys))], token, rep); err != nil {
			return err
		}
	}
	return nil
}

func (c *Client) rebuildChunk(ctx context.Context, keys []string, token string, rep *RebuildReport) error {
	ectx, cancel := context.WithTimeout(ctx, commitTimeout(c.cfg.Timeout))
	exact, err := c.dur.be.ExactMulti(ectx, keys)
	cancel()
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	var subs []string
	spans := make([]int, len(keys)+1)
	first := make([]string, len(keys)) // an active label per key
	for i, k := range keys {
		write, read, err := c.Labels(ctx, k)
		if err != nil {
			return fmt.Errorf("rebuild %q: %w", k, err)
		}
		if len(write) == 0 {
			return fmt.Errorf("rebuild %q: %w: no active label", k, store.ErrUnavailable)
		}
		first[i] = write[0]
		for _, l := range read {
			subs = append(subs, keyspace.SubKey(k, l))
		}
		spans[i+1] = len(subs)
	}
	gctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	vals, err := c.st.Get(gctx, subs)
	cancel()
	if err != nil {
		return fmt.Errorf("rebuild read: %w", err)
	}
	var ops []store.IncrOp
	for i, k := range keys {
		rep.Keys++
		sum, err := sumInt64(vals[spans[i]:spans[i+1]])
		if err != nil {
			return fmt.Errorf("rebuild %q: %w", k, err)
		}
		t := exact[k]
		diff := t - sum
		if (sum < 0 && diff < t) || (sum > 0 && diff > t) { // t-sum overflowed
			return fmt.Errorf("rebuild %q: %w", k, ErrOverflow)
		}
		if diff == 0 {
			continue
		}
		ops = append(ops, store.IncrOp{Key: keyspace.SubKey(k, first[i]), Delta: diff,
			TokenKey: keyspace.AuxKey(k, first[i], "rebuild", token)})
	}
	for attempt := 0; len(ops) > 0; attempt++ {
		ictx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		res, err := c.st.IncrMulti(ictx, ops)
		cancel()
		if err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
		var retry []store.IncrOp
		var last error
		for j, r := range res {
			if r.Err != nil {
				retry, last = append(retry, ops[j]), r.Err
				continue
			}
			// Applied false: an earlier attempt of this op was applied.
			rep.Corrected++
			rep.Delta += ops[j].Delta
			if key, _, ok := keyspace.ParseSubKey(ops[j].Key); ok {
				c.cache.drop(key)
			}
		}
		if len(retry) > 0 && attempt == 2 {
			return fmt.Errorf("rebuild: %d corrections failed: %w", len(retry), last)
		}
		ops = retry
	}
	return nil
}
