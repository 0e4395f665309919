package sqlite

import (
	"context"
	"database/sql"
	"os"
	"time"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
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

// ClearCounter implements durable.Lifecycle in one transaction.
func (db *DB) ClearCounter(ctx context.Context, key string, at time.Time) error {
	return db.clear(ctx, key, at, false)
}

// ClearEnded implements durable.Lifecycle in one transaction.
func (db *DB) ClearEnded(ctx context.Context, key string, at time.Time) error {
	return db.clear(ctx, key, at, true)
}

func (db *DB) clear(ctx context.Context, key string, at time.Time, ended bool) error {
	if err := sqlkit.ClearKey(key); err != nil {
		return err
	}
	return db.inTx(ctx, "clear", func(tx *sql.Tx) error {
		return sqlkit.Clear(ctx, conn{tx}, dialect, key, at, db.clock.Now(), ended)
	})
}

// Stats implements durable.Lifecycle: row counts, and the pages of the
// database file plus the write-ahead log.
func (db *DB) Stats(ctx context.Context) (durable.Stats, error) {
	var st durable.Stats
	err := db.inReadTx(ctx, "stats", func(tx *sql.Tx) error {
		var err error
		if st.Rows, err = sqlkit.CountRows(ctx, conn{tx}); err != nil {
			return err
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

// SetDeadlines implements durable.Lifecycle in one transaction.
func (db *DB) SetDeadlines(ctx context.Context, deadlines map[string]time.Time, onlyNew bool) error {
	if err := sqlkit.CheckDeadlines(deadlines); err != nil {
		return err
	}
	if err := db.check(); err != nil || len(deadlines) == 0 {
		return err
	}
	return db.inTx(ctx, "set deadlines", func(tx *sql.Tx) error {
		for k, at := range deadlines {
			if err := sqlkit.SetDeadline(ctx, conn{tx}, k, at, onlyNew); err != nil {
				return err
			}
		}
		return nil
	})
}
