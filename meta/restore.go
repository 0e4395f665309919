package meta

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hotcount/hotcount/keyspace"
)

// RestoreRecord makes sure the cache holds a record of key after a cache
// node lost it, so that every process, with or without a durable store,
// sums the sub-counters that hold values. labels are the labels known to
// hold values (their checkpoints).
//
// A record in the cache is left as it is. A missing one is restored from
// the durable store when it holds one; otherwise, unless the labels need
// no record (only the cold label, which every reader sums, or naive
// labels), one is written with Write = Read = labels (epoch 1) and the
// counter's deadline (zero: none), and mirrored. With dryRun nothing is
// written. restored reports whether a record was (or would be) written.
func (m *Manager) RestoreRecord(ctx context.Context, key string, labels []string, deadline time.Time, dryRun bool) (restored bool, err error) {
	labels = slices.DeleteFunc(slices.Clone(labels), func(l string) bool { return l == keyspace.ColdLabel })
	if len(labels) == 0 {
		return false, nil
	}
	if _, ok, err := m.b.GetMeta(ctx, key); err != nil || ok {
		if err != nil {
			return false, fmt.Errorf("meta: read %q: %w", key, err)
		}
		return false, nil
	}
	var data []byte
	var mt Meta
	if m.cfg.Durable != nil {
		if data, err = m.cfg.Durable.LoadMeta(ctx, key); err != nil {
			return false, fmt.Errorf("meta: load %q from the durable store: %w", key, err)
		}
		if data != nil {
			if mt, err = decode(data); err != nil {
				return false, fmt.Errorf("meta: durable record of %q: %w", key, err)
			}
		}
	}
	if data == nil && m.cfg.Naive {
		return false, nil // naive labels are derived, never recorded
	}
	if dryRun {
		return true, nil
	}
	fresh := data == nil
	if fresh {
		ls := slices.Clone(labels)
		slices.Sort(ls)
		ls = slices.Compact(ls)
		mt = Meta{Epoch: 1, Write: ls, Read: ls, Gen: m.newGen()}
		if !deadline.IsZero() {
			mt.Deadline = deadline.UnixMilli()
		}
		data = mt.encode()
	}
	ok, err := m.save(ctx, key, 0, mt, data)
	if err != nil {
		return false, fmt.Errorf("meta: restore %q: %w", key, err)
	}
	m.Forget(key)
	if !ok {
		return false, nil // another process wrote one first
	}
	if fresh {
		if err := m.mirror(ctx, key, mt); err != nil {
			return true, err
		}
	}
	return true, nil
}

// PeekReadSet returns the read set of key as a reader would find it, from
// the cache, the durable store or the defaults, and writes nothing (for a
// dry run).
func (m *Manager) PeekReadSet(ctx context.Context, key string) ([]string, error) {
	data, ok, err := m.b.GetMeta(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("meta: read %q: %w", key, err)
	}
	if !ok && m.cfg.Durable != nil {
		if data, err = m.cfg.Durable.LoadMeta(ctx, key); err != nil {
			return nil, fmt.Errorf("meta: load %q from the durable store: %w", key, err)
		}
		ok = data != nil
	}
	if ok {
		mt, err := decode(data)
		if err != nil {
			return nil, fmt.Errorf("meta: record of %q: %w", key, err)
		}
		return m.withCold(mt.Read), nil
	}
	labels, err := m.defaults(ctx, key)
	if err != nil {
		return nil, err
	}
	return m.withCold(labels), nil
}
