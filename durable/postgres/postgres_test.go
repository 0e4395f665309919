package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/durabletest"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/store"
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

func schema(t *testing.T) string {
	return durabletest.Memo(t, "schema", func() any { return testenv.PostgresSchema(t) }).(string)
}

func open(t *testing.T) durable.Backend {
	return openCfg(t, postgres.Config{
		URL:                testenv.PostgresURL(),
		Schema:             schema(t),
		DedupWindow:        durabletest.DedupWindow,
		TombstoneRetention: durabletest.TombstoneRetention,
		Clock:              durabletest.Clock(t),
		MaxConns:           8,
	})
}

// v1 is the schema of the previous release (schema version 1), exactly as
// its migration created it.
const v1 = `CREATE TABLE schema_version (
		version    integer PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now());
	INSERT INTO schema_version (version) VALUES (1);
	CREATE TABLE checkpoints (
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
	);`

// oldStore writes a version 1 store in the test's schema.
type oldStore struct{ conn *pgx.Conn }

func old(t *testing.T) durabletest.Old {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema(t)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return oldStore{conn}
}

func (o oldStore) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := o.conn.Exec(context.Background(), q, args...); err != nil {
		t.Fatal(err)
	}
}

func (o oldStore) Create(t *testing.T) {
	o.exec(t, `CREATE SCHEMA `+pgx.Identifier{schema(t)}.Sanitize())
	o.exec(t, v1)
}
func (o oldStore) AddID(t *testing.T, id string, seen int64) {
	o.exec(t, `INSERT INTO ids (id, seen_ns) VALUES ($1, $2)`, id, seen)
}
func (o oldStore) AddEvent(t *testing.T, key string, delta, at, n int64) {
	o.exec(t, `INSERT INTO events (key, delta, at_ns, n) VALUES ($1, $2, $3, $4)`, key, delta, at, n)
}
func (o oldStore) AddTotal(t *testing.T, key string, total int64) {
	o.exec(t, `INSERT INTO totals (key, total) VALUES ($1, $2)`, key, total)
}

func TestConformance(t *testing.T) { durabletest.Run(t, open, old) }

func TestRegionParts(t *testing.T) { durabletest.RunRegions(t, open) }

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
		{URL: testenv.PostgresURL(), TombstoneRetention: -time.Second},
		{URL: testenv.PostgresURL(), MaxConns: -1},
	} {
		if _, err := postgres.Open(ctx, cfg); !errors.Is(err, durable.ErrInvalidConfig) {
			t.Errorf("Open(%+v) err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestUpgradeMagnitude: a store of an earlier release whose rolled-up total
// is near the int64 limit still refuses exactly the increment that would
// leave int64 (the store's magnitude starts from its totals and log), and
// a writer of the earlier release, which raises per-key bounds rows
// instead of the magnitude, fails.
func TestUpgradeMagnitude(t *testing.T) {
	ctx := context.Background()
	o := old(t)
	o.Create(t)
	o.AddTotal(t, "n", math.MaxInt64-10)
	o.AddEvent(t, "m", -5, 1, 1)
	db := open(t)
	defer db.Close()
	res, err := db.AppendEvents(ctx, []durable.Event{{Key: "n", Delta: 10, ID: "a"}, {Key: "m", Delta: 1, ID: "b"}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("increments that fit: %v %+v", err, res)
	}
	res, err = db.AppendEvents(ctx, []durable.Event{{Key: "n", Delta: 1, ID: "c"}})
	if err != nil || !errors.Is(res[0].Err, store.ErrOverflow) {
		t.Fatalf("increment past int64: %v %+v, want ErrOverflow", err, res)
	}
	if got, err := db.Exact(ctx, "n"); err != nil || got != math.MaxInt64 {
		t.Fatalf("Exact = %d, %v", got, err)
	}
	o.(oldStore).conn.Exec(ctx, "SET search_path = "+schema(t))
	_, err = o.(oldStore).conn.Exec(ctx, `INSERT INTO bounds (key, stripe, mag) VALUES ('n', 3, 1)
		ON CONFLICT (key, stripe) DO UPDATE SET mag = bounds.mag + excluded.mag`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23514" {
		t.Fatalf("bounds row of an earlier release: err = %v, want a check violation", err)
	}
}

// TestOverflowTwoProcesses: two DBs (as two processes) on a new store; one
// brings a key to 5 below the int64 limit in one event (checked exactly),
// while small increments of the other (checked cheaply against the store's
// magnitude) race it: what was acknowledged is exactly the key's total,
// which stays in int64.
func TestOverflowTwoProcesses(t *testing.T) {
	ctx := context.Background()
	for round := range 8 {
		cfg := postgres.Config{URL: testenv.PostgresURL(), Schema: testenv.PostgresSchema(t), MaxConns: 8}
		big, small := openCfg(t, cfg), openCfg(t, cfg)
		var sum atomic.Int64
		var done atomic.Bool
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		add := func(db *postgres.DB, d int64, id string) {
			res, err := db.AppendEvents(ctx, []durable.Event{{Key: "k", Delta: d, ID: id}})
			switch {
			case err != nil:
				errs <- err
			case res[0].Err == nil:
				sum.Add(d)
			case !errors.Is(res[0].Err, store.ErrOverflow):
				errs <- res[0].Err
			}
		}
		for w := range 6 {
			wg.Go(func() {
				for i := 0; !done.Load() || i < 3; i++ {
					add(small, 1, fmt.Sprint("s", w, "-", i))
				}
			})
		}
		add(big, math.MaxInt64-5, "big")
		done.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got, err := big.Exact(ctx, "k")
		if err != nil || got != sum.Load() {
			t.Fatalf("round %d: Exact = %d, %v; acknowledged %d", round, got, err, sum.Load())
		}
		big.Close()
		small.Close()
	}
}

// TestMagnitudeCoversLog: the store's magnitude plus its largest rollup
// total stays at least the sum of |delta| of the log rows left, even when
// the raises of one stripe add up past int64 and a rollup then folds rows
// that cancel out.
func TestMagnitudeCoversLog(t *testing.T) {
	ctx := context.Background()
	cfg := postgres.Config{URL: testenv.PostgresURL(), Schema: testenv.PostgresSchema(t), MaxConns: 4}
	db := openCfg(t, cfg)
	defer db.Close()
	old := time.Now().Add(-time.Hour)
	n := 0
	add := func(e durable.Event) {
		e.ID = fmt.Sprint("e", n)
		n++
		res, err := db.AppendEvents(ctx, []durable.Event{e})
		if err != nil || res[0].Err != nil {
			t.Fatalf("append %+v: %v %+v", e, err, res)
		}
	}
	// Every 16th call raises the same stripe.
	for i, d := range []int64{1 << 62, -1 << 62, 1 << 62, -1 << 62, 3 << 61} {
		key, at := "a", old
		if i == 4 {
			key, at = "b", time.Time{}
		}
		add(durable.Event{Key: key, Delta: d, At: at})
		for range 15 {
			add(durable.Event{Key: "f", Delta: 1, At: old})
		}
	}
	if _, err := db.Rollup(ctx, old.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	q := `SELECT (SELECT sum(mag::numeric) FROM %[1]s.magnitude) >=
		(SELECT coalesce(sum(abs(delta::numeric)), 0) FROM %[1]s.events) +
		(SELECT coalesce(max(abs(total::numeric)), 0) FROM %[1]s.totals)`
	if err := conn.QueryRow(ctx, fmt.Sprintf(q, cfg.Schema)).Scan(&ok); err != nil || !ok {
		t.Fatalf("magnitude below the log's: %v %v", ok, err)
	}
}

// TestMagnitudeFallsAgain: a counter near the limit puts the store above
// the cheap bound (every batch checked exactly); once it is cleared, the
// next rollup measures the magnitude afresh and brings it down to what
// the store holds, whether the large amount was rolled up or still in the
// log when it was cleared.
func TestMagnitudeFallsAgain(t *testing.T) {
	ctx := context.Background()
	cfg := postgres.Config{URL: testenv.PostgresURL(), Schema: testenv.PostgresSchema(t), MaxConns: 4}
	db := openCfg(t, cfg)
	defer db.Close()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	magnitude := func() (largest, logged string) {
		t.Helper()
		q := fmt.Sprintf(`SELECT (SELECT mag FROM %[1]s.magnitude WHERE stripe = -1)::text,
			(SELECT sum(mag) FROM %[1]s.magnitude WHERE stripe >= 0)::text`, cfg.Schema)
		if err := conn.QueryRow(ctx, q).Scan(&largest, &logged); err != nil {
			t.Fatal(err)
		}
		return largest, logged
	}
	old := time.Now().Add(-time.Hour)
	n := 0
	add := func(e durable.Event) {
		t.Helper()
		e.ID = fmt.Sprint("e", n)
		n++
		res, err := db.AppendEvents(ctx, []durable.Event{e})
		if err != nil || res[0].Err != nil {
			t.Fatalf("append %+v: %v %+v", e, err, res)
		}
	}
	add(durable.Event{Key: "rolled", Delta: 3 << 61, At: old})
	add(durable.Event{Key: "small", Delta: 5, At: old})
	if _, err := db.Rollup(ctx, old.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	add(durable.Event{Key: "logged", Delta: 3 << 61})
	add(durable.Event{Key: "small", Delta: -2})
	big3, _ := new(big.Int).SetString(fmt.Sprint(int64(3<<61)), 10)
	if largest, logged := magnitude(); largest != big3.String() || func() bool { l, _ := new(big.Int).SetString(logged, 10); return l == nil || l.Cmp(big3) < 0 }() {
		t.Fatalf("before the clears: largest total %s, log %s", largest, logged)
	}
	for _, k := range []string{"rolled", "logged"} {
		if err := db.ClearCounter(ctx, k, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Rollup(ctx, old.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if largest, logged := magnitude(); largest != "5" || logged != "2" {
		t.Fatalf("after the clears and a rollup: largest total %s, log %s; want 5 and 2", largest, logged)
	}
	if v, err := db.Exact(ctx, "small"); err != nil || v != 3 {
		t.Fatalf("small: %d %v", v, err)
	}
}

// TestExecModes: a URL that asks pgx for another query mode (no cached
// prepared statements, e.g. behind a pooler) appends, dedups and retries
// as the default does.
func TestExecModes(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{"cache_statement", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			u := testenv.PostgresURL()
			sep := "?"
			if strings.Contains(u, "?") {
				sep = "&"
			}
			db := openCfg(t, postgres.Config{URL: u + sep + "default_query_exec_mode=" + mode,
				Schema: testenv.PostgresSchema(t), MaxConns: 2})
			defer db.Close()
			first := []durable.Event{{Key: "a", Delta: 2, ID: "1"}, {Key: "b", Delta: 3, ID: "1"}, {Key: "a", Delta: 5, ID: "2"}}
			again := append([]durable.Event{{Key: "a", Delta: 7, ID: "3"}}, first...) // a retry: stored IDs
			for _, events := range [][]durable.Event{first, again} {
				res, err := db.AppendEvents(ctx, events)
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range res {
					if r.Err != nil || r.Dup != (len(events) == 4 && i > 0) {
						t.Errorf("event %d of %v: %+v", i, events, r)
					}
				}
			}
			got, err := db.ExactMulti(ctx, []string{"a", "b"})
			if err != nil || got["a"] != 14 || got["b"] != 3 {
				t.Errorf("totals %v, %v; want a 14, b 3", got, err)
			}
		})
	}
}
