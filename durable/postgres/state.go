package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
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

// ClearCounter implements durable.Lifecycle in one transaction. It holds
// the rollup lock shared, its counter's checkpoint bucket exclusively and
// the magnitude gate as a batch checked exactly does, so that the batches
// in flight commit before it deletes (see the package documentation).
func (db *DB) ClearCounter(ctx context.Context, key string, at time.Time) error {
	return db.clear(ctx, key, at, false)
}

// ClearEnded implements durable.Lifecycle as ClearCounter does.
func (db *DB) ClearEnded(ctx context.Context, key string, at time.Time) error {
	return db.clear(ctx, key, at, true)
}

func (db *DB) clear(ctx context.Context, key string, at time.Time, ended bool) error {
	if err := sqlkit.ClearKey(key); err != nil {
		return err
	}
	if err := db.check(); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1, $2), pg_advisory_xact_lock($1, $3)`,
			db.locks, lockRollup, bucket(key)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, gateExact); err != nil {
			return err
		}
		return sqlkit.Clear(ctx, conn{tx}, dialect, key, at, db.clock.Now(), ended)
	})
	return wrap("clear", err)
}

// Stats implements durable.Lifecycle: row counts, and
// pg_total_relation_size (tables, indexes, TOAST) of every table of the
// schema.
func (db *DB) Stats(ctx context.Context) (durable.Stats, error) {
	if err := db.check(); err != nil {
		return durable.Stats{}, err
	}
	var st durable.Stats
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var err error
		if st.Rows, err = sqlkit.CountRows(ctx, conn{tx}); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = current_schema() AND c.relkind = 'r'`).Scan(&st.Bytes)
	})
	return st, wrap("stats", err)
}

// SetDeadlines implements durable.Lifecycle in one transaction: one
// statement removes the zero deadlines, one upserts the others.
func (db *DB) SetDeadlines(ctx context.Context, deadlines map[string]time.Time, onlyNew bool) error {
	if err := sqlkit.CheckDeadlines(deadlines); err != nil {
		return err
	}
	if err := db.check(); err != nil || len(deadlines) == 0 {
		return err
	}
	var gone, keys []string
	var ats []int64
	for k, at := range deadlines {
		if at.IsZero() {
			gone = append(gone, k)
			continue
		}
		keys, ats = append(keys, k), append(ats, sqlkit.Nanos(at))
	}
	conflict := `UPDATE SET at_ns = excluded.at_ns`
	if onlyNew {
		conflict = `NOTHING`
	}
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if len(gone) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM deadlines WHERE key = ANY($1::text[])`, gone); err != nil {
				return err
			}
		}
		if len(keys) == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO deadlines (key, at_ns)
			SELECT k, a FROM unnest($1::text[], $2::bigint[]) AS d (k, a)
			ON CONFLICT (key) DO `+conflict, keys, ats)
		return err
	})
	return wrap("set deadlines", err)
}
