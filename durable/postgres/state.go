package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
	"github.com/hotcount/hotcount/keyspace"
)

// SaveCheckpoints implements durable.Checkpoints in one transaction: shared
// locks on its counters' buckets, then one upsert that skips checkpoints
// of counters cleared at or after them.
func (db *DB) SaveCheckpoints(ctx context.Context, cps []durable.Checkpoint) error {
	rows, err := sqlkit.CheckpointRows(cps)
	if err != nil {
		return err
	}
	if err := db.check(); err != nil || len(rows) == 0 {
		return err
	}
	n := len(rows)
	keys, counters := make([]string, n), make([]string, n)
	totals, epochs, ats := make([]int64, n), make([]int64, n), make([]int64, n)
	var buckets []int32
	for i, r := range rows {
		keys[i], counters[i], totals[i], epochs[i], ats[i] = r.Key, r.Counter, r.Total, r.Epoch, r.At
		buckets = append(buckets, bucket(r.Counter))
	}
	slices.Sort(buckets)
	buckets = slices.Compact(buckets)
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1, b)
			FROM (SELECT b FROM unnest($2::int[]) AS b ORDER BY b) s`, db.locks, buckets); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO checkpoints (key, total, epoch, at_ns)
			SELECT k, t, e, a FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[]) AS c (k, t, e, a, ctr)
			WHERE NOT EXISTS (SELECT 1 FROM clears WHERE clears.key = c.ctr AND clears.at_ns >= c.a)
			ON CONFLICT (key) DO UPDATE SET total = excluded.total, epoch = excluded.epoch, at_ns = excluded.at_ns
			WHERE (excluded.epoch, excluded.at_ns) >= (checkpoints.epoch, checkpoints.at_ns)`,
			keys, totals, epochs, ats, counters)
		return err
	})
	return wrap("save checkpoints", err)
}

// LoadCheckpoints implements durable.Checkpoints.
func (db *DB) LoadCheckpoints(ctx context.Context, keys []string) (map[string]durable.Checkpoint, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	out := make(map[string]durable.Checkpoint, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	cps, err := db.queryCheckpoints(ctx, `SELECT key, total, epoch, at_ns FROM checkpoints
		WHERE key = ANY($1::text[])`, keys)
	for _, c := range cps {
		out[c.Key] = c
	}
	return out, err
}

// ListCheckpoints implements durable.Checkpoints.
func (db *DB) ListCheckpoints(ctx context.Context, prefix string) ([]durable.Checkpoint, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	return db.queryCheckpoints(ctx, `SELECT key, total, epoch, at_ns FROM checkpoints
		WHERE starts_with(key, $1) ORDER BY key`, prefix)
}

func (db *DB) queryCheckpoints(ctx context.Context, sql string, arg any) ([]durable.Checkpoint, error) {
	rows, _ := db.pool.Query(ctx, sql, arg)
	var out []durable.Checkpoint
	var key string
	var total, epoch, at int64
	_, err := pgx.ForEachRow(rows, []any{&key, &total, &epoch, &at}, func() error {
		out = append(out, sqlkit.Checkpoint(key, total, epoch, at))
		return nil
	})
	return out, wrap("checkpoints", err)
}

// SaveMeta implements durable.Meta.
func (db *DB) SaveMeta(ctx context.Context, key string, data []byte) error {
	if !durable.ValidKey(key) {
		return fmt.Errorf("%w: meta key %q", keyspace.ErrInvalidKey, key)
	}
	if err := db.check(); err != nil {
		return err
	}
	if data == nil {
		data = []byte{}
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO meta (key, data, updated_ns) VALUES ($1, $2, $3)
		ON CONFLICT (key) DO UPDATE SET data = excluded.data, updated_ns = excluded.updated_ns`,
		key, data, db.clock.Now().UnixNano())
	return wrap("save meta", err)
}

// LoadMeta implements durable.Meta.
func (db *DB) LoadMeta(ctx context.Context, key string) ([]byte, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	var data []byte
	err := db.pool.QueryRow(ctx, `SELECT data FROM meta WHERE key = $1`, key).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: meta %q", durable.ErrNotFound, key)
	}
	if err != nil {
		return nil, wrap("load meta", err)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// ClearCounter implements durable.Lifecycle in one transaction. It holds
// the rollup lock shared and its counter's checkpoint bucket exclusively;
// it deletes the bounds rows first, which waits for the batches of the key
// in flight, so that the deletes of its log rows that follow see them.
func (db *DB) ClearCounter(ctx context.Context, key string, at time.Time) error {
	if err := sqlkit.ClearKey(key); err != nil {
		return err
	}
	if err := db.check(); err != nil {
		return err
	}
	lo, hi := sqlkit.SubKeyRange(key)
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1, $2), pg_advisory_xact_lock($1, $3)`,
			db.locks, lockRollup, bucket(key)); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `SELECT key FROM checkpoints WHERE key >= $1 AND key < $2`, lo, hi)
		subs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		mine := []string{key}
		for _, s := range subs {
			if sqlkit.CounterOf(s) == key {
				mine = append(mine, s)
			}
		}
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`DELETE FROM bounds WHERE key = $1`, []any{key}},
			{`DELETE FROM events WHERE key = $1`, []any{key}},
			{`DELETE FROM totals WHERE key = $1`, []any{key}},
			{`DELETE FROM meta WHERE key = $1`, []any{key}},
			{`DELETE FROM checkpoints WHERE key = ANY($1::text[])`, []any{mine}},
			{`INSERT INTO clears (key, at_ns, cleared_ns) VALUES ($1, $2, $3)
				ON CONFLICT (key) DO UPDATE SET at_ns = greatest(clears.at_ns, excluded.at_ns),
					cleared_ns = excluded.cleared_ns`, []any{key, sqlkit.Nanos(at), db.clock.Now().UnixNano()}},
		} {
			if _, err := tx.Exec(ctx, q.sql, q.args...); err != nil {
				return err
			}
		}
		return nil
	})
	return wrap("clear", err)
}

// Tombstones implements durable.Lifecycle.
func (db *DB) Tombstones(ctx context.Context, keys []string) (map[string]time.Time, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rows, _ := db.pool.Query(ctx, `SELECT key, at_ns FROM clears WHERE key = ANY($1::text[])`, keys)
	var k string
	var at int64
	_, err := pgx.ForEachRow(rows, []any{&k, &at}, func() error {
		out[k] = sqlkit.FromNanos(at)
		return nil
	})
	return out, wrap("tombstones", err)
}

// Stats implements durable.Lifecycle: row counts from one snapshot, and
// pg_total_relation_size (tables, indexes, TOAST) of every table of the
// schema.
func (db *DB) Stats(ctx context.Context) (durable.Stats, error) {
	if err := db.check(); err != nil {
		return durable.Stats{}, err
	}
	q := `SELECT coalesce((SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind = 'r'), 0)::bigint`
	for _, t := range sqlkit.Tables {
		q += `, (SELECT count(*) FROM ` + t + `)`
	}
	st := durable.Stats{Rows: make(map[string]int64, len(sqlkit.Tables))}
	counts := make([]int64, len(sqlkit.Tables))
	dst := []any{&st.Bytes}
	for i := range counts {
		dst = append(dst, &counts[i])
	}
	if err := db.pool.QueryRow(ctx, q).Scan(dst...); err != nil {
		return durable.Stats{}, wrap("stats", err)
	}
	for i, t := range sqlkit.Tables {
		st.Rows[t] = counts[i]
	}
	return st, nil
}
