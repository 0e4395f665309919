// Package sqlite is the embedded durable backend: one SQLite file
// (modernc.org/sqlite, pure Go) in WAL mode.
//
// All writes go through one connection (SQLite has one writer at a time;
// queueing in Go is cheaper than busy-waiting on the file lock), each in a
// BEGIN IMMEDIATE transaction. Reads use a separate pool of read-only
// connections, which WAL lets run beside the writer; each read is one
// statement, or one read transaction, and so one snapshot.
//
// Tables: checkpoints, totals (rolled-up sums), events (the log tail, one
// row per key per batch, indexed by key), ids (idempotency ids per
// (key, id) with their delta and first-seen time, pruned after the dedup
// window), bounds (each key's magnitude bound, see durable's package
// documentation), meta, clears (tombstones), store_info (the store's
// identity), and schema_version, which records the migrations applied at
// Open. Times are stored as Unix nanoseconds. Commits use synchronous=FULL
// unless Config.RelaxedSync is set.
//
// Since one writer runs at a time, an append reads what it needs (stored
// IDs, bounds) and then writes only what counts; nothing it reads can
// change under it.
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

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
	"github.com/hotcount/hotcount/internal/dirlock"
)

// Defaults of Config.
const (
	// DefaultFileName is the database file created in Config.Dir.
	DefaultFileName = "hotcount.db"
	// DefaultBusyTimeout is how long a connection waits for a lock held
	// by another process when Config.BusyTimeout is zero.
	DefaultBusyTimeout = 5 * time.Second
	// DefaultReaders is the size of the read pool when Config.Readers is
	// zero.
	DefaultReaders = 4
)

// Config configures Open. The zero value opens ./hotcount.db.
type Config struct {
	// Path is the database file. When empty it is Dir/DefaultFileName.
	Path string
	// Dir is the data directory used when Path is empty (default ".");
	// it is created if missing.
	Dir string
	// DedupWindow is how long an event ID is remembered after it was first
	// seen (default durable.DefaultDedupWindow); a retry after it counts
	// again.
	DedupWindow time.Duration
	// TombstoneRetention is how long the tombstone of a cleared counter is
	// kept (default durable.DefaultTombstoneRetention).
	TombstoneRetention time.Duration
	// BusyTimeout is SQLite's busy_timeout (default DefaultBusyTimeout).
	BusyTimeout time.Duration
	// RelaxedSync sets synchronous=NORMAL instead of FULL: a commit then
	// survives a process crash but not a power loss or OS crash.
	RelaxedSync bool
	// Readers is the size of the read pool (default DefaultReaders).
	Readers int
	// Clock is the time source for first-seen times, pruning and events
	// without At (default the system clock).
	Clock clock.Clock
}

// common is embedded by DB (an alias, so that the field is unexported).
type common = sqlkit.Common

// DB is a SQLite durable backend. It implements durable.Backend.
type DB struct {
	*common
	w, r   *sql.DB
	keep   sqlkit.Retention
	clock  clock.Clock
	path   string
	id     string
	legacy atomic.Int64  // until when (Unix ns) unscoped IDs may be found
	lock   *dirlock.Lock // the data folder's lock (OpenFolder), released by Close
}

var _ durable.Backend = (*DB)(nil)

// Open opens (creating if needed) the database file and applies pending
// schema migrations.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	keep, err := sqlkit.NewRetention(cfg.DedupWindow, cfg.TombstoneRetention)
	if err != nil {
		return nil, err
	}
	if cfg.BusyTimeout < 0 || cfg.Readers < 0 {
		return nil, fmt.Errorf("%w: negative sqlite setting", durable.ErrInvalidConfig)
	}
	busy := cmpOr(cfg.BusyTimeout, DefaultBusyTimeout)
	readers := cmpOr(cfg.Readers, DefaultReaders)
	path := cfg.Path
	if path == "" {
		dir := cmpOr(cfg.Dir, ".")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, wrap("mkdir", err)
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
	params := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(%s)",
		busy.Milliseconds(), syncMode)
	w, err := sql.Open("sqlite", path+"?"+params+"&_txlock=immediate")
	if err != nil {
		return nil, wrap("open", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	r, err := sql.Open("sqlite", path+"?"+params+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, wrap("open", err)
	}
	r.SetMaxOpenConns(readers)
	r.SetMaxIdleConns(readers)
	db := &DB{w: w, r: r, keep: keep, clock: clock.OrReal(cfg.Clock), path: path}
	db.common = sqlkit.NewCommon(sqlkit.CommonConfig{Read: conn{r}, Write: conn{w}, Dialect: dialect, Keep: keep,
		Now: db.clock.Now, Wrap: wrap, ExactMulti: db.ExactMulti})
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// OpenFolder opens the store in the data folder dir as `hotcount serve`
// and `hotcount proxy --data` do: it locks the folder first (see
// internal/dirlock), exclusively when exclusive (the process also keeps
// the embedded cache's file there, which lives in one process only),
// shared otherwise (processes in front of one Redis Cluster may share the
// folder), then opens dir's database file with the other settings at
// their defaults. A folder another process holds fails with an error that
// wraps dirlock.ErrLocked. Close releases the lock.
func OpenFolder(ctx context.Context, dir string, exclusive bool) (*DB, error) {
	take := dirlock.Shared
	if exclusive {
		take = dirlock.Exclusive
	}
	lock, err := take(dir)
	if err != nil {
		return nil, err
	}
	db, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		return nil, errors.Join(err, lock.Release())
	}
	db.lock = lock
	return db, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Path returns the database file.
func (db *DB) Path() string { return db.path }

// StoreID implements durable.Backend.
func (db *DB) StoreID() string { return db.id }

// Close closes both pools and releases the data folder's lock
// (OpenFolder). It is idempotent.
func (db *DB) Close() error {
	if !sqlkit.Shut(db.common) {
		return nil
	}
	err := errors.Join(db.r.Close(), db.w.Close())
	if db.lock != nil {
		err = errors.Join(err, db.lock.Release())
	}
	return err
}

func (db *DB) check() error { return sqlkit.Check(db.common) }

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

	// 2: IDs scoped to their key, with their delta; the IDs stored so far
	// keep an empty key and no delta (they match any key until pruned).
	// Bounds, tombstones and the store's identity.
	`CREATE TABLE ids_v2 (
		key     TEXT NOT NULL,
		id      TEXT NOT NULL,
		delta   INTEGER,
		seen_ns INTEGER NOT NULL,
		PRIMARY KEY (key, id)
	) WITHOUT ROWID;
	INSERT INTO ids_v2 (key, id, delta, seen_ns) SELECT '', id, NULL, seen_ns FROM ids;
	DROP TABLE ids;
	ALTER TABLE ids_v2 RENAME TO ids;
	CREATE INDEX ids_seen ON ids (seen_ns);
	CREATE TABLE bounds (
		key    TEXT NOT NULL,
		stripe INTEGER NOT NULL,
		mag    INTEGER NOT NULL,
		PRIMARY KEY (key, stripe)
	) WITHOUT ROWID;
	INSERT INTO bounds (key, stripe, mag)
		SELECT key, 0, CASE WHEN total(abs(CAST(delta AS REAL))) > 4e18 THEN 9223372036854775807
			ELSE CAST(total(abs(CAST(delta AS REAL))) AS INTEGER) + 1024 END
		FROM events GROUP BY key;
	CREATE TABLE clears (
		key        TEXT PRIMARY KEY,
		at_ns      INTEGER NOT NULL,
		cleared_ns INTEGER NOT NULL
	) WITHOUT ROWID;
	CREATE INDEX clears_cleared ON clears (cleared_ns);
	CREATE TABLE store_info (id TEXT NOT NULL);
	INSERT INTO store_info (id) VALUES (lower(hex(randomblob(16))));`,

	// 3: deadlines of counters, for the clean-up of expired ones.
	`CREATE TABLE deadlines (
		key   TEXT PRIMARY KEY,
		at_ns INTEGER NOT NULL
	) WITHOUT ROWID;
	CREATE INDEX deadlines_at ON deadlines (at_ns);`,

	// 4: region parts (see durable.Regions): per counter and origin
	// region, its contribution and the fence a clear set on it.
	`CREATE TABLE region_parts (
		key    TEXT NOT NULL,
		origin TEXT NOT NULL,
		kind   INTEGER NOT NULL,
		epoch  INTEGER NOT NULL,
		lease  INTEGER NOT NULL,
		seq    INTEGER NOT NULL,
		value  INTEGER NOT NULL,
		at_ns  INTEGER NOT NULL,
		PRIMARY KEY (key, origin, kind)
	) WITHOUT ROWID;
	CREATE INDEX region_parts_origin ON region_parts (origin, kind, key);`,
}

// SchemaVersion is the schema version this build migrates to.
var SchemaVersion = len(migrations)

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// conn adapts a querier to sqlkit.Conn.
type conn struct{ q querier }

func (c conn) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c conn) Query(ctx context.Context, q string, args []any, row func(func(...any) error) error) error {
	rows, err := c.q.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return sqlkit.Each(rows, row)
}

// dialect is SQLite's: JSON arrays for lists.
var dialect = sqlkit.Dialect{
	In:     func(col string, n int) string { return fmt.Sprintf("%s IN (SELECT value FROM json_each($%d))", col, n) },
	List:   func(s []string) any { return jsonList(s) },
	Prefix: func(col string, n int) string { return fmt.Sprintf("substr(%s, 1, length($%d)) = $%[2]d", col, n) },

	KeyBounds: true,
}

// migrate applies pending migrations in one transaction and reads the
// store's identity and how long unscoped IDs stay relevant.
func (db *DB) migrate(ctx context.Context) error {
	return db.inTx(ctx, "migrate", func(tx *sql.Tx) error {
		err := sqlkit.Migrate(ctx, conn{tx}, sqlkit.Schema{
			VersionTable: `CREATE TABLE IF NOT EXISTS schema_version (
				version    INTEGER PRIMARY KEY,
				applied_ns INTEGER NOT NULL)`,
			Record: `INSERT INTO schema_version (version, applied_ns) VALUES (?, ?)`,
			Now:    db.clock.Now().UnixNano(),
			Steps:  migrations,
			Where:  db.path,
		})
		if err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT id FROM store_info`).Scan(&db.id); err != nil {
			return err
		}
		var last sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT max(seen_ns) FROM ids WHERE key = ''`).Scan(&last); err != nil {
			return err
		}
		if last.Valid {
			db.legacy.Store(last.Int64 + int64(db.keep.IDs))
		}
		return nil
	})
}

// Version returns the schema version recorded in the database.
func (db *DB) Version(ctx context.Context) (int, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	var v int
	err := db.r.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&v)
	return v, wrap("version", err)
}

// inTx runs fn in a write transaction and commits it.
func (db *DB) inTx(ctx context.Context, op string, fn func(*sql.Tx) error) error {
	if err := db.check(); err != nil {
		return err
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return wrap(op, err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return wrap(op, err)
	}
	return wrap(op, tx.Commit())
}

// inReadTx runs fn in a read transaction (one snapshot).
func (db *DB) inReadTx(ctx context.Context, op string, fn func(*sql.Tx) error) error {
	if err := db.check(); err != nil {
		return err
	}
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return wrap(op, err)
	}
	defer tx.Rollback()
	return wrap(op, fn(tx))
}

// wrap classifies an error of operation op (see sqlkit.Classify).
func wrap(op string, err error) error { return sqlkit.Classify(op, err, transient) }

// transient reports whether a SQLite error may go away on retry: a busy
// or locked database, a full disk, an I/O error. Other engine errors
// (constraints, corruption, a missing table) are permanent; errors from
// outside the engine (the file system) are transient.
func transient(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return true
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR,
		sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_INTERRUPT, sqlite3.SQLITE_PROTOCOL:
		return true
	}
	return false
}

// isOverflow reports whether err is SQLite's integer overflow of sum().
func isOverflow(err error) bool {
	return err != nil && strings.Contains(err.Error(), "integer overflow")
}
