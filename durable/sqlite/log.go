package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
)

// jsonList encodes v for json_each.
func jsonList(v any) string {
	b, err := json.Marshal(v)
	if err != nil { // strings, numbers and slices of them always encode
		panic(fmt.Sprintf("sqlite: json of %T: %v", v, err))
	}
	return string(b)
}

// AppendEvents implements durable.Log in one transaction: it looks up the
// IDs already stored, checks every key's bound (exactly where needed), and
// writes only the events that count.
func (db *DB) AppendEvents(ctx context.Context, events []durable.Event) ([]durable.Result, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	b := sqlkit.NewBatch(events, db.clock.Now().UnixNano())
	if len(b.Pending()) == 0 {
		return b.Finish(), nil
	}
	err := db.inTx(ctx, "append", func(tx *sql.Tx) error {
		if err := db.lookupIDs(ctx, tx, b); err != nil {
			return err
		}
		mags, err := db.checkKeys(ctx, tx, b)
		if err != nil {
			return err
		}
		pending := b.Pending()
		ids := make([][3]any, len(pending))
		for j, i := range pending {
			e := b.Events[i]
			ids[j] = [3]any{e.Key, e.ID, e.Delta}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO ids (key, id, delta, seen_ns)
			SELECT value ->> 0, value ->> 1, value ->> 2, ? FROM json_each(?)`, b.Now, jsonList(ids)); err != nil {
			return err
		}
		rows := b.Rows()
		evs := make([][4]any, len(rows))
		for j, r := range rows {
			evs[j] = [4]any{r.Key, r.Delta, r.At, r.N}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO events (key, delta, at_ns, n)
			SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(?)`, jsonList(evs)); err != nil {
			return err
		}
		applied := map[string]int64{}
		for _, k := range b.Keys() {
			applied[k.Key] = k.Abs
		}
		bounds := make([][2]any, 0, len(mags))
		for k, m := range mags {
			bounds = append(bounds, [2]any{k, sqlkit.AddSat(m, applied[k])})
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO bounds (key, stripe, mag)
			SELECT value ->> 0, 0, value ->> 1 FROM json_each(?) WHERE true
			ON CONFLICT (key, stripe) DO UPDATE SET mag = excluded.mag`, jsonList(bounds))
		return err
	})
	if err != nil {
		return nil, err
	}
	return b.Finish(), nil
}

// lookupIDs marks the pending events whose ID is already stored for their
// key (or, for a while after the upgrade, without a key).
func (db *DB) lookupIDs(ctx context.Context, tx *sql.Tx, b *sqlkit.Batch) error {
	pending := b.Pending()
	pairs := make([][2]string, len(pending))
	ids := make([]string, len(pending))
	for j, i := range pending {
		pairs[j] = [2]string{b.Events[i].Key, b.Events[i].ID}
		ids[j] = b.Events[i].ID
	}
	rows, err := tx.QueryContext(ctx, `SELECT i.key, i.id, i.delta FROM json_each(?) j
		JOIN ids i ON i.key = j.value ->> 0 AND i.id = j.value ->> 1`, jsonList(pairs))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var key, id string
		var delta sql.NullInt64
		if err := rows.Scan(&key, &id, &delta); err != nil {
			return err
		}
		if i, ok := b.Find(key, id); ok {
			b.Stored(i, delta.Int64)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if b.Now >= db.legacy.Load() {
		return nil
	}
	legacy, err := tx.QueryContext(ctx, `SELECT i.id FROM json_each(?) j
		JOIN ids i ON i.key = '' AND i.id = j.value`, jsonList(ids))
	if err != nil {
		return err
	}
	defer legacy.Close()
	for legacy.Next() {
		var id string
		if err := legacy.Scan(&id); err != nil {
			return err
		}
		b.StoredLegacy(id)
	}
	return legacy.Err()
}

// checkKeys checks the bound of every key of the pending events, settles
// the keys that need an exact check, and returns each key's bound before
// the batch (the exact one for a settled key); the caller adds what the
// batch brings.
func (db *DB) checkKeys(ctx context.Context, tx *sql.Tx, b *sqlkit.Batch) (map[string]int64, error) {
	keys := b.Keys()
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Key
	}
	rows, err := tx.QueryContext(ctx, `SELECT j.value,
			coalesce((SELECT total FROM totals WHERE key = j.value), 0),
			coalesce((SELECT sum(mag) FROM bounds WHERE key = j.value), 0)
		FROM json_each(?) j`, jsonList(names))
	if err != nil {
		return nil, err
	}
	type state struct{ total, mag int64 }
	st := make(map[string]state, len(keys))
	for rows.Next() {
		var k string
		var s state
		if err := rows.Scan(&k, &s.total, &s.mag); err != nil {
			rows.Close()
			return nil, err
		}
		st[k] = s
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	mags := make(map[string]int64, len(keys))
	for _, k := range keys {
		s := st[k.Key]
		if sqlkit.Fast(s.total, s.mag, k.Abs) {
			mags[k.Key] = s.mag
			continue
		}
		total, abs, err := tail(ctx, tx, k.Key)
		if err != nil {
			return nil, err
		}
		b.Settle(k.Key, total.Add(total, big.NewInt(s.total)))
		mags[k.Key] = sqlkit.Clamp(abs)
	}
	return mags, nil
}

// tail sums the log rows of key, and their |delta|, exactly.
func tail(ctx context.Context, q querier, key string) (sum, abs *big.Int, err error) {
	rows, err := q.QueryContext(ctx, `SELECT delta FROM events WHERE key = ?`, key)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	sum, abs = new(big.Int), new(big.Int)
	d := new(big.Int)
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, nil, err
		}
		d.SetInt64(v)
		sum.Add(sum, d)
		abs.Add(abs, d.Abs(d))
	}
	return sum, abs, rows.Err()
}

// Rollup implements durable.Log: Prune, then one transaction that sums the
// old rows of every key exactly and folds the keys whose total stays in
// int64.
func (db *DB) Rollup(ctx context.Context, before time.Time) (durable.RollupReport, error) {
	var rep durable.RollupReport
	pruned, perr := db.Prune(ctx)
	rep.Pruned = pruned
	cut := before.UnixNano()
	ferr := db.inTx(ctx, "rollup", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT e.key, e.delta, e.n, coalesce(t.total, 0)
			FROM events e LEFT JOIN totals t ON t.key = e.key WHERE e.at_ns < ? ORDER BY e.key`, cut)
		if err != nil {
			return err
		}
		var ok [][2]any
		var keys []string
		var n int64
		var cur string
		sum, d := new(big.Int), new(big.Int)
		var count int64
		flush := func() {
			if cur == "" {
				return
			}
			if sum.IsInt64() {
				ok = append(ok, [2]any{cur, sum.Int64()})
				keys = append(keys, cur)
				n += count
			} else {
				rep.Failed = append(rep.Failed, durable.KeyError{Key: cur, Err: sqlkit.Overflow(cur)})
			}
		}
		for rows.Next() {
			var k string
			var delta, cnt, total int64
			if err := rows.Scan(&k, &delta, &cnt, &total); err != nil {
				rows.Close()
				return err
			}
			if k != cur {
				flush()
				cur, count = k, 0
				sum.SetInt64(total)
			}
			sum.Add(sum, d.SetInt64(delta))
			count += cnt
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		flush()
		if len(keys) == 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM events WHERE at_ns < ?
			AND key IN (SELECT value FROM json_each(?))`, cut, jsonList(keys)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO totals (key, total)
			SELECT value ->> 0, value ->> 1 FROM json_each(?) WHERE true
			ON CONFLICT (key) DO UPDATE SET total = excluded.total`, jsonList(ok)); err != nil {
			return err
		}
		rep.Folded, rep.Keys = int(n), len(keys)
		return nil
	})
	if ferr != nil {
		rep.Folded, rep.Keys, rep.Failed = 0, 0, nil
	}
	return rep, errors.Join(perr, ferr)
}

// exact reads the totals of keys in tx: one statement, or, when a sum
// overflows along the way, an exact sum per key.
func exact(ctx context.Context, tx *sql.Tx, keys []string) (map[string]int64, error) {
	out := make(map[string]int64, len(keys))
	rows, err := tx.QueryContext(ctx, `SELECT k, coalesce((SELECT total FROM totals WHERE key = k), 0),
		coalesce((SELECT sum(delta) FROM events WHERE key = k), 0)
		FROM (SELECT DISTINCT value AS k FROM json_each(?))`, jsonList(keys))
	if err == nil {
		for rows.Next() {
			var k string
			var t, s int64
			if err = rows.Scan(&k, &t, &s); err != nil {
				break
			}
			v, ok := sqlkit.Add(t, s)
			if !ok {
				err = errSumOverflow
				break
			}
			out[k] = v
		}
		err = errors.Join(err, rows.Err(), rows.Close())
	}
	if err == nil {
		return out, nil
	}
	if !isOverflow(err) && !errors.Is(err, errSumOverflow) {
		return nil, err
	}
	var bad []error
	for _, k := range keys {
		var t int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce((SELECT total FROM totals WHERE key = ?), 0)`, k).Scan(&t); err != nil {
			return nil, err
		}
		s, _, err := tail(ctx, tx, k)
		if err != nil {
			return nil, err
		}
		if s.Add(s, big.NewInt(t)); !s.IsInt64() {
			bad = append(bad, sqlkit.Overflow(k))
			continue
		}
		out[k] = s.Int64()
	}
	return out, errors.Join(bad...)
}

var errSumOverflow = errors.New("sum overflow")

// ExactMulti implements durable.Log, in one read transaction (one
// snapshot).
func (db *DB) ExactMulti(ctx context.Context, keys []string) (map[string]int64, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return map[string]int64{}, nil
	}
	var out map[string]int64
	err := db.inReadTx(ctx, "exact", func(tx *sql.Tx) error {
		var err error
		out, err = exact(ctx, tx, keys)
		return err
	})
	return out, err
}
