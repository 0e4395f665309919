package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
)

// SaveCheckpoints implements durable.Checkpoints.
func (db *DB) SaveCheckpoints(ctx context.Context, cps []durable.Checkpoint) error {
	if err := durable.CheckCheckpoints(cps); err != nil {
		return err
	}
	cps = durable.LatestCheckpoints(cps)
	if len(cps) == 0 {
		return db.check()
	}
	return db.inTx(ctx, "save checkpoints", func(tx *sql.Tx) error {
		for lo := 0; lo < len(cps); lo += chunk {
			part := cps[lo:min(lo+chunk, len(cps))]
			args := make([]any, 0, 4*len(part))
			for _, c := range part {
				args = append(args, c.Key, c.Total, int64(c.Epoch), durable.Nanos(c.At))
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoints (key, total, epoch, at_ns) VALUES `+
				placeholders(len(part), 4)+`
				ON CONFLICT (key) DO UPDATE SET total = excluded.total, epoch = excluded.epoch, at_ns = excluded.at_ns
				WHERE excluded.epoch > checkpoints.epoch
				   OR (excluded.epoch = checkpoints.epoch AND excluded.at_ns >= checkpoints.at_ns)`,
				args...); err != nil {
				return err
			}
		}
		return nil
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
	list, err := json.Marshal(keys)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", durable.ErrInvalidCheckpoint, err)
	}
	rows, err := db.r.QueryContext(ctx, `SELECT key, total, epoch, at_ns FROM checkpoints
		WHERE key IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return nil, durable.Unavailable("load checkpoints", err)
	}
	cps, err := scanCheckpoints(rows)
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
	rows, err := db.r.QueryContext(ctx, `SELECT key, total, epoch, at_ns FROM checkpoints
		WHERE substr(key, 1, ?) = ?`, utf8.RuneCountInString(prefix), prefix)
	if err != nil {
		return nil, durable.Unavailable("list checkpoints", err)
	}
	cps, err := scanCheckpoints(rows)
	sort.Slice(cps, func(i, j int) bool { return cps[i].Key < cps[j].Key })
	return cps, err
}

func scanCheckpoints(rows *sql.Rows) ([]durable.Checkpoint, error) {
	defer rows.Close()
	var out []durable.Checkpoint
	for rows.Next() {
		var c durable.Checkpoint
		var epoch, at int64
		if err := rows.Scan(&c.Key, &c.Total, &epoch, &at); err != nil {
			return nil, durable.Unavailable("checkpoints", err)
		}
		c.Epoch, c.At = uint64(epoch), durable.FromNanos(at)
		out = append(out, c)
	}
	return out, durable.Unavailable("checkpoints", rows.Err())
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
		return nil, durable.Unavailable("load meta", err)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}
