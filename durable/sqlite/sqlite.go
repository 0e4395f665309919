// Package sqlite is the embedded durable backend: one SQLite file
// (modernc.org/sqlite, pure Go) in WAL mode.
//
// All writes go through one connection (SQLite has one writer at a time;
// queueing in Go is cheaper than busy-waiting on the file lock), each in a
// BEGIN IMMEDIATE transaction. Reads use a separate pool of read-only
// connections, which WAL lets run beside the writer; each read is one
// statement and so one snapshot.
//
// Tables: checkpoints, totals (rolled-up sums), events (the log tail, one
// row per key per batch, indexed by key), ids (idempotency ids with
// first-seen time, pruned after the dedup window), meta, and
// schema_version, which records the migrations applied at Open. Times are
// stored as Unix nanoseconds. Commits use synchronous=FULL unless
// Config.RelaxedSync is set.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/clock"

	_ "modernc.org/sqlite" // driver "sqlite"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/store"
)

// DefaultFileName is the database file created in Config.Dir.
const DefaultFileName = "hotcount.db"

// DefaultBusyTimeout is how long a connection waits for a lock held by
// another process when Config.BusyTimeout is zero.
const DefaultBusyTimeout = 5 * time.Second

// Config configures Open. The zero value opens ./hotcount.db.
type Config struct {
	// Path is the database file. When empty it is Dir/DefaultFileName.
	Path string
	// Dir is the data directory used when Path is empty (default ".");
	// it is created if missing.
	Dir string
	// DedupWindow is how long event IDs are remembered (default
	// durable.DefaultDedupWindow).
	DedupWindow time.Duration
	// BusyTimeout is SQLite's busy_timeout (default DefaultBusyTimeout).
	BusyTimeout time.Duration
	// RelaxedSync sets synchronous=NORMAL instead of FULL: a commit then
	// survives a process crash but not a power loss or OS crash.
	RelaxedSync bool
	// Readers is the size of the read pool (default 4).
	Readers int
	// Clock is the time source for first-seen times, pruning and events
	// without At (default the system clock).
	Clock clock.Clock
}

// DB is a SQLite durable backend. It implements durable.Backend.
type DB struct {
	w, r   *sql.DB
	window time.Duration
	clock  clock.Clock
	path   string
	closed atomic.Bool
}

var _ durable.Backend = (*DB)(nil)

// Open opens (creating if needed) the database file and applies pending
// schema migrations.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	window, err := durable.Window(cfg.DedupWindow)
	if err != nil {
		return nil, err
	}
	if cfg.BusyTimeout < 0 || cfg.Readers < 0 {
		return nil, fmt.Errorf("%w: negative sqlite setting", durable.ErrInvalidConfig)
	}
	busy := cfg.BusyTimeout
	if busy == 0 {
		busy = DefaultBusyTimeout
	}
	readers := cfg.Readers
	if readers == 0 {
		readers = 4
	}
	path := cfg.Path
	if path == "" {
		dir := cfg.Dir
		if dir == "" {
			dir = "."
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, durable.Unavailable("mkdir", err)
		}
		path = filepath.Join(dir, DefaultFileName)
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("%w: sqlite path %q contains ? or #", durable.ErrInvalidConfig, path)
	}
	syncMode := "FULL"
	if cfg.RelaxedSync {
		syncMode = "NORMAL"
	}
	common := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(%s)",
		busy.Milliseconds(), syncMode)
	w, err := sql.Open("sqlite", path+"?"+common+"&_txlock=immediate")
	if err != nil {
		return nil, durable.Unavailable("open", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	db := &DB{w: w, window: window, clock: clock.OrReal(cfg.Clock), path: path}
	if err := db.migrate(ctx); err != nil {
		w.Close()
		return nil, err
	}
	r, err := sql.Open("sqlite", path+"?"+common+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, durable.Unavailable("open", err)
	}
	r.SetMaxOpenConns(readers)
	r.SetMaxIdleConns(readers)
	db.r = r
	return db, nil
}

// Path returns the database file.
func (db *DB) Path() string { return db.path }

// Close closes both pools. It is idempotent.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	return errors.Join(db.r.Close(), db.w.Close())
}

func (db *DB) check() error {
	if db.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// migrations are applied in order; migrations[i] brings the schema to
// version i+1. Never edit an applied one: append a new one.
var migrations = []string{
	`CREATE TABLE checkpoints (
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
	) WITHOUT ROWID;`,
}

// SchemaVersion is the schema version this build migrates to.
var SchemaVersion = len(migrations)

// migrate applies pending migrations in one transaction.
func (db *DB) migrate(ctx context.Context) error {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return durable.Unavailable("migrate", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER PRIMARY KEY,
		applied_ns INTEGER NOT NULL)`); err != nil {
		return durable.Unavailable("migrate", err)
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&have); err != nil {
		return durable.Unavailable("migrate", err)
	}
	if have > len(migrations) {
		return fmt.Errorf("%w: %s has version %d, this build knows %d",
			durable.ErrSchemaVersion, db.path, have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			return durable.Unavailable(fmt.Sprintf("migration %d", v), err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, applied_ns) VALUES (?, ?)`,
			v, db.clock.Now().UnixNano()); err != nil {
			return durable.Unavailable("migrate", err)
		}
	}
	return durable.Unavailable("migrate", tx.Commit())
}

// Version returns the schema version recorded in the database.
func (db *DB) Version(ctx context.Context) (int, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	var v int
	err := db.r.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&v)
	return v, durable.Unavailable("version", err)
}

// inTx runs fn in a write transaction and commits it.
func (db *DB) inTx(ctx context.Context, op string, fn func(*sql.Tx) error) error {
	if err := db.check(); err != nil {
		return err
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return durable.Unavailable(op, err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		if errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrOverflow) {
			return err
		}
		return durable.Unavailable(op, err)
	}
	return durable.Unavailable(op, tx.Commit())
}

// placeholders returns "(?,?),(?,?)" for rows rows of cols columns.
func placeholders(rows, cols int) string {
	one := "(" + strings.Repeat("?,", cols-1) + "?)"
	var b strings.Builder
	b.Grow(rows * (len(one) + 1))
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(one)
	}
	return b.String()
}
