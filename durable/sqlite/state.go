package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"
	"unicode/utf8"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
	"github.com/hotcount/hotcount/keyspace"
)

// SaveCheckpoints implements durable.Checkpoints.
func (db *DB) SaveCheckpoints(ctx context.Context, cps []durable.Checkpoint) error {
	rows, err := sqlkit.CheckpointRows(cps)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return db.check()
	}
	list := make([][5]any, len(rows))
	for i, r := range rows {
		list[i] = [5]any{r.Key, r.Total, r.Epoch, r.At, r.Counter}
	}
	return db.inTx(ctx, "save checkpoints", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO checkpoints (key, total, epoch, at_ns)
			SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(?) j
			WHERE NOT EXISTS (SELECT 1 FROM clears c WHERE c.key = j.value ->> 4 AND c.at_ns >= j.value ->> 3)
			ON CONFLICT (key) DO UPDATE SET total = excluded.total, epoch = excluded.epoch, at_ns = excluded.at_ns
			WHERE excluded.epoch > checkpoints.epoch
			   OR (excluded.epoch = checkpoints.epoch AND excluded.at_ns >= checkpoints.at_ns)`, jsonList(list))
		return err
	})
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
		WHERE key IN (SELECT value FROM json_each(?))`, jsonList(keys))
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
		WHERE substr(key, 1, ?) = ? ORDER BY key`, utf8.RuneCountInString(prefix), prefix)
}

func (db *DB) queryCheckpoints(ctx context.Context, q string, args ...any) ([]durable.Checkpoint, error) {
	rows, err := db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, wrap("checkpoints", err)
	}
	defer rows.Close()
	var out []durable.Checkpoint
	for rows.Next() {
		var key string
		var total, epoch, at int64
		if err := rows.Scan(&key, &total, &epoch, &at); err != nil {
			return nil, wrap("checkpoints", err)
		}
		out = append(out, sqlkit.Checkpoint(key, total, epoch, at))
	}
	return out, wrap("checkpoints", rows.Err())
}

// SaveMeta implements durable.Meta.
func (db *DB) SaveMeta(ctx context.Context, key string, data []byte) error {
	if !durable.ValidKey(key) {
		return fmt.Errorf("%w: meta key %q", keyspace.ErrInvalidKey, key)
	}
	if data == nil {
		data = []byte{}
	}
	return db.inTx(ctx, "save meta", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO meta (key, data, updated_ns) VALUES (?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET data = excluded.data, updated_ns = excluded.updated_ns`,
			key, data, db.clock.Now().UnixNano())
		return err
	})
}

// LoadMeta implements durable.Meta.
func (db *DB) LoadMeta(ctx context.Context, key string) ([]byte, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	var data []byte
	err := db.r.QueryRowContext(ctx, `SELECT data FROM meta WHERE key = ?`, key).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
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

// ClearCounter implements durable.Lifecycle in one transaction.
func (db *DB) ClearCounter(ctx context.Context, key string, at time.Time) error {
	if err := sqlkit.ClearKey(key); err != nil {
		return err
	}
	lo, hi := sqlkit.SubKeyRange(key)
	return db.inTx(ctx, "clear", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT key FROM checkpoints WHERE key >= ? AND key < ?`, lo, hi)
		if err != nil {
			return err
		}
		subs, err := scanStrings(rows)
		if err != nil {
			return err
		}
		mine := []string{key}
		for _, s := range subs {
			if sqlkit.CounterOf(s) == key {
				mine = append(mine, s)
			}
		}
		for _, q := range []string{
			`DELETE FROM totals WHERE key = ?1`,
			`DELETE FROM events WHERE key = ?1`,
			`DELETE FROM bounds WHERE key = ?1`,
			`DELETE FROM meta WHERE key = ?1`,
			`DELETE FROM checkpoints WHERE key IN (SELECT value FROM json_each(?2))`,
			`INSERT INTO clears (key, at_ns, cleared_ns) VALUES (?1, ?3, ?4)
				ON CONFLICT (key) DO UPDATE SET at_ns = max(at_ns, excluded.at_ns), cleared_ns = excluded.cleared_ns`,
		} {
			if _, err := tx.ExecContext(ctx, q, key, jsonList(mine), sqlkit.Nanos(at), db.clock.Now().UnixNano()); err != nil {
				return err
			}
		}
		return nil
	})
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
	rows, err := db.r.QueryContext(ctx, `SELECT key, at_ns FROM clears
		WHERE key IN (SELECT value FROM json_each(?))`, jsonList(keys))
	if err != nil {
		return nil, wrap("tombstones", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var at int64
		if err := rows.Scan(&k, &at); err != nil {
			return nil, wrap("tombstones", err)
		}
		out[k] = sqlkit.FromNanos(at)
	}
	return out, wrap("tombstones", rows.Err())
}

// Stats implements durable.Lifecycle: row counts, and the pages of the
// database file plus the write-ahead log.
func (db *DB) Stats(ctx context.Context) (durable.Stats, error) {
	st := durable.Stats{Rows: make(map[string]int64, len(sqlkit.Tables))}
	err := db.inReadTx(ctx, "stats", func(tx *sql.Tx) error {
		for _, t := range sqlkit.Tables {
			var n int64
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+t).Scan(&n); err != nil {
				return err
			}
			st.Rows[t] = n
		}
		return tx.QueryRowContext(ctx, `SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&st.Bytes)
	})
	if err != nil {
		return durable.Stats{}, err
	}
	if fi, err := os.Stat(db.path + "-wal"); err == nil {
		st.Bytes += fi.Size()
	}
	return st, nil
}
