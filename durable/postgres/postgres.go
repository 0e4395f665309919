// Package postgres is the PostgreSQL durable backend (pgx/v5, pgxpool).
//
// # Appending a batch
//
// A batch of events arrives as arrays (unnest) and costs one round trip in
// the common case: one pipeline of BEGIN, the lock of table gate, the
// insert of its IDs, one statement that raises the store's magnitude,
// inserts its log rows and checks the magnitude, and COMMIT; its
// statements are prepared once per connection and its arrays encoded
// straight into one buffer in PostgreSQL's binary format. The IDs are
// inserted optimistically, without ON CONFLICT (as cheap as COPY, where ON
// CONFLICT costs about twice as much), sorted by (key, id), so concurrent
// batches that share IDs wait for each other instead of deadlocking. When
// an ID is already there (a retry) the transaction is rolled back and done
// again with INSERT ... ON CONFLICT DO NOTHING RETURNING and a look-up of
// the stored deltas.
//
// # The overflow check
//
// A counter's total must stay in int64. The store keeps one magnitude,
// table magnitude (numeric, so that no raise is lost to saturation):
// stripe -1 is at least the largest |rollup total| of any key, and stripes
// 0-15 add up to at least the sum of |delta| of all log rows; so every
// key's |total| is at most the sum of all rows. A batch
// whose events bring at most sqlkit.FastDelta raises one stripe by that
// (concurrent batches of one process raise distinct stripes, so they do
// not wait for each other's row lock) and passes when the sum, its own
// raise included, is at most sqlkit.FastBound (2^62): the batches in
// flight that it cannot see bring at most 2^40 each, and even 2^18 of them
// (more than PostgreSQL can run at once) stay far from 2^63. This costs one
// row per batch, whatever its keys, where a bound per key cost one row per
// key and batch.
//
// Any other batch (a larger one, or any batch once the magnitude is above
// the cheap bound: the next ones go there at once, until a batch checked
// exactly finds it low again) is checked exactly, key by key: it locks its
// keys' rows in bounds (stripe -1), in key order, sums each key's log and
// rollup total, lets each event through only while the running total stays
// in int64, and raises the magnitude by what it applied. Batches checked
// exactly take the gate in SHARE mode and cheap ones in ROW EXCLUSIVE
// mode, so a cheap batch never runs beside one checked exactly: a cheap
// batch cannot miss a large raise in flight, and an exact sum cannot miss
// a cheap batch of its key in flight. Both kinds take their locks in one
// order (gate, IDs, key rows, magnitude), so batches never deadlock.
// Rollup lowers the magnitude by the sum of |delta| it folds and raises
// stripe -1 to the largest |total| it wrote, in its statement; a clear
// takes the gate as a batch checked exactly does. Between rollups the
// magnitude only over-estimates (stripe -1 only rises, a clear removes rows
// without lowering it); a rollup that finds it above the cheap bound holds
// every batch and clear off (gate in EXCLUSIVE mode, taken first) and
// measures it afresh from the log and the totals, so a store goes back to
// cheap checks once its counters near the limit are cleared. While one
// stays near the limit, every batch of the store is checked exactly (a
// sum of the log tail per key and batch).
//
// A batch adds one events row per key (its sum), and per event only its
// ids row, whose first-seen time has a BRIN index (nearly free to
// maintain, since rows arrive in time order) for pruning. events is
// indexed by key only; Rollup scans the tail.
//
// # Rollup, clears and checkpoints
//
// Rollup is one statement (DELETE ... RETURNING feeding an upsert of
// totals), so Exact, a single statement reading totals and events from one
// snapshot, never sees an event both folded and unfolded. Rollups take an
// advisory lock, so that two never fold at once, and ClearCounter takes it
// shared, so that a clear never races a fold of the same key. SaveCheckpoints
// takes shared advisory locks on the buckets (64) of its counters and
// ClearCounter the one of its counter exclusively, so a save that read no
// tombstone cannot commit a checkpoint after the clear removed the others.
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
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
)

// Config configures Open. The zero value of every field but URL is its
// documented default.
type Config struct {
	// URL is the connection string (postgres://... or key=value); required.
	URL string
	// Schema, when set, holds the tables and is the search_path of every
	// connection; it is created if missing. Empty means the server's
	// default search_path (usually public). Lower-case letters, digits and
	// _, at most 63, not starting with a digit.
	Schema string
	// DedupWindow is how long an event ID is remembered after it was first
	// seen (default durable.DefaultDedupWindow); a retry after it counts
	// again.
	DedupWindow time.Duration
	// TombstoneRetention is how long the tombstone of a cleared counter is
	// kept (default durable.DefaultTombstoneRetention).
	TombstoneRetention time.Duration
	// MaxConns is the pool size (default: pgxpool's, or pool_max_conns in
	// URL).
	MaxConns int32
	// Clock is the time source for first-seen times, pruning and events
	// without At (default the system clock).
	Clock clock.Clock
}

// common is embedded by DB (an alias, so that the field is unexported).
type common = sqlkit.Common

// DB is a PostgreSQL durable backend. It implements durable.Backend.
type DB struct {
	*common
	pool   *pgxpool.Pool
	keep   sqlkit.Retention
	clock  clock.Clock
	schema string
	id     string
	locks  int32 // advisory lock class of this schema
	stripe *sqlkit.Stripe
	legacy atomic.Int64 // until when (Unix ns) unscoped IDs may be found
	exact  atomic.Bool  // the store's magnitude is too high for the cheap check
	// bufs holds *[]byte buffers for the arrays of the common batch (see
	// fast); they hold nothing once the batch is sent.
	bufs sync.Pool
}

var (
	_ durable.Backend    = (*DB)(nil)
	_ durable.Concurrent = (*DB)(nil)
)

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects, creates Config.Schema if needed and applies pending
// migrations.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	keep, err := sqlkit.NewRetention(cfg.DedupWindow, cfg.TombstoneRetention)
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
		return nil, fmt.Errorf("%w: %w", durable.ErrInvalidConfig, err)
	}
	if cfg.Schema != "" {
		pc.ConnConfig.RuntimeParams["search_path"] = cfg.Schema
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, wrap("connect", err)
	}
	h := fnv.New32a()
	h.Write([]byte("hotcount.durable." + cfg.Schema))
	db := &DB{
		pool:   pool,
		keep:   keep,
		clock:  clock.OrReal(cfg.Clock),
		schema: cfg.Schema,
		locks:  int32(h.Sum32()),
		stripe: sqlkit.NewStripe(rand.Uint32()),
	}
	db.bufs.New = func() any { return new([]byte) }
	db.common = sqlkit.NewCommon(sqlkit.CommonConfig{Read: conn{pool}, Write: conn{pool}, Dialect: dialect, Keep: keep,
		Now: db.clock.Now, Wrap: wrap, ExactMulti: db.ExactMulti})
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// AppendConcurrency implements durable.Concurrent: a Committer overlaps up
// to 4 batch commits, which PostgreSQL flushes to the WAL together; no more
// than GOMAXPROCS (at least 2) nor half the pool. Each batch in flight
// keeps a backend busy, and batches beyond the cores there are to run them
// are smaller (more per-batch work) and contend for the cores: on 2
// cores running both the callers and PostgreSQL, 2 batches in flight used
// about 20% less PostgreSQL CPU per increment than 4 and committed more.
func (db *DB) AppendConcurrency() int {
	return int(min(4, max(1, db.pool.Config().MaxConns/2), int32(max(2, runtime.GOMAXPROCS(0)))))
}

// StoreID implements durable.Backend.
func (db *DB) StoreID() string { return db.id }

// Close closes the pool. It is idempotent.
func (db *DB) Close() error {
	if sqlkit.Shut(db.common) {
		db.pool.Close()
	}
	return nil
}

func (db *DB) check() error { return sqlkit.Check(db.common) }

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

	// 2: IDs scoped to their key, with their delta; the IDs stored so far
	// keep an empty key and no delta (they match any key until pruned), and
	// a writer of the previous release, which names no key, now fails
	// instead of recording unscoped IDs. Bounds, tombstones and the store's
	// identity.
	`ALTER TABLE ids ADD COLUMN key text COLLATE "C" NOT NULL DEFAULT '';
	ALTER TABLE ids ALTER COLUMN key DROP DEFAULT;
	ALTER TABLE ids ADD COLUMN delta bigint;
	ALTER TABLE ids DROP CONSTRAINT ids_pkey;
	ALTER TABLE ids ADD PRIMARY KEY (key, id);
	CREATE TABLE bounds (
		key    text COLLATE "C" NOT NULL,
		stripe smallint NOT NULL,
		mag    bigint NOT NULL,
		PRIMARY KEY (key, stripe)
	) WITH (fillfactor = 70);
	INSERT INTO bounds (key, stripe, mag)
		SELECT key, 0, least(sum(abs(delta::numeric)), 9223372036854775807)::bigint FROM events GROUP BY key;
	CREATE TABLE clears (
		key        text COLLATE "C" PRIMARY KEY,
		at_ns      bigint NOT NULL,
		cleared_ns bigint NOT NULL
	);
	CREATE INDEX clears_cleared ON clears (cleared_ns);
	CREATE TABLE store_info (id text NOT NULL);
	INSERT INTO store_info (id) VALUES (replace(gen_random_uuid()::text, '-', ''));
	CREATE FUNCTION bound_exceeded(k text) RETURNS boolean LANGUAGE plpgsql AS $$
	BEGIN
		RAISE EXCEPTION USING ERRCODE = 'HC001', MESSAGE = k;
	END $$;`,

	// 3: deadlines of counters, for the clean-up of expired ones.
	`CREATE TABLE deadlines (
		key   text COLLATE "C" PRIMARY KEY,
		at_ns bigint NOT NULL
	);
	CREATE INDEX deadlines_at ON deadlines (at_ns);`,

	// 4: one magnitude for the whole store instead of bounds rows per key
	// and batch (see the package documentation). Its stripes 0-15 start at
	// the sum of |delta| of the log, stripe -1 at the largest |rollup
	// total|. gate is only locked. bounds keeps only the keys' lock rows
	// (stripe -1); the lock waits for the batches of the previous release
	// in flight, and the check makes theirs fail from now on (they would
	// not raise the magnitude).
	`LOCK TABLE bounds IN ACCESS EXCLUSIVE MODE;
	CREATE TABLE gate ();
	DELETE FROM bounds;
	ALTER TABLE bounds ADD CONSTRAINT bounds_locks_only CHECK (stripe = -1);
	CREATE TABLE magnitude (
		stripe smallint PRIMARY KEY,
		mag    numeric NOT NULL
	);
	INSERT INTO magnitude (stripe, mag) SELECT s, 0 FROM generate_series(1, 15) AS s;
	INSERT INTO magnitude (stripe, mag) SELECT 0, coalesce(sum(abs(delta::numeric)), 0) FROM events;
	INSERT INTO magnitude (stripe, mag) SELECT -1, coalesce(max(abs(total::numeric)), 0) FROM totals;`,

	// 5: region parts (see durable.Regions): per counter and origin
	// region, its contribution and the fence a clear set on it.
	`CREATE TABLE region_parts (
		key    text COLLATE "C" NOT NULL,
		origin text COLLATE "C" NOT NULL,
		kind   smallint NOT NULL,
		epoch  bigint NOT NULL,
		lease  bigint NOT NULL,
		seq    bigint NOT NULL,
		value  bigint NOT NULL,
		at_ns  bigint NOT NULL,
		PRIMARY KEY (key, origin, kind)
	);
	CREATE INDEX region_parts_origin ON region_parts (origin, kind, key);`,
}

// SchemaVersion is the schema version this build migrates to.
var SchemaVersion = len(migrations)

// querier is what a pool, a connection and a transaction of pgx share.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// conn adapts a querier to sqlkit.Conn.
type conn struct{ q querier }

func (c conn) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (c conn) Query(ctx context.Context, q string, args []any, row func(func(...any) error) error) error {
	rows, _ := c.q.Query(ctx, q, args...)
	defer rows.Close()
	return sqlkit.Each(rows, row)
}

// dialect is PostgreSQL's: text arrays for lists.
var dialect = sqlkit.Dialect{
	In:     func(col string, n int) string { return fmt.Sprintf("%s = ANY($%d::text[])", col, n) },
	List:   func(s []string) any { return s },
	Prefix: func(col string, n int) string { return fmt.Sprintf("starts_with(%s, $%d)", col, n) },
}

// migrate creates the schema and applies pending migrations in one
// transaction, serialised by an advisory lock per schema, and reads the
// store's identity and how long unscoped IDs stay relevant.
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
		err := sqlkit.Migrate(ctx, conn{tx}, sqlkit.Schema{
			VersionTable: `CREATE TABLE IF NOT EXISTS schema_version (
				version    integer PRIMARY KEY,
				applied_at timestamptz NOT NULL DEFAULT now())`,
			Record: `INSERT INTO schema_version (version, applied_at)
				VALUES ($1, to_timestamp($2::bigint::double precision / 1e9))`,
			Now:   db.clock.Now().UnixNano(),
			Steps: migrations,
			Where: fmt.Sprintf("schema %q", db.schema),
		})
		if err != nil {
			return err
		}
		var last *int64
		if err := tx.QueryRow(ctx, `SELECT id, (SELECT max(seen_ns) FROM ids WHERE key = '') FROM store_info`).Scan(&db.id, &last); err != nil {
			return err
		}
		if last != nil {
			db.legacy.Store(*last + int64(db.keep.IDs))
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

// wrap classifies an error of operation op (see sqlkit.Classify).
func wrap(op string, err error) error { return sqlkit.Classify(op, err, transient) }

// transient reports whether err may go away on retry: any error that is
// not the server's answer (a lost connection, a pool or network failure),
// and server errors of the classes connection exception (08), transaction
// rollback (40: serialization failure, deadlock), insufficient resources
// (53), operator intervention (57, e.g. shutdown), system error (58) and
// lock not available (55P03). The server's other answers (a constraint,
// a missing table, a bad value) are permanent.
func transient(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true
	}
	switch pe.Code[:2] {
	case "08", "40", "53", "57", "58":
		return true
	}
	return pe.Code == "55P03"
}

// boundExceeded reports whether the statement found the store's magnitude
// too high for the cheap check (function bound_exceeded).
func boundExceeded(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "HC001"
}

// isUnique reports whether err is a unique violation.
func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// Advisory lock objects within the class db.locks.
const (
	lockRollup  = 0 // exclusive: Rollup; shared: ClearCounter
	lockBuckets = 64
)

// bucket returns the advisory lock object of counter for checkpoints.
func bucket(counter string) int32 {
	h := fnv.New32a()
	h.Write([]byte(counter))
	return 1 + int32(h.Sum32()%lockBuckets)
}
