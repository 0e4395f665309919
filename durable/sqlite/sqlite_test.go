package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/durabletest"
	"github.com/hotcount/hotcount/durable/sqlite"
)

func open(t *testing.T) durable.Backend {
	dir := durabletest.Memo(t, "dir", func() any { return t.TempDir() }).(string)
	db, err := sqlite.Open(context.Background(), sqlite.Config{
		Dir:         dir,
		DedupWindow: durabletest.DedupWindow,
		Clock:       durabletest.Clock(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestConformance(t *testing.T) { durabletest.Run(t, open) }

func TestOpenDefaultsAndVersion(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "nested", "data")
	cfg := sqlite.Config{Dir: dir}
	for range 2 {
		db, err := sqlite.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(dir, sqlite.DefaultFileName); db.Path() != want {
			t.Fatalf("Path = %q, want %q", db.Path(), want)
		}
		v, err := db.Version(ctx)
		if err != nil || v != sqlite.SchemaVersion {
			t.Fatalf("Version = %d, %v; want %d", v, err, sqlite.SchemaVersion)
		}
		db.Close()
	}
	if cfg.Path != "" {
		t.Fatal("Open mutated the caller's Config")
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	raw, err := sql.Open("sqlite", filepath.Join(dir, sqlite.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`INSERT INTO schema_version (version, applied_ns) VALUES (999, 0)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if _, err := sqlite.Open(ctx, sqlite.Config{Dir: dir}); !errors.Is(err, durable.ErrSchemaVersion) {
		t.Fatalf("Open of a newer schema err = %v, want ErrSchemaVersion", err)
	}
}

func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []sqlite.Config{
		{Path: filepath.Join(t.TempDir(), "a?b.db")},
		{Dir: t.TempDir(), DedupWindow: -1},
		{Dir: t.TempDir(), BusyTimeout: -1},
		{Dir: t.TempDir(), Readers: -1},
	} {
		if _, err := sqlite.Open(ctx, cfg); !errors.Is(err, durable.ErrInvalidConfig) {
			t.Errorf("Open(%+v) err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
