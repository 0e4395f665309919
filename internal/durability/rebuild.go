package durability

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hotcount/hotcount/internal/ns"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// rebuildChunk is the most counters rebuilt per round trip.
const rebuildChunk = 1000

// RebuildReport is the outcome of Rebuild.
type RebuildReport struct {
	// DryRun reports that nothing was written: the figures are what the
	// run would have changed.
	DryRun bool
	// Keys is the number of durable-mode counters compared with the log.
	Keys int
	// Corrected is how many of them the cache view had wrong, and Delta
	// the sum of the corrections added (positive: the view was behind).
	Corrected int
	Delta     int64
	// Skipped counts counters found in the log whose key is not in durable
	// mode in this configuration (left alone).
	Skipped int
	// NotInLog counts counters asked for by name that the log does not
	// have (a fast-mode counter, or one never written): they are left
	// alone, never "corrected" to the log's 0.
	NotInLog int
	// Restores lists the cache nodes found to have lost their data, whose
	// fast-mode counters were restored from checkpoints.
	Restores []Restore
}

// RebuildOptions limits and configures Rebuild.
type RebuildOptions struct {
	// Keys, when not empty, limits every step to these counters; Prefix,
	// when not empty, to the counters whose key starts with it. A limited
	// run restores only the checkpoints of those counters and does not
	// record a lost node's new incarnation, so the node's other counters
	// are still restored by the next full run or checkpoint round.
	Keys   []string
	Prefix string
	// DryRun computes what the run would change and writes nothing: no
	// correction, no restore, no sentinel, no metadata.
	DryRun bool
}

// limited reports whether o restricts the counters touched.
func (o RebuildOptions) limited() bool { return len(o.Keys) > 0 || o.Prefix != "" }

// match reports whether counter key is within o's limit.
func (o RebuildOptions) match(key string) bool {
	if len(o.Keys) > 0 {
		return slices.Contains(o.Keys, key)
	}
	return strings.HasPrefix(key, o.Prefix)
}

// Rebuild recreates the cache view from the durable store.
//
// Fast-mode counters: every cache node's sentinel is checked and the
// counters of a node that lost its data are restored from their
// checkpoints, with their label-set metadata, exactly as the background
// checkpointer does (idempotent: a node is restored once per loss,
// whoever runs it). A store that does not belong to the cluster is
// refused (ErrForeignStore) before anything is written.
//
// Durable-mode counters whose key starts with prefix ("" for all) and
// that the log has: the exact total T is read from the log and the cache
// view's sum S from the sub-counters, and T−S is added to one sub-counter
// (with a token, so a retried correction counts once). The view is not
// cleared first, so readers never see it drop to zero. A counter the log
// does not have is never touched.
//
// Run it while the writers of the rebuilt counters are paused: an
// increment that is committed but not yet flushed to the cache when its
// counter is compared is counted twice (once by the correction, once by
// its flush); one committed after T was read but flushed before S was read
// is subtracted. Either error is at most the increments in flight, and a
// second Rebuild with writers paused makes the view exact. This process's
// own buffered deltas are flushed first.
func (d *Service) Rebuild(ctx context.Context, prefix string) (RebuildReport, error) {
	return d.RebuildWith(ctx, RebuildOptions{Prefix: prefix})
}

// RebuildKeys is Rebuild limited to the named counters (see
// RebuildOptions.Keys).
func (d *Service) RebuildKeys(ctx context.Context, keys ...string) (RebuildReport, error) {
	if len(keys) == 0 {
		return RebuildReport{}, nil
	}
	return d.RebuildWith(ctx, RebuildOptions{Keys: keys})
}

// RebuildWith is Rebuild with options: a limit to some counters, which
// applies to every step, and a dry run.
func (d *Service) RebuildWith(ctx context.Context, o RebuildOptions) (RebuildReport, error) {
	rep := RebuildReport{DryRun: o.DryRun}
	for _, k := range o.Keys {
		if err := keyspace.Validate(k); err != nil {
			return rep, err
		}
	}
	if !o.DryRun {
		if err := d.eng.Flush(ctx); err != nil {
			return rep, fmt.Errorf("rebuild: %w", err)
		}
	}
	var err error
	if !o.limited() && !o.DryRun {
		var cr CheckpointReport
		cr, err = d.ck.round(ctx)
		rep.Restores = cr.Restores
	} else {
		rep.Restores, err = d.ck.repair(ctx, o)
	}
	if err != nil {
		return rep, fmt.Errorf("rebuild: %w", err)
	}
	token := NewID()
	if len(o.Keys) == 0 {
		// The log's keys under the prefix, a page at a time.
		var rebuildErr error
		err = d.keyPages(ctx, o.Prefix, func(keys []string) error {
			rebuildErr = d.rebuildKeys(ctx, keys, token, o.DryRun, &rep)
			return rebuildErr
		})
		if err != nil && rebuildErr == nil {
			err = fmt.Errorf("rebuild: %w", err)
		}
		return rep, err
	}
	var inLog []string
	for _, k := range o.Keys {
		// k is the first key that starts with k, when the log has it.
		lctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
		found, err := d.be.KeysAfter(lctx, k, "", 1)
		cancel()
		if err != nil {
			return rep, fmt.Errorf("rebuild: %w", err)
		}
		if len(found) == 1 && found[0] == k {
			inLog = append(inLog, k)
		} else {
			rep.NotInLog++
		}
	}
	return rep, d.rebuildKeys(ctx, inLog, token, o.DryRun, &rep)
}

// rebuildKeys corrects the view of keys, rebuildChunk at a time, with the
// run's token.
func (d *Service) rebuildKeys(ctx context.Context, keys []string, token string, dryRun bool, rep *RebuildReport) error {
	var durableKeys []string
	for _, k := range keys {
		if keyspace.Validate(k) != nil || d.ns.Lookup(k).Mode != ns.ModeDurable {
			rep.Skipped++
			continue
		}
		durableKeys = append(durableKeys, k)
	}
	for start := 0; start < len(durableKeys); start += rebuildChunk {
		if err := d.rebuildChunk(ctx, durableKeys[start:min(start+rebuildChunk, len(durableKeys))], token, dryRun, rep); err != nil {
			return err
		}
	}
	return nil
}

// peekSums reads the cache view's sum of keys without writing anything
// (no metadata restored or pinned), for a dry run.
func (d *Service) peekSums(ctx context.Context, keys []string) (map[string]int64, error) {
	mm := d.eng.Meta()
	var subs []string
	var owner []string
	for _, k := range keys {
		var labels []string
		if mm == nil {
			_, labels, _ = d.eng.Labels(ctx, k)
		} else {
			var err error
			if labels, err = mm.PeekReadSet(ctx, k); err != nil {
				return nil, err
			}
		}
		for _, l := range labels {
			subs = append(subs, keyspace.SubKey(k, l))
			owner = append(owner, k)
		}
	}
	gctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	vals, err := d.eng.Store().Get(gctx, subs)
	cancel()
	if err != nil {
		return nil, err
	}
	sums := make(map[string]int64, len(keys))
	for i, v := range vals {
		sums[owner[i]] += v
	}
	return sums, nil
}

func (d *Service) rebuildChunk(ctx context.Context, keys []string, token string, dryRun bool, rep *RebuildReport) error {
	ectx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	exact, err := d.be.ExactMulti(ectx, keys)
	cancel()
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	if dryRun {
		sums, err := d.peekSums(ctx, keys)
		if err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
		for _, k := range keys {
			rep.Keys++
			if diff := exact[k] - sums[k]; diff != 0 {
				rep.Corrected++
				rep.Delta += diff
			}
		}
		return nil
	}
	reads, _, _, err := d.eng.Read(ctx, keys, nil)
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	dls, err := d.recordedDeadlines(ctx, keys)
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	now := d.cfg.Clock.Now()
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
		expireAt, ended := viewDeadline(dls, r.Key, write[0], now)
		if ended {
			continue // gone: the clean-up pass clears its log
		}
		ops = append(ops, store.IncrOp{Key: keyspace.SubKey(r.Key, write[0]), Delta: diff, ExpireAt: expireAt,
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
