package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
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

// healKeys is the number of durable counters of BenchmarkHealListing
// (HOTCOUNT_BENCH_HEAL_KEYS overrides it: 1000000 for the figures of
// docs/benchmarks-log.md).
func healKeys(b *testing.B) int {
	n := 200_000
	if s := os.Getenv("HOTCOUNT_BENCH_HEAL_KEYS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			b.Fatalf("HOTCOUNT_BENCH_HEAL_KEYS=%q: not a positive number", s)
		}
	}
	return n
}

// BenchmarkHealListing: what one heal sweep reads of the log's keys from
// a store of healKeys durable counters (3 log rows each, written with SQL
// and vacuumed, as autovacuum leaves them), side by side in one run: the
// whole list (Keys, as a sweep read it before: it then kept the first
// 100,000) and the pages of one sweep (up to 100,000 keys, KeysAfter
// 10,000 at a time). ns/op is the time of the sweep's listing, B/op and
// allocs/op what it allocates in this process.
func BenchmarkHealListing(b *testing.B) {
	const perSweep, page = 100_000, 10_000
	n := healKeys(b)
	db, schema := benchDB(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	events := pgx.Identifier{schema, "events"}.Sanitize()
	if _, err := conn.Exec(ctx, `INSERT INTO `+events+` (key, delta, at_ns, n)
		SELECT 'bench:' || lpad(i::text, 8, '0'), 1, j, 1 FROM generate_series(1, $1::int) i, generate_series(1, 3) j`, n); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE `+events); err != nil {
		b.Fatal(err)
	}
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			all, err := db.Keys(ctx, "")
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, 0, min(len(all), perSweep))
			for _, k := range all {
				if len(keys) == perSweep {
					break
				}
				keys = append(keys, k)
			}
			if len(keys) != min(n, perSweep) {
				b.Fatalf("%d keys", len(keys))
			}
		}
	})
	b.Run("paged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			got, after := 0, ""
			for got < perSweep {
				keys, err := db.KeysAfter(ctx, "", after, min(page, perSweep-got))
				if err != nil {
					b.Fatal(err)
				}
				got += len(keys)
				if len(keys) < min(page, perSweep-got+len(keys)) {
					break
				}
				after = keys[len(keys)-1]
			}
			if got != min(n, perSweep) {
				b.Fatalf("%d keys", got)
			}
		}
	})
}
