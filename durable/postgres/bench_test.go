package postgres_test

import (
	"fmt"
	"testing"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/durabletest"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/internal/testenv"
)

func benchDB(b *testing.B) *postgres.DB {
	db := openCfg(b, postgres.Config{URL: testenv.PostgresURL(), Schema: testenv.PostgresSchema(b), MaxConns: 16})
	b.Cleanup(func() { db.Close() })
	return db
}

// BenchmarkCommitterPostgres: group commit of one hot key, with
// parallelism×GOMAXPROCS callers each waiting for its commit, and 1 or 4
// (the default) batches committing at once.
func BenchmarkCommitterPostgres(b *testing.B) {
	for _, p := range []int{16, 128} {
		for _, inflight := range []int{1, 4} {
			b.Run(fmt.Sprintf("par=%d/inflight=%d", p, inflight), func(b *testing.B) {
				durabletest.BenchCommitter(b, benchDB(b), durable.CommitterConfig{MaxInFlight: inflight}, p)
			})
		}
	}
}

// BenchmarkSingleInsertPostgres: one transaction per increment, the same
// callers, 16 pooled connections.
func BenchmarkSingleInsertPostgres(b *testing.B) {
	for _, p := range []int{16, 128} {
		b.Run(fmt.Sprintf("par=%d", p), func(b *testing.B) {
			durabletest.BenchSingleInsert(b, benchDB(b), p)
		})
	}
}
