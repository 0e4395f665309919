package durability

import (
	"context"
	"fmt"

	"github.com/hotcount/hotcount/internal/ns"
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
	// mode in this configuration (left alone).
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
func (d *Service) Rebuild(ctx context.Context, prefix string) (RebuildReport, error) {
	var rep RebuildReport
	if err := d.rebuildStart(ctx, &rep); err != nil {
		return rep, err
	}
	lctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	keys, err := d.be.Keys(lctx, prefix)
	cancel()
	if err != nil {
		return rep, fmt.Errorf("rebuild: %w", err)
	}
	return rep, d.rebuildKeys(ctx, keys, &rep)
}

// RebuildKeys is Rebuild for the named durable-mode counters only (the
// fast-mode check of every node is the same).
func (d *Service) RebuildKeys(ctx context.Context, keys ...string) (RebuildReport, error) {
	var rep RebuildReport
	for _, k := range keys {
		if err := keyspace.Validate(k); err != nil {
			return rep, err
		}
	}
	if err := d.rebuildStart(ctx, &rep); err != nil {
		return rep, err
	}
	return rep, d.rebuildKeys(ctx, keys, &rep)
}

// rebuildStart flushes this process's deltas and repairs lost nodes.
func (d *Service) rebuildStart(ctx context.Context, rep *RebuildReport) error {
	if err := d.eng.Flush(ctx); err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	cr, err := d.ck.round(ctx)
	rep.Restores = cr.Restores
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	return nil
}

// rebuildKeys corrects the view of keys, rebuildChunk at a time.
func (d *Service) rebuildKeys(ctx context.Context, keys []string, rep *RebuildReport) error {
	var durableKeys []string
	for _, k := range keys {
		if keyspace.Validate(k) != nil || d.ns.Lookup(k).Mode != ns.ModeDurable {
			rep.Skipped++
			continue
		}
		durableKeys = append(durableKeys, k)
	}
	token := NewID()
	for start := 0; start < len(durableKeys); start += rebuildChunk {
		if err := d.rebuildChunk(ctx, durableKeys[start:min(start+rebuildChunk, len(durableKeys))], token, rep); err != nil {
			return err
		}
	}
	return nil
}

func (d *Service) rebuildChunk(ctx context.Context, keys []string, token string, rep *RebuildReport) error {
	ectx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	exact, err := d.be.ExactMulti(ectx, keys)
	cancel()
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	reads, _, _, err := d.eng.Read(ctx, keys, nil)
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	var ops []store.IncrOp
	for _, r := range reads {
		rep.Keys++
		sum, err := r.Sum()
		if err != nil {
			return fmt.Errorf("rebuild %q: %w", r.Key, err)
		}
		t := exact[r.Key]
		diff := t - sum
		if (sum < 0 && diff < t) || (sum > 0 && diff > t) { // t-sum overflowed
			return fmt.Errorf("rebuild %q: %w", r.Key, store.ErrOverflow)
		}
		if diff == 0 {
			continue
		}
		write, _, err := d.eng.Labels(ctx, r.Key)
		if err != nil {
			return fmt.Errorf("rebuild %q: %w", r.Key, err)
		}
		ops = append(ops, store.IncrOp{Key: keyspace.SubKey(r.Key, write[0]), Delta: diff,
			TokenKey: keyspace.AuxKey(r.Key, write[0], "rebuild", token)})
	}
	for attempt := 0; len(ops) > 0; attempt++ {
		ictx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
		res, err := d.eng.Store().IncrMulti(ictx, ops)
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
				d.eng.Drop(key)
			}
		}
		if len(retry) > 0 && attempt == 2 {
			return fmt.Errorf("rebuild: %d corrections failed: %w", len(retry), last)
		}
		ops = retry
	}
	return nil
}
