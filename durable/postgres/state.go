package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
)

// SaveCheckpoints implements durable.Checkpoints in one statement.
func (db *DB) SaveCheckpoints(ctx context.Context, cps []durable.Checkpoint) error {
	if err := durable.CheckCheckpoints(cps); err != nil {
		return err
	}
	if err := db.check(); err != nil {
		return err
	}
	cps = durable.LatestCheckpoints(cps)
	if len(cps) == 0 {
		return nil
	}
	keys := make([]string, len(cps))
	totals := make([]int64, len(cps))
	epochs := make([]int64, len(cps))
	ats := make([]int64, len(cps))
	for i, c := range cps {
		keys[i], totals[i], epochs[i], ats[i] = c.Key, c.Total, int64(c.Epoch), durable.Nanos(c.At)
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO checkpoints (key, total, epoch, at_ns)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])
		ON CONFLICT (key) DO UPDATE SET total = excluded.total, epoch = excluded.epoch, at_ns = excluded.at_ns
		WHERE (excluded.epoch, excluded.at_ns) >= (checkpoints.epoch, checkpoints.at_ns)`,
		keys, totals, epochs, ats)
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
	cps, err := db.queryCheckpoints(ctx, `SELECT key, total, epoch, at_ns FROM checkpoints
		WHERE starts_with(key, $1)`, prefix)
	sort.Slice(cps, func(i, j int) bool { return cps[i].Key < cps[j].Key })
	return cps, err
}

func (db *DB) queryCheckpoints(ctx context.Context, sql string, arg any) ([]durable.Checkpoint, error) {
	rows, err := db.pool.Query(ctx, sql, arg)
	if err != nil {
		return nil, wrap("checkpoints", err)
	}
	var out []durable.Checkpoint
	var c durable.Checkpoint
	var epoch, at int64
	_, err = pgx.ForEachRow(rows, []any{&c.Key, &c.Total, &epoch, &at}, func() error {
		c.Epoch, c.At = uint64(epoch), durable.FromNanos(at)
		out = append(out, c)
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
