package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/durabletest"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/internal/testenv"
)

func benchDB(b *testing.B) (*postgres.DB, string) {
	schema := testenv.PostgresSchema(b)
	db := openCfg(b, postgres.Config{URL: testenv.PostgresURL(), Schema: schema, MaxConns: 16})
	b.Cleanup(func() { db.Close() })
	return db, schema
}

// copyIngest COPYs the rows into copies of ids and events (same columns,
// indexes and storage, empty at first) in schema, in one transaction.
func copyIngest(schema string) durabletest.Ingest {
	created := false
	return func(ctx context.Context, ids []durabletest.IDRow, events []durabletest.EventRow) (time.Duration, error) {
		cfg, err := pgx.ParseConfig(testenv.PostgresURL())
		if err != nil {
			return 0, err
		}
		cfg.RuntimeParams["search_path"] = schema
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return 0, err
		}
		defer conn.Close(ctx)
		if !created {
			if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS copy_ids, copy_events;
				CREATE TABLE copy_ids (LIKE ids INCLUDING ALL);
				CREATE TABLE copy_events (LIKE events INCLUDING ALL)`); err != nil {
				return 0, err
			}
			created = true
		}
		start := time.Now()
		tx, err := conn.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"copy_ids"}, []string{"key", "id", "delta", "seen_ns"},
			pgx.CopyFromSlice(len(ids), func(i int) ([]any, error) {
				r := ids[i]
				return []any{r.Key, r.ID, r.Delta, r.SeenNs}, nil
			})); err != nil {
			return 0, err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"copy_events"}, []string{"key", "delta", "at_ns", "n"},
			pgx.CopyFromSlice(len(events), func(i int) ([]any, error) {
				r := events[i]
				return []any{r.Key, r.Delta, r.AtNs, r.N}, nil
			})); err != nil {
			return 0, err
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
}

// BenchmarkDurablePostgres: acknowledged durable increments/s through a
// Committer (default settings) against PostgreSQL's COPY of the same rows,
// in one run, for 32, 256 and 1,024 callers, one hot key or a spread of
// keys (see durabletest.BenchDurable); the ratio metric is the first over
// the second.
func BenchmarkDurablePostgres(b *testing.B) {
	for _, keys := range []int{1, durabletest.SpreadKeys} {
		for _, callers := range []int{32, 256, 1024} {
			b.Run(fmt.Sprintf("keys=%d/callers=%d", keys, callers), func(b *testing.B) {
				db, schema := benchDB(b)
				durabletest.BenchDurable(b, db, durable.CommitterConfig{}, callers, keys, copyIngest(schema))
			})
		}
	}
}

// BenchmarkSingleInsertPostgres: one transaction per increment, 16 pooled
// connections.
func BenchmarkSingleInsertPostgres(b *testing.B) {
	for _, p := range []int{16, 128} {
		b.Run(fmt.Sprintf("par=%d", p), func(b *testing.B) {
			db, _ := benchDB(b)
			durabletest.BenchSingleInsert(b, db, p)
		})
	}
}
