package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultPostgresURL is the test database when HOTCOUNT_TEST_POSTGRES is not
// set: the local server, trust auth, database test.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// PostgresURL returns the URL of the PostgreSQL that tests use:
// HOTCOUNT_TEST_POSTGRES, or DefaultPostgresURL. scripts/test sets the
// variable after starting the server.
func PostgresURL() string {
	if u := os.Getenv("HOTCOUNT_TEST_POSTGRES"); u != "" {
		return u
	}
	return DefaultPostgresURL
}

// PostgresSchema returns the name of a new, unused schema for one test
// ("hc_test_" and 12 random hex digits) and drops it, with everything in
// it, when the test ends; so no test depends on state another left.
func PostgresSchema(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "hc_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, PostgresURL())
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}
