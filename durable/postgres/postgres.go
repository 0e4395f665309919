// Package postgres is the PostgreSQL durable backend (pgx/v5, pgxpool).
//
// Every write is one statement or one transaction. A batch of events is a
// single statement: the batch arrives as arrays (unnest), its IDs are
// inserted into ids with ON CONFLICT DO NOTHING RETURNING, and a
// data-modifying CTE inserts the events whose IDs came back (new), so a
// batch of thousands costs one round trip and one commit. Rollup is one
// statement too (DELETE ... RETURNING feeding an upsert of totals), so Exact,
// a single statement reading totals and events from one snapshot, never sees
// an event both folded and unfolded.
//
// The write path is kept lean: a batch adds one events row per key (its
// sum), and per event only its ids row, whose first-seen time has a BRIN
// index (nearly free to maintain, since rows arrive in time order) for
// pruning. Concurrent batches insert their IDs in sorted order, so batches
// that share IDs (a client retrying through another process) wait for each
// other instead of deadlocking. events is indexed by key only; Rollup scans
// the tail.
//
// Config.Schema puts the tables in their own schema (created if missing; set
// as search_path on every pooled connection), which lets tests and tenants
// share one database. Migrations run at Open in one transaction under an
// advisory lock, so concurrent Opens apply each migration once.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/store"
)

// Config configures Open.
type Config struct {
	// URL is the connection string (postgres://... or key=value); required.
	URL string
	// Schema, when set, holds the tables and is the search_path of every
	// connection; it is created if missing. Empty means the server's
	// default search_path (usually public). Lower-case letters, digits and
	// _, at most 63, not starting with a digit.
	Schema string
	// DedupWindow is how long event IDs are remembered (default
	// durable.DefaultDedupWindow).
	DedupWindow time.Duration
	// MaxConns is the pool size (default: pgxpool's, or pool_max_conns in
	// URL).
	MaxConns int32
	// Clock is the time source for first-seen times, pruning and events
	// without At (default the system clock).
	Clock clock.Clock
}

// DB is a PostgreSQL durable backend. It implements durable.Backend.
type DB struct {
	pool   *pgxpool.Pool
	window time.Duration
	clock  clock.Clock
	schema string
	closed atomic.Bool
}

var (
	_ durable.Backend    = (*DB)(nil)
	_ durable.Concurrent = (*DB)(nil)
)

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects, creates Config.Schema if needed and applies pending
// migrations.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	window, err := durable.Window(cfg.DedupWindow)
	if err != nil {
		return nil, err
	}
	if cfg.URL == "" {
		return nil, fmt.Errorf("%w: postgres URL is required", durable.ErrInvalidConfig)
	}
	if cfg.Schema != "" && !schemaRE.MatchString(cfg.Schema) {
		return nil, fmt.Errorf("%w: schema name %q", durable.ErrInvalidConfig, cfg.Schema)
	}
	if cfg.MaxConns < 0 {
		return nil, fmt.Errorf("%w: negative MaxConns", durable.ErrInvalidConfig)
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", durable.ErrInvalidConfig, err)
	}
	if cfg.Schema != "" {
		pc.ConnConfig.RuntimeParams["search_path"] = cfg.Schema
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, durable.Unavailable("connect", err)
	}
	db := &DB{pool: pool, window: window, clock: clock.OrReal(cfg.Clock), schema: cfg.Schema}
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// AppendConcurrency implements durable.Concurrent: a Committer overlaps up
// to 4 batch commits (fewer on a smaller pool), which PostgreSQL flushes to
// the WAL together.
func (db *DB) AppendConcurrency() int {
	return int(min(4, max(1, db.pool.Config().MaxConns/2)))
}

// Close closes the pool. It is idempotent.
func (db *DB) Close() error {
	if !db.closed.Swap(true) {
		db.pool.Close()
	}
	return nil
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
		key   text COLLATE "C" PRIMARY KEY,
		total bigint NOT NULL,
		epoch bigint NOT NULL,
		at_ns bigint NOT NULL
	);
	CREATE TABLE totals (
		key   text COLLATE "C" PRIMARY KEY,
		total bigint NOT NULL
	);
	CREATE TABLE events (
		key   text COLLATE "C" NOT NULL,
		delta bigint NOT NULL,
		at_ns bigint NOT NULL,
		n     bigint NOT NULL
	);
	CREATE INDEX events_key ON events (key);
	CREATE TABLE ids (
		id      text COLLATE "C" PRIMARY KEY,
		seen_ns bigint NOT NULL
	);
	CREATE INDEX ids_seen ON ids USING brin (seen_ns);
	CREATE TABLE meta (
		key        text COLLATE "C" PRIMARY KEY,
		data       bytea NOT NULL,
		updated_ns bigint NOT NULL
	);`,
}

// SchemaVersion is the schema version this build migrates to.
var SchemaVersion = len(migrations)

// migrate creates the schema and applies pending migrations in one
// transaction, serialised by an advisory lock per schema.
func (db *DB) migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('hotcount.durable.' || $1))`, db.schema); err != nil {
			return err
		}
		if db.schema != "" {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{db.schema}.Sanitize()); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
			version    integer PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&have); err != nil {
			return err
		}
		if have > len(migrations) {
			return fmt.Errorf("%w: schema %q has version %d, this build knows %d",
				durable.ErrSchemaVersion, db.schema, have, len(migrations))
		}
		for v := have + 1; v <= len(migrations); v++ {
			if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("migration %d: %w", v, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_version (version) VALUES ($1)`, v); err != nil {
				return err
			}
		}
		return nil
	})
	return wrap("migrate", err)
}

// Version returns the schema version recorded in the database.
func (db *DB) Version(ctx context.Context) (int, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	var v int
	err := db.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&v)
	return v, wrap("version", err)
}

// wrap passes named errors through and marks the rest ErrUnavailable.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	for _, named := range []error{durable.ErrSchemaVersion, store.ErrUnavailable, store.ErrClosed} {
		if errors.Is(err, named) {
			return err
		}
	}
	return durable.Unavailable(op, err)
}
