package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/durabletest"
	"github.com/hotcount/hotcount/durable/postgres"
)

// testURL is the test database; HOTCOUNT_TEST_POSTGRES overrides it.
func testURL() string {
	if u := os.Getenv("HOTCOUNT_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// freshSchema returns a new schema name, dropped when t ends.
func freshSchema(t testing.TB) string {
	var b [6]byte
	rand.Read(b[:])
	name := "hc_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testURL())
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

func openCfg(t testing.TB, cfg postgres.Config) *postgres.DB {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := postgres.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open %s: %v (is PostgreSQL running at %s?)", cfg.Schema, err, cfg.URL)
	}
	return db
}

func open(t *testing.T) durable.Backend {
	schema := durabletest.Memo(t, "schema", func() any { return freshSchema(t) }).(string)
	return openCfg(t, postgres.Config{
		URL:         testURL(),
		Schema:      schema,
		DedupWindow: durabletest.DedupWindow,
		Clock:       durabletest.Clock(t),
		MaxConns:    8,
	})
}

func TestConformance(t *testing.T) { durabletest.Run(t, open) }

func TestMigrationVersions(t *testing.T) {
	ctx := context.Background()
	schema := freshSchema(t)
	cfg := postgres.Config{URL: testURL(), Schema: schema}
	for range 2 {
		db := openCfg(t, cfg)
		v, err := db.Version(ctx)
		db.Close()
		if err != nil || v != postgres.SchemaVersion {
			t.Fatalf("Version = %d, %v; want %d", v, err, postgres.SchemaVersion)
		}
	}
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "schema_version"}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != postgres.SchemaVersion {
		t.Fatalf("schema_version has %d rows after two opens, want %d", n, postgres.SchemaVersion)
	}
	// A database migrated by a newer build is refused.
	if _, err := conn.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "schema_version"}.Sanitize()+` (version) VALUES (999)`); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Open(ctx, cfg); !errors.Is(err, durable.ErrSchemaVersion) {
		t.Fatalf("Open of a newer schema err = %v, want ErrSchemaVersion", err)
	}
}

func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []postgres.Config{
		{},
		{URL: testURL(), Schema: "Bad-Name"},
		{URL: testURL(), DedupWindow: -time.Second},
		{URL: testURL(), MaxConns: -1},
	} {
		if _, err := postgres.Open(ctx, cfg); !errors.Is(err, durable.ErrInvalidConfig) {
			t.Errorf("Open(%+v) err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
