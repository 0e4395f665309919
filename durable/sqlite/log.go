package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/hotcount/hotcount/durable"
)

// chunk is the most rows per multi-row statement (3 parameters a row stays
// far below SQLite's 32766-variable limit).
const chunk = 500

// AppendEvents implements durable.Log: IDs go into ids with INSERT ... ON
// CONFLICT DO NOTHING RETURNING, and only the returned (new) ones become
// events, all in one transaction.
func (db *DB) AppendEvents(ctx context.Context, events []durable.Event) ([]bool, error) {
	if err := durable.CheckEvents(events); err != nil {
		return nil, err
	}
	first, dup := durable.FirstSeen(events)
	if len(first) == 0 {
		return dup, db.check()
	}
	now := db.clock.Now().UnixNano()
	err := db.inTx(ctx, "append", func(tx *sql.Tx) error {
		fresh := make(map[string]struct{}, len(first))
		for lo := 0; lo < len(first); lo += chunk {
			part := first[lo:min(lo+chunk, len(first))]
			args := make([]any, 0, 2*len(part))
			for _, i := range part {
				args = append(args, events[i].ID, now)
			}
			rows, err := tx.QueryContext(ctx, `INSERT INTO ids (id, seen_ns) VALUES `+
				placeholders(len(part), 2)+` ON CONFLICT DO NOTHING RETURNING id`, args...)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				fresh[id] = struct{}{}
			}
			if err := rows.Close(); err != nil {
				return err
			}
		}
		for _, i := range first {
			if _, ok := fresh[events[i].ID]; !ok {
				dup[i] = true
			}
		}
		rows := durable.Aggregate(events, dup, now)
		for lo := 0; lo < len(rows); lo += chunk {
			part := rows[lo:min(lo+chunk, len(rows))]
			args := make([]any, 0, 4*len(part))
			for _, r := range part {
				args = append(args, r.Key, r.Delta, r.At, r.N)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO events (key, delta, at_ns, n) VALUES `+
				placeholders(len(part), 4), args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return dup, nil
}

// Rollup implements durable.Log.
func (db *DB) Rollup(ctx context.Context, before time.Time) (int, error) {
	cut := before.UnixNano()
	expired := db.clock.Now().Add(-db.window).UnixNano()
	var folded int64
	err := db.inTx(ctx, "rollup", func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(n), 0) FROM events WHERE at_ns < ?`,
			cut).Scan(&folded); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO totals (key, total)
			SELECT key, sum(delta) FROM events WHERE at_ns < ? GROUP BY key
			ON CONFLICT (key) DO UPDATE SET total = total + excluded.total`, cut); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM events WHERE at_ns < ?`, cut); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM ids WHERE seen_ns < ?`, expired)
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(folded), nil
}

const exactSQL = `coalesce((SELECT total FROM totals WHERE key = k), 0) +
	coalesce((SELECT sum(delta) FROM events WHERE key = k), 0)`

// Exact implements durable.Log.
func (db *DB) Exact(ctx context.Context, key string) (int64, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	var n int64
	err := db.r.QueryRowContext(ctx, `SELECT `+exactSQL+` FROM (SELECT ? AS k)`, key).Scan(&n)
	return n, durable.Unavailable("exact", err)
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
	list, err := json.Marshal(keys)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", durable.ErrInvalidEvent, err)
	}
	rows, err := db.r.QueryContext(ctx, `SELECT k, `+exactSQL+
		` FROM (SELECT DISTINCT value AS k FROM json_each(?))`, string(list))
	if err != nil {
		return nil, durable.Unavailable("exact", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, durable.Unavailable("exact", err)
		}
		out[k] = n
	}
	return out, durable.Unavailable("exact", rows.Err())
}

// Keys implements durable.Log.
func (db *DB) Keys(ctx context.Context, prefix string) ([]string, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	n := utf8.RuneCountInString(prefix)
	rows, err := db.r.QueryContext(ctx, `SELECT key FROM totals WHERE substr(key, 1, ?1) = ?2
		UNION SELECT key FROM events WHERE substr(key, 1, ?1) = ?2`, n, prefix)
	if err != nil {
		return nil, durable.Unavailable("keys", err)
	}
	return scanKeys(rows)
}

func scanKeys(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, durable.Unavailable("keys", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, durable.Unavailable("keys", err)
	}
	sort.Strings(out) // byte order, the same in every backend
	return out, nil
}
