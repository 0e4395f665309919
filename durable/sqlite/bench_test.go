package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/durabletest"
	"github.com/hotcount/hotcount/durable/sqlite"
)

func benchDB(b *testing.B) *sqlite.DB {
	db, err := sqlite.Open(context.Background(), sqlite.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// bulkIngest inserts the rows into copies of ids and events (same columns
// and indexes, empty at first) in a second file, with one prepared statement per
// table in one transaction (synchronous=FULL, as the backend).
func bulkIngest(dir string) durabletest.Ingest {
	return func(ctx context.Context, ids []durabletest.IDRow, events []durabletest.EventRow) (time.Duration, error) {
		db, err := sql.Open("sqlite", dir+"/bulk.db?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
		if err != nil {
			return 0, err
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS ids (key TEXT NOT NULL, id TEXT NOT NULL, delta INTEGER,
				seen_ns INTEGER NOT NULL, PRIMARY KEY (key, id)) WITHOUT ROWID;
			CREATE INDEX IF NOT EXISTS ids_seen ON ids (seen_ns);
			CREATE TABLE IF NOT EXISTS events (key TEXT NOT NULL, delta INTEGER NOT NULL, at_ns INTEGER NOT NULL, n INTEGER NOT NULL);
			CREATE INDEX IF NOT EXISTS events_key ON events (key);`); err != nil {
			return 0, err
		}
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		is, err := tx.PrepareContext(ctx, `INSERT INTO ids (key, id, delta, seen_ns) VALUES (?, ?, ?, ?)`)
		if err != nil {
			return 0, err
		}
		for _, r := range ids {
			if _, err := is.ExecContext(ctx, r.Key, r.ID, r.Delta, r.SeenNs); err != nil {
				return 0, err
			}
		}
		es, err := tx.PrepareContext(ctx, `INSERT INTO events (key, delta, at_ns, n) VALUES (?, ?, ?, ?)`)
		if err != nil {
			return 0, err
		}
		for _, r := range events {
			if _, err := es.ExecContext(ctx, r.Key, r.Delta, r.AtNs, r.N); err != nil {
				return 0, err
			}
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
}

// BenchmarkDurableSQLite: acknowledged durable increments/s through a
// Committer (synchronous=FULL) against a bulk insert of the same rows in
// one transaction, in one run (see durabletest.BenchDurable).
func BenchmarkDurableSQLite(b *testing.B) {
	for _, keys := range []int{1, durabletest.SpreadKeys} {
		for _, callers := range []int{32, 256, 1024} {
			b.Run(fmt.Sprintf("keys=%d/callers=%d", keys, callers), func(b *testing.B) {
				durabletest.BenchDurable(b, benchDB(b), durable.CommitterConfig{}, callers, keys, bulkIngest(b.TempDir()))
			})
		}
	}
}

// BenchmarkSingleInsertSQLite: one transaction per increment.
func BenchmarkSingleInsertSQLite(b *testing.B) {
	for _, p := range []int{16, 128} {
		b.Run(fmt.Sprintf("par=%d", p), func(b *testing.B) {
			durabletest.BenchSingleInsert(b, benchDB(b), p)
		})
	}
}
