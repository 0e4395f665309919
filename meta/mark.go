package meta

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hotcount/hotcount/store"
)

// Record marks: see "Record marks" in the package documentation.

// markValue is the value of the mark of a record of generation gen: a
// number drawn from gen (1 for a record written before generations).
func markValue(gen string) int64 {
	g, err := strconv.ParseUint(gen, 16, 64)
	if err != nil {
		return 1
	}
	return int64(g&(1<<52-1)) + 1
}

// markFor returns the mark of key's record mt: it expires
// store.DeadlineGrace after the record does (3×store.DeadlineGrace after
// a deadline), so that it outlives the record.
func markFor(key string, mt Meta) store.Mark {
	mk := store.Mark{Key: key, Value: markValue(mt.Gen)}
	if mt.Deadline != 0 {
		mk.ExpireAt = time.UnixMilli(mt.Deadline).Add(3 * store.DeadlineGrace)
	}
	return mk
}

// SettleTimeout bounds the steps that take back a mark a write left
// without its record (see "Record marks" in the package documentation):
// they run even when the caller's context has ended, since the write
// they follow may have landed, and nothing else would take it back.
const SettleTimeout = 5 * time.Second

// settleCtx returns the context of the steps that take back a mark: not
// ended with ctx, bounded by SettleTimeout.
func settleCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), SettleTimeout)
}

// save writes data, the encoding of mt, as key's record if its epoch is
// epoch (CASMeta), after writing the record's mark: a record never exists
// without its mark, as far as this process's writes go. When the record
// is not written, the mark written for it may stand for no record (the
// record was dropped meanwhile, or the write failed) or hold another
// record's value (a first record written meanwhile by another process):
// settleMark takes it back.
func (m *Manager) save(ctx context.Context, key string, epoch uint64, mt Meta, data []byte) (bool, error) {
	mk := markFor(key, mt)
	if _, err := m.b.SetMarks(ctx, []store.Mark{mk}, false); err != nil {
		m.settleMark(ctx, key, mk.Value) // it may have been written
		return false, fmt.Errorf("mark: %w", err)
	}
	ok, err := m.b.CASMeta(ctx, key, epoch, data)
	if !ok {
		m.settleMark(ctx, key, mk.Value)
	}
	return ok, err
}

// settleMark takes back the mark of value v that this process may have
// written for key's record, unless the record the cache holds now is of
// that value: it reads the record after the mark was written, so a record
// it finds was deleted (if at all) after the mark was written, and its
// deleter deletes the mark; otherwise the mark is deleted here if it
// still holds v, and a record of another value found gets its own mark
// back (heal). It runs in settleCtx. Best effort: a mark left behind
// when a step fails costs its counter a look-up per TTL.
func (m *Manager) settleMark(ctx context.Context, key string, v int64) {
	ctx, cancel := settleCtx(ctx)
	defer cancel()
	data, ok, err := m.b.GetMeta(ctx, key)
	if err != nil {
		return
	}
	var mt Meta
	if ok {
		if mt, err = decode(data); err != nil {
			return // a look-up reports it
		}
		if markValue(mt.Gen) == v {
			return
		}
	}
	if err := m.b.DelMark(ctx, key, v); err != nil || !ok {
		return
	}
	_ = m.heal(ctx, []string{key}, []Meta{mt})
}

// unsave deletes key's record of epoch epoch and generation gen
// (CASMeta with nil data) and then, if it was deleted, its mark, unless
// the mark holds another record's value by then (a record written since,
// whose writer marked it first). The mark is deleted in settleCtx: a
// caller that gives up once the record is gone does not leave the mark;
// when the deletion of the record fails, it may have landed, and
// settleMark deletes the mark if the record is gone. A mark left behind
// (the deletion of the mark failed) costs a look-up per TTL.
func (m *Manager) unsave(ctx context.Context, key string, epoch uint64, gen string) (bool, error) {
	ok, err := m.b.CASMeta(ctx, key, epoch, nil)
	switch {
	case ok && err == nil:
		sctx, cancel := settleCtx(ctx)
		_ = m.b.DelMark(sctx, key, markValue(gen))
		cancel()
	case err != nil:
		m.settleMark(ctx, key, markValue(gen))
	}
	return ok, err
}

// heal gives the records found by a look-up their marks where they have
// none (SET … NX): a record written by a version without marks, or whose
// mark a failover or a node that came back empty lost. A record may have
// been deleted, and its mark with it, after the look-up read it: the
// records of the marks heal wrote (all of them, when SetMarks failed) are
// read again, in settleCtx, and a mark whose record is gone or of another
// value by then is deleted again (if it still holds the value written),
// so that no mark outlives its record.
func (m *Manager) heal(ctx context.Context, keys []string, mts []Meta) error {
	if len(keys) == 0 {
		return nil
	}
	marks := make([]store.Mark, len(keys))
	for i, k := range keys {
		marks[i] = markFor(k, mts[i])
	}
	written, setErr := m.b.SetMarks(ctx, marks, true)
	var wk []string
	var wv []int64
	for i := range marks {
		if setErr != nil || written[i] {
			wk, wv = append(wk, keys[i]), append(wv, marks[i].Value)
		}
	}
	if len(wk) == 0 {
		return nil
	}
	sctx, cancel := settleCtx(ctx)
	defer cancel()
	errs := []error{setErr}
	if setErr != nil {
		errs[0] = fmt.Errorf("meta: mark records: %w", setErr)
	}
	data, err := m.b.GetMetas(sctx, wk)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("meta: read the records just marked: %w", err))...)
	}
	for i, d := range data {
		if d != nil {
			mt, err := decode(d)
			if err != nil || markValue(mt.Gen) == wv[i] {
				continue // a look-up reports a bad record
			}
		}
		if err := m.b.DelMark(sctx, wk[i], wv[i]); err != nil {
			errs = append(errs, fmt.Errorf("meta: take back the mark of %q: %w", wk[i], err))
		}
	}
	return errors.Join(errs...)
}

// HealMarks gives the records of keys that the cache holds (found by a
// look-up) their marks where they have none (SET … NX). Readers call it
// for the records whose marks they found missing: ReadSets reads no mark
// (its callers read each mark with the counter's values, in the same
// round, since it lives in the slot of the cold sub-counter that every
// read set holds). Keys whose record the cache does not hold are skipped.
func (m *Manager) HealMarks(ctx context.Context, keys []string) error {
	var hk []string
	var hm []Meta
	for _, k := range keys {
		v, ok := m.cache.Load(k)
		if !ok {
			continue
		}
		if e := v.(*entry); e.pinned && !e.gone {
			hk, hm = append(hk, k), append(hm, e.m)
		}
	}
	return m.heal(ctx, hk, hm)
}

// NoRecord caches the cold default labels of key, a counter of a
// namespace with cold start whose mark a write found absent at at (taken
// before the write was sent): it had no record then, exactly as a look-up
// that found none would have learnt. Later writes within the TTL use it
// with no round trip. It does nothing for counters without cold start,
// with naive labels, or when the cache holds something newer.
func (m *Manager) NoRecord(key string, at time.Time) {
	if !m.cold(key) {
		return
	}
	m.put(key, Meta{Write: coldSet, Read: coldSet}, at)
}

// Remark sets the marks of those of keys whose counters have a record in
// the cache and lack their mark (SET … NX), reading the records in one
// pipelined round per node: for a node that came back empty, which held
// the marks of records kept on other nodes.
func (m *Manager) Remark(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	data, err := m.b.GetMetas(ctx, keys)
	if err != nil {
		return fmt.Errorf("meta: read: %w", err)
	}
	var hk []string
	var hm []Meta
	for i, d := range data {
		if d == nil {
			continue
		}
		mt, err := decode(d)
		if err != nil {
			continue // a look-up reports it
		}
		hk, hm = append(hk, keys[i]), append(hm, mt)
	}
	return m.heal(ctx, hk, hm)
}
