package postgres

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hotcount/hotcount/durable"
)

const appendSQL = `WITH input AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS t (id, key, delta, at_ns)
	), fresh AS (
		INSERT INTO ids (id, seen_ns) SELECT id, $5 FROM input
		ON CONFLICT DO NOTHING RETURNING id
	), added AS (
		INSERT INTO events (key, delta, at_ns, n)
		SELECT key, sum(delta)::bigint, max(at_ns), count(*) FROM input
		WHERE id IN (SELECT id FROM fresh) GROUP BY key
	)
	SELECT id FROM fresh`

// AppendEvents implements durable.Log in one statement (one transaction,
// committed before the rows are fully read). The new events of a batch are
// stored as one row per key (their sum, at their latest At).
func (db *DB) AppendEvents(ctx context.Context, events []durable.Event) ([]bool, error) {
	if err := durable.CheckEvents(events); err != nil {
		return nil, err
	}
	if err := db.check(); err != nil {
		return nil, err
	}
	first, dup := durable.FirstSeen(events)
	if len(first) == 0 {
		return dup, nil
	}
	// Insert IDs in sorted order: concurrent batches that share IDs then
	// take their index locks in the same order and cannot deadlock.
	sort.Slice(first, func(a, b int) bool { return events[first[a]].ID < events[first[b]].ID })
	now := db.clock.Now().UnixNano()
	ids := make([]string, len(first))
	keys := make([]string, len(first))
	deltas := make([]int64, len(first))
	ats := make([]int64, len(first))
	for j, i := range first {
		e := events[i]
		ids[j], keys[j], deltas[j], ats[j] = e.ID, e.Key, e.Delta, now
		if !e.At.IsZero() {
			ats[j] = e.At.UnixNano()
		}
	}
	rows, err := db.pool.Query(ctx, appendSQL, ids, keys, deltas, ats, now)
	if err != nil {
		return nil, wrap("append", err)
	}
	fresh := make(map[string]struct{}, len(first))
	var id string
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		fresh[id] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, wrap("append", err)
	}
	for _, i := range first {
		if _, ok := fresh[events[i].ID]; !ok {
			dup[i] = true
		}
	}
	return dup, nil
}

const rollupSQL = `WITH moved AS (
		DELETE FROM events WHERE at_ns < $1 RETURNING key, delta, n
	), agg AS (
		SELECT key, sum(delta) AS s, sum(n) AS n FROM moved GROUP BY key
	), folded AS (
		INSERT INTO totals (key, total) SELECT key, s::bigint FROM agg
		ON CONFLICT (key) DO UPDATE SET total = totals.total + excluded.total
	)
	SELECT coalesce(sum(n), 0)::bigint FROM agg`

// Rollup implements durable.Log.
func (db *DB) Rollup(ctx context.Context, before time.Time) (int, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	var folded int64
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, rollupSQL, before.UnixNano()).Scan(&folded); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM ids WHERE seen_ns < $1`, db.clock.Now().Add(-db.window).UnixNano())
		return err
	})
	if err != nil {
		return 0, wrap("rollup", err)
	}
	return int(folded), nil
}

// Exact implements durable.Log.
func (db *DB) Exact(ctx context.Context, key string) (int64, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	var n int64
	err := db.pool.QueryRow(ctx, `SELECT (coalesce((SELECT total FROM totals WHERE key = $1), 0) +
		coalesce((SELECT sum(delta) FROM events WHERE key = $1), 0))::bigint`, key).Scan(&n)
	return n, wrap("exact", err)
}

// ExactMulti implements durable.Log, in one statement (one snapshot).
func (db *DB) ExactMulti(ctx context.Context, keys []string) (map[string]int64, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT k.k, (coalesce(t.total, 0) +
		coalesce((SELECT sum(delta) FROM events e WHERE e.key = k.k), 0))::bigint
		FROM (SELECT DISTINCT unnest($1::text[]) COLLATE "C" AS k) k LEFT JOIN totals t ON t.key = k.k`, keys)
	if err != nil {
		return nil, wrap("exact", err)
	}
	var k string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error {
		out[k] = n
		return nil
	})
	return out, wrap("exact", err)
}

// Keys implements durable.Log.
func (db *DB) Keys(ctx context.Context, prefix string) ([]string, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, `SELECT key FROM totals WHERE starts_with(key, $1)
		UNION SELECT key FROM events WHERE starts_with(key, $1)`, prefix)
	if err != nil {
		return nil, wrap("keys", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, wrap("keys", err)
	}
	sort.Strings(out) // byte order, the same in every backend
	return out, nil
}
