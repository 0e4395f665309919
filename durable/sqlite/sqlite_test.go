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
	"github.com/hotcount/hotcount/internal/dirlock"
)

func dir(t *testing.T) string {
	return durabletest.Memo(t, "dir", func() any { return t.TempDir() }).(string)
}

func open(t *testing.T) durable.Backend {
	db, err := sqlite.Open(context.Background(), sqlite.Config{
		Dir:                dir(t),
		DedupWindow:        durabletest.DedupWindow,
		TombstoneRetention: durabletest.TombstoneRetention,
		Clock:              durabletest.Clock(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// v1 is the schema of the previous release (schema version 1), exactly as
// its migration created it.
const v1 = `CREATE TABLE schema_version (
		version    INTEGER PRIMARY KEY,
		applied_ns INTEGER NOT NULL);
	INSERT INTO schema_version (version, applied_ns) VALUES (1, 0);
	CREATE TABLE checkpoints (
		key   TEXT PRIMARY KEY,
		total INTEGER NOT NULL,
		epoch INTEGER NOT NULL,
		at_ns INTEGER NOT NULL
	) WITHOUT ROWID;
	CREATE TABLE totals (
		key   TEXT PRIMARY KEY,
		total INTEGER NOT NULL
	) WITHOUT ROWID;
	CREATE TABLE events (
		key   TEXT NOT NULL,
		delta INTEGER NOT NULL,
		at_ns INTEGER NOT NULL,
		n     INTEGER NOT NULL
	);
	CREATE INDEX events_key ON events (key);
	CREATE TABLE ids (
		id      TEXT PRIMARY KEY,
		seen_ns INTEGER NOT NULL
	) WITHOUT ROWID;
	CREATE INDEX ids_seen ON ids (seen_ns);
	CREATE TABLE meta (
		key        TEXT PRIMARY KEY,
		data       BLOB NOT NULL,
		updated_ns INTEGER NOT NULL
	) WITHOUT ROWID;`

// oldStore writes a version 1 store in the test's data dir.
type oldStore struct{ db *sql.DB }

func old(t *testing.T) durabletest.Old {
	db, err := sql.Open("sqlite", filepath.Join(dir(t), sqlite.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return oldStore{db}
}

func (o oldStore) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := o.db.Exec(q, args...); err != nil {
		t.Fatal(err)
	}
}

func (o oldStore) Create(t *testing.T) { o.exec(t, v1) }
func (o oldStore) AddID(t *testing.T, id string, seen int64) {
	o.exec(t, `INSERT INTO ids (id, seen_ns) VALUES (?, ?)`, id, seen)
}
func (o oldStore) AddEvent(t *testing.T, key string, delta, at, n int64) {
	o.exec(t, `INSERT INTO events (key, delta, at_ns, n) VALUES (?, ?, ?, ?)`, key, delta, at, n)
}
func (o oldStore) AddTotal(t *testing.T, key string, total int64) {
	o.exec(t, `INSERT INTO totals (key, total) VALUES (?, ?)`, key, total)
}

func TestConformance(t *testing.T) { durabletest.Run(t, open, old) }

func TestRegionParts(t *testing.T) { durabletest.RunRegions(t, open) }

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
		{Dir: t.TempDir(), TombstoneRetention: -1},
		{Dir: t.TempDir(), BusyTimeout: -1},
		{Dir: t.TempDir(), Readers: -1},
	} {
		if _, err := sqlite.Open(ctx, cfg); !errors.Is(err, durable.ErrInvalidConfig) {
			t.Errorf("Open(%+v) err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOpenFolder: a folder opened exclusively refuses a second opener
// until Close releases its lock; shared openers run side by side.
func TestOpenFolder(t *testing.T) {
	ctx := context.Background()
	d := t.TempDir()
	db, err := sqlite.OpenFolder(ctx, d, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.OpenFolder(ctx, d, false); !errors.Is(err, dirlock.ErrLocked) {
		t.Fatalf("second opener beside an exclusive one: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	a, err := sqlite.OpenFolder(ctx, d, false)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlite.OpenFolder(ctx, d, false)
	if err != nil {
		t.Fatalf("two shared openers: %v", err)
	}
	defer b.Close()
	if a.Path() != filepath.Join(d, sqlite.DefaultFileName) {
		t.Fatalf("path %s", a.Path())
	}
}
