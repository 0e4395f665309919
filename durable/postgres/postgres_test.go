package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/durabletest"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/internal/testenv"
)

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
	schema := durabletest.Memo(t, "schema", func() any { return testenv.PostgresSchema(t) }).(string)
	return openCfg(t, postgres.Config{
		URL:         testenv.PostgresURL(),
		Schema:      schema,
		DedupWindow: durabletest.DedupWindow,
		Clock:       durabletest.Clock(t),
		MaxConns:    8,
	})
}

func TestConformance(t *testing.T) { durabletest.Run(t, open) }

func TestMigrationVersions(t *testing.T) {
	ctx := context.Background()
	schema := testenv.PostgresSchema(t)
	cfg := postgres.Config{URL: testenv.PostgresURL(), Schema: schema}
	for range 2 {
		db := openCfg(t, cfg)
		v, err := db.Version(ctx)
		db.Close()
		if err != nil || v != postgres.SchemaVersion {
			t.Fatalf("Version = %d, %v; want %d", v, err, postgres.SchemaVersion)
		}
	}
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
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
		{URL: testenv.PostgresURL(), Schema: "Bad-Name"},
		{URL: testenv.PostgresURL(), DedupWindow: -time.Second},
		{URL: testenv.PostgresURL(), MaxConns: -1},
	} {
		if _, err := postgres.Open(ctx, cfg); !errors.Is(err, durable.ErrInvalidConfig) {
			t.Errorf("Open(%+v) err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
