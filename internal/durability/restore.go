package durability

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// restore adds back every sub-counter checkpoint of node, each guarded by
// a token of the incarnation inc, so it counts once however often it runs.
// It reads the checkpoints a page at a time (listPage, each page within
// its own timeout), and for the counters of each page first restores the
// label-set records the node held (from the durable store, or from the
// labels that have checkpoints), so that every reader sums the restored
// sub-counters; all checkpoints of one counter are handled together. With o (a limited or dry Rebuild) only
// o's counters are restored, and with o.DryRun nothing is written.
//
// The loss estimate assumes the node was lost one interval after it was
// last seen intact (lastOK), or at detection if that is sooner.
func (ck *checkpointer) restore(ctx context.Context, topo *store.Topology, node string, inc int64, lastOK time.Time, o *RebuildOptions) (*Restore, error) {
	d := ck.d
	now := d.cfg.Clock.Now()
	lostAt := now
	if !lastOK.IsZero() && lastOK.Add(d.cfg.CheckpointInterval).Before(now) {
		lostAt = lastOK.Add(d.cfg.CheckpointInterval)
	}
	r := &Restore{Node: node, Incarnation: inc, At: now, Partial: o != nil && o.limited(), DryRun: o != nil && o.DryRun}
	var loss float64
	// The checkpoints of sub-counters, a page at a time; the ones of the
	// counters a page may end within wait for the next, so that each
	// counter is restored from all of its checkpoints at once.
	var carry []durable.Checkpoint
	var restoreErr error
	err := d.checkpointPages(ctx, "{", func(page []durable.Checkpoint) error {
		cps := append(carry, page...)
		carry = nil
		if len(page) == listPage {
			last := page[len(page)-1].Key
			cps, carry = splitOpen(cps, last)
		}
		restoreErr = ck.restorePage(ctx, topo, node, inc, lostAt, o, cps, r, &loss)
		return restoreErr
	})
	if err == nil && len(carry) > 0 {
		err = ck.restorePage(ctx, topo, node, inc, lostAt, o, carry, r, &loss)
		restoreErr = err
	}
	if err != nil {
		if restoreErr != nil {
			return nil, fmt.Errorf("restore %s: %w", node, restoreErr)
		}
		return nil, fmt.Errorf("restore %s: %w", node, err)
	}
	r.EstimatedLoss = int64(loss)
	if r.DryRun {
		return r, nil
	}
	for _, subs := range ck.saved { // the node's values changed under us
		for sub := range subs {
			if topo.NodeOf(sub) == node {
				delete(subs, sub)
			}
		}
	}
	ck.nrestores.Add(1)
	ck.restoredKeys.Add(uint64(r.Keys))
	ck.restoredAmount.Add(r.Amount)
	ck.restores = append(ck.restores, *r)
	if len(ck.restores) > maxRestores {
		ck.restores = ck.restores[len(ck.restores)-maxRestores:]
	}
	return r, nil
}

// splitOpen splits checkpoints read up to the key last into those of
// counters that have no sub-key after last and those of counters that may
// have more (last is within their range of sub-keys: the counter of last,
// and the counters its key starts with followed by "#").
func splitOpen(cps []durable.Checkpoint, last string) (done, open []durable.Checkpoint) {
	for _, cp := range cps {
		key, _, ok := keyspace.ParseSubKey(cp.Key)
		if ok && strings.HasPrefix(last, "{"+key+"#") {
			open = append(open, cp)
		} else {
			done = append(done, cp)
		}
	}
	return done, open
}

// restorePage restores the checkpoints cps of one page (see restore),
// adding to r and loss.
func (ck *checkpointer) restorePage(ctx context.Context, topo *store.Topology, node string, inc int64, lostAt time.Time,
	o *RebuildOptions, cps []durable.Checkpoint, r *Restore, loss *float64) error {
	d := ck.d
	now := r.At
	if o != nil {
		cps = slices.DeleteFunc(cps, func(cp durable.Checkpoint) bool {
			key, _, ok := keyspace.ParseSubKey(cp.Key)
			return !ok || !o.match(key)
		})
	}
	if err := ck.restoreMetas(ctx, topo, node, cps, r); err != nil {
		return err
	}
	deadlines, err := ck.deadlines(ctx, node, topo, cps)
	if err != nil {
		return err
	}
	tok := strconv.FormatInt(inc, 10)
	var ops []store.IncrOp
	var ages []time.Duration
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if r.DryRun {
			// Count only the ops whose token is unused: the others were
			// applied already (a token is stored as 1).
			toks := make([]string, len(ops))
			for i, op := range ops {
				toks[i] = op.TokenKey
			}
			gctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
			used, err := d.eng.Store().Get(gctx, toks)
			cancel()
			if err != nil {
				return err
			}
			for i, op := range ops {
				if used[i] != 0 {
					continue
				}
				r.Keys++
				r.Amount += op.Delta
				r.Window = max(r.Window, ages[i])
			}
			ops, ages = ops[:0], ages[:0]
			return nil
		}
		ictx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
		defer cancel()
		res, err := d.eng.Store().IncrMulti(ictx, ops)
		if err != nil {
			return err
		}
		for i, x := range res {
			if x.Err != nil {
				return x.Err
			}
			if x.Applied { // not applied: another process restored it
				r.Keys++
				r.Amount += ops[i].Delta
				r.Window = max(r.Window, ages[i])
			}
		}
		ops, ages = ops[:0], ages[:0]
		return nil
	}
	for _, cp := range cps {
		key, label, ok := keyspace.ParseSubKey(cp.Key)
		if !ok || cp.Total == 0 || topo.NodeOf(cp.Key) != node {
			continue
		}
		// The deadline is part of the counter: the sub-counter comes back
		// with the one it had (the cold one exactly at the counter's, the
		// others store.DeadlineGrace later), and a counter that ended
		// while its node was away does not come back at all.
		expireAt, ended := viewDeadline(deadlines, key, label, now)
		if ended {
			continue
		}
		age := max(now.Sub(cp.At), 0)
		if s, ok := ck.saved[key][cp.Key]; ok && s.rate > 0 && lostAt.After(cp.At) {
			*loss += s.rate * lostAt.Sub(cp.At).Seconds()
		}
		ops = append(ops, store.IncrOp{Key: cp.Key, Delta: cp.Total, ExpireAt: expireAt,
			TokenKey: keyspace.AuxKey(key, label, "restore", tok), TTL: restoreTokenTTL})
		ages = append(ages, age)
		if len(ops) == ckChunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// deadlines returns the recorded deadlines of the counters of cps whose
// sub-counters live on node.
func (ck *checkpointer) deadlines(ctx context.Context, node string, topo *store.Topology, cps []durable.Checkpoint) (map[string]time.Time, error) {
	var keys []string
	seen := map[string]bool{}
	for _, cp := range cps {
		key, _, ok := keyspace.ParseSubKey(cp.Key)
		if !ok || cp.Total == 0 || seen[key] || topo.NodeOf(cp.Key) != node {
			continue
		}
		seen[key] = true
		keys = append(keys, key)
	}
	return ck.d.recordedDeadlines(ctx, keys)
}

// recordedDeadlines returns the deadlines the durable store records for
// keys (exact: set with Expire, or read from the cache by a checkpoint
// round or the clean-up pass) and, for a key without a record, the
// estimate this process noted and has not written yet.
func (d *Service) recordedDeadlines(ctx context.Context, keys []string) (map[string]time.Time, error) {
	out, err := d.loadDeadlines(ctx, keys)
	if err != nil {
		return nil, err
	}
	d.gc.mu.Lock()
	for _, k := range keys {
		if at, ok := d.gc.pending[k]; ok {
			if _, rec := out[k]; !rec {
				out[k] = at
			}
		}
	}
	d.gc.mu.Unlock()
	return out, nil
}

// loadDeadlines returns the deadline records of keys.
func (d *Service) loadDeadlines(ctx context.Context, keys []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for start := 0; start < len(keys); start += ckChunk {
		lctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
		m, err := d.be.LoadDeadlines(lctx, keys[start:min(start+ckChunk, len(keys))])
		cancel()
		if err != nil {
			return nil, fmt.Errorf("deadlines: %w", err)
		}
		for k, at := range m {
			out[k] = at
		}
	}
	return out, nil
}

// viewDeadline returns the deadline a value written back to sub-counter
// label of key takes: the counter's deadline from dls (the cold
// sub-counter exactly at it, the others store.DeadlineGrace later), or
// none. ended reports that the deadline has passed at now: the counter is
// gone and nothing is written back.
func viewDeadline(dls map[string]time.Time, key, label string, now time.Time) (at time.Time, ended bool) {
	dl, ok := dls[key]
	if !ok {
		return time.Time{}, false
	}
	if !now.Before(dl) {
		return time.Time{}, true
	}
	if label != keyspace.ColdLabel {
		dl = dl.Add(store.DeadlineGrace)
	}
	return dl, false
}

// restoreMetas restores the label-set records that node held, of the
// counters with a non-zero checkpoint in cps, before their values come
// back. A record rebuilt from the labels (the durable store has none)
// takes the counter's recorded deadline; a counter whose deadline passed
// gets none.
func (ck *checkpointer) restoreMetas(ctx context.Context, topo *store.Topology, node string, cps []durable.Checkpoint, r *Restore) error {
	mm := ck.d.eng.Meta()
	if mm == nil {
		return nil
	}
	labels := map[string][]string{}
	var keys []string
	for _, cp := range cps {
		k, label, ok := keyspace.ParseSubKey(cp.Key)
		if !ok || cp.Total == 0 || topo.NodeOf(keyspace.MetaKey(k)) != node {
			continue
		}
		if labels[k] == nil {
			keys = append(keys, k)
		}
		labels[k] = append(labels[k], label)
	}
	dls, err := ck.d.recordedDeadlines(ctx, keys)
	if err != nil {
		return err
	}
	now := ck.d.cfg.Clock.Now()
	for _, k := range keys {
		dl, ok := dls[k]
		if ok && !now.Before(dl) {
			continue // ended: its values do not come back either
		}
		mctx, cancel := context.WithTimeout(ctx, ck.d.cfg.Timeout)
		ok, err := mm.RestoreRecord(mctx, k, labels[k], dl, r.DryRun)
		cancel()
		if err != nil {
			return err
		}
		if ok {
			r.Metas++
		}
	}
	if r.DryRun {
		return nil
	}
	// The node also held the record marks of counters whose cold
	// sub-counter it owns; their records, on other nodes, survived: mark
	// them again (counters with a label besides the cold one are the ones
	// that may have a record).
	var marked []string
	seen := map[string]bool{}
	for _, cp := range cps {
		k, label, ok := keyspace.ParseSubKey(cp.Key)
		if !ok || label == keyspace.ColdLabel || seen[k] || topo.NodeOf(keyspace.MarkKey(k)) != node {
			continue
		}
		seen[k] = true
		marked = append(marked, k)
	}
	for len(marked) > 0 {
		n := min(len(marked), remarkBatch)
		mctx, cancel := context.WithTimeout(ctx, ck.d.cfg.Timeout)
		err := mm.Remark(mctx, marked[:n])
		cancel()
		if err != nil {
			return err
		}
		marked = marked[n:]
	}
	return nil
}

// remarkBatch is how many counters' marks a restore checks per round.
const remarkBatch = 1000
