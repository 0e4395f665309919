package sqlite_test

import (
	"context"
	"fmt"
	"testing"

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

// BenchmarkCommitterSQLite: group commit of one hot key, with
// parallelism×GOMAXPROCS callers each waiting for its commit
// (synchronous=FULL).
func BenchmarkCommitterSQLite(b *testing.B) {
	for _, p := range []int{16, 128} {
		b.Run(fmt.Sprintf("par=%d", p), func(b *testing.B) {
			durabletest.BenchCommitter(b, benchDB(b), durable.CommitterConfig{}, p)
		})
	}
}

// BenchmarkSingleInsertSQLite: one transaction per increment, the same
// callers.
func BenchmarkSingleInsertSQLite(b *testing.B) {
	for _, p := range []int{16, 128} {
		b.Run(fmt.Sprintf("par=%d", p), func(b *testing.B) {
			durabletest.BenchSingleInsert(b, benchDB(b), p)
		})
	}
}
