package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
)

// insertIDs inserts IDs optimistically: a stored one fails the statement.
const insertIDs = `INSERT INTO ids (key, id, delta, seen_ns)
	SELECT k, i, d, $4 FROM unnest($1::text[], $2::text[], $3::bigint[]) AS t (k, i, d)`

// insertNewIDs inserts the IDs not stored yet and returns them.
const insertNewIDs = insertIDs + ` ON CONFLICT DO NOTHING RETURNING key, id`

// gateFast and gateExact take the lock of table gate (which holds no
// rows) at the start of a batch: batches checked cheaply (ROW EXCLUSIVE)
// run beside each other, and so do batches checked exactly and clears
// (SHARE), but never one of each.
const (
	gateFast  = `LOCK TABLE gate IN ROW EXCLUSIVE MODE`
	gateExact = `LOCK TABLE gate IN SHARE MODE`
	// gateAll holds off every batch and clear: a rollup that measures the
	// magnitude afresh (remeasureSQL) takes it.
	gateAll = `LOCK TABLE gate IN EXCLUSIVE MODE`
)

// raiseAndLog raises stripe $5 of the store's magnitude by $6 (the batch's
// sum of |delta|), inserts the log rows and fails (bound_exceeded, SQLSTATE
// HC001) when the magnitude, rows of every stripe, is then above $7: the
// batch is then started over, checked exactly. So the COMMIT queued behind
// it in the same round trip commits only a batch that passed. The other
// stripes are read from the statement's snapshot, the raised one after
// its row lock. The magnitude is numeric: no raise is ever lost to a
// saturation that a rollup's decrease would not know of.
const raiseAndLog = `WITH raised AS (
		INSERT INTO magnitude (stripe, mag) VALUES ($5, $6)
		ON CONFLICT (stripe) DO UPDATE SET mag = magnitude.mag + excluded.mag
		RETURNING mag
	), added AS (
		INSERT INTO events (key, delta, at_ns, n)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])
	)
	SELECT bound_exceeded('') FROM raised
	WHERE mag + coalesce((SELECT sum(mag) FROM magnitude WHERE stripe <> $5), 0) > $7`

// raiseMagnitude raises stripe $1 of the store's magnitude by $2 (a
// decimal) and returns the whole magnitude (a batch checked exactly).
const raiseMagnitude = `WITH raised AS (
		INSERT INTO magnitude (stripe, mag) VALUES ($1, $2::text::numeric)
		ON CONFLICT (stripe) DO UPDATE SET mag = magnitude.mag + excluded.mag
		RETURNING mag
	)
	SELECT (mag + coalesce((SELECT sum(mag) FROM magnitude WHERE stripe <> $1), 0))::text FROM raised`

// lockKeys locks the keys of a batch checked exactly, in key order: their
// bounds rows (stripe -1) are the keys' locks.
const lockKeys = `INSERT INTO bounds (key, stripe, mag)
	SELECT k, -1, 0 FROM unnest($1::text[]) AS t (k) ORDER BY k
	ON CONFLICT (key, stripe) DO UPDATE SET mag = 0`

// exactTails returns, for each key, its exact total.
const exactTails = `SELECT s.k, (coalesce((SELECT total FROM totals WHERE key = s.k), 0) + e.sum)::text
	FROM unnest($1::text[]) AS s (k) CROSS JOIN LATERAL (
		SELECT coalesce(sum(delta), 0) AS sum FROM events WHERE key = s.k) e`

const deleteIDs = `DELETE FROM ids WHERE (key, id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`

const insertRows = `INSERT INTO events (key, delta, at_ns, n)
	SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])`

// maxAttempts bounds how often one AppendEvents call starts its
// transaction over (each time with more keys checked exactly, or with ON
// CONFLICT).
const maxAttempts = 4

// AppendEvents implements durable.Log in one transaction (see the package
// documentation).
func (db *DB) AppendEvents(ctx context.Context, events []durable.Event) ([]durable.Result, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	now := db.clock.Now().UnixNano()
	b := sqlkit.NewBatch(events, now)
	if len(b.Pending()) == 0 {
		return b.Finish(), nil
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, wrap("append", err)
	}
	defer conn.Release()
	a := appender{db: db, conn: conn, stripe: db.stripe.Next(), optimistic: true}
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			b = sqlkit.NewBatch(events, now) // the last try marked b
		}
		again, err := a.try(ctx, b)
		if err == nil && !again {
			return b.Finish(), nil
		}
		if rb := a.rollback(ctx); err == nil {
			err = rb
		}
		if err != nil || attempt == maxAttempts {
			if err == nil {
				err = fmt.Errorf("%w: append started over %d times", durable.ErrBackend, attempt)
			}
			return nil, wrap("append", err)
		}
	}
}

// appender is one AppendEvents call on one connection.
type appender struct {
	db         *DB
	conn       *pgxpool.Conn
	stripe     int
	exact      bool // check every key exactly
	optimistic bool // insert IDs without ON CONFLICT
	open       bool // a transaction is open
}

func (a *appender) rollback(ctx context.Context) error {
	if !a.open {
		return nil
	}
	a.open = false
	if a.conn.Conn().IsClosed() {
		return nil
	}
	_, err := a.conn.Exec(ctx, "ROLLBACK")
	return err
}

// magnitudeOf returns the sum of |delta| of keys, saturated.
func magnitudeOf(keys []sqlkit.Key) int64 {
	var m int64
	for _, k := range keys {
		m = sqlkit.AddSat(m, k.Abs)
	}
	return m
}

// try runs the transaction once. again asks for another try (the
// transaction is left open for the caller to roll back).
func (a *appender) try(ctx context.Context, b *sqlkit.Batch) (again bool, err error) {
	pipe := &pgx.Batch{}
	legacy := b.Now < a.db.legacy.Load()
	mag := magnitudeOf(b.Keys())
	if !a.exact && (a.db.exact.Load() || mag > sqlkit.FastDelta) {
		a.exact = true
	}
	if !legacy && a.optimistic && !a.exact && a.prepared() {
		if pending := b.Pending(); len(pending) > 0 {
			return a.retry(a.fast(ctx, b, pending, mag))
		}
	}
	if err := a.begin(ctx, pipe, legacy || !a.optimistic); err != nil {
		return false, err
	}
	if legacy {
		if err := a.legacy(ctx, b); err != nil {
			return false, err
		}
	}
	pending := b.Pending()
	keys, ids, deltas := make([]string, len(pending)), make([]string, len(pending)), make([]int64, len(pending))
	for j, i := range pending {
		e := b.Events[i]
		keys[j], ids[j], deltas[j] = e.Key, e.ID, e.Delta
	}
	if !a.optimistic {
		if err := a.insertNew(ctx, b, keys, ids, deltas); err != nil {
			return false, err
		}
	} else if len(pending) > 0 {
		pipe.Queue(insertIDs, keys, ids, deltas, b.Now)
	}
	var slow []string
	tails := map[string]*big.Int{}
	if !a.exact {
		if ks := b.Keys(); len(ks) > 0 {
			rk, rd, ra, rn := rowArrays(b.Rows())
			pipe.Queue(raiseAndLog, rk, rd, ra, rn, int16(a.stripe), magnitudeOf(ks), int64(sqlkit.FastBound))
		}
		a.queueCommit(pipe)
	} else {
		for _, k := range b.Keys() {
			slow = append(slow, k.Key)
		}
		if len(slow) > 0 {
			pipe.Queue(lockKeys, slow)
			pipe.Queue(exactTails, slow).Query(func(rows pgx.Rows) error {
				var k, sum string
				_, err := pgx.ForEachRow(rows, []any{&k, &sum}, func() error {
					s, ok := new(big.Int).SetString(sum, 10)
					if !ok {
						return fmt.Errorf("%w: bad sum %q of %q", durable.ErrBackend, sum, k)
					}
					tails[k] = s
					return nil
				})
				return err
			})
		}
	}
	if err := a.send(ctx, pipe); err != nil || !a.exact {
		return a.retry(err)
	}
	return false, a.settle(ctx, b, slow, tails)
}

// retry classifies the error of a try: an ID stored already (the
// optimistic insert failed) or a magnitude too high for the cheap check
// ask for another try, with ON CONFLICT or checked exactly.
func (a *appender) retry(err error) (again bool, _ error) {
	switch {
	case err == nil:
		return false, nil
	case a.optimistic && isUnique(err):
		a.optimistic = false
		return true, nil
	case boundExceeded(err):
		a.exact = true
		a.db.exact.Store(true)
		return true, nil
	}
	return false, err
}

// begin starts the transaction and takes the gate (gateFast, or gateExact
// when the batch is checked exactly): on their own when now is set, else
// queued first in pipe.
func (a *appender) begin(ctx context.Context, pipe *pgx.Batch, now bool) error {
	a.open = true
	gate := gateFast
	if a.exact {
		gate = gateExact
	}
	if !now {
		pipe.Queue("BEGIN")
		pipe.Queue(gate)
		return nil
	}
	if _, err := a.conn.Exec(ctx, "BEGIN"); err != nil {
		return err
	}
	_, err := a.conn.Exec(ctx, gate)
	return err
}

// settle decides the events of the keys checked exactly, writes the log
// rows, removes the IDs of the events that failed, raises the store's
// magnitude by what was applied and commits. Whether the next batch can be
// checked cheaply again is read from the magnitude.
func (a *appender) settle(ctx context.Context, b *sqlkit.Batch, slow []string, tails map[string]*big.Int) error {
	for _, k := range slow {
		b.Settle(k, tails[k])
	}
	pipe := &pgx.Batch{}
	if rows := b.Rows(); len(rows) > 0 {
		rk, rd, ra, rn := rowArrays(rows)
		pipe.Queue(insertRows, rk, rd, ra, rn)
	}
	if failed := b.Failed(); len(failed) > 0 {
		fk, fi := make([]string, len(failed)), make([]string, len(failed))
		for j, i := range failed {
			fk[j], fi[j] = b.Events[i].Key, b.Events[i].ID
		}
		pipe.Queue(deleteIDs, fk, fi)
	}
	applied := new(big.Int)
	for _, i := range b.Pending() {
		d := big.NewInt(b.Events[i].Delta)
		applied.Add(applied, d.Abs(d))
	}
	var fast bool
	pipe.Queue(raiseMagnitude, int16(a.stripe), applied.String()).QueryRow(func(row pgx.Row) error {
		var m string
		if err := row.Scan(&m); err != nil {
			return err
		}
		v, ok := new(big.Int).SetString(m, 10)
		if !ok {
			return fmt.Errorf("%w: bad magnitude %q", durable.ErrBackend, m)
		}
		fast = v.Cmp(big.NewInt(sqlkit.FastBound-sqlkit.FastDelta)) <= 0
		return nil
	})
	a.queueCommit(pipe)
	if err := a.send(ctx, pipe); err != nil {
		return err
	}
	a.db.exact.Store(!fast)
	return nil
}

// insertNew inserts the IDs not stored yet and marks the others duplicates
// or conflicts from their stored delta.
func (a *appender) insertNew(ctx context.Context, b *sqlkit.Batch, keys, ids []string, deltas []int64) error {
	if len(keys) == 0 {
		return nil
	}
	rows, _ := a.conn.Query(ctx, insertNewIDs, keys, ids, deltas, b.Now)
	fresh := map[[2]string]bool{}
	var k, id string
	if _, err := pgx.ForEachRow(rows, []any{&k, &id}, func() error {
		fresh[[2]string{k, id}] = true
		return nil
	}); err != nil {
		return err
	}
	var sk, si []string
	for j := range keys {
		if !fresh[[2]string{keys[j], ids[j]}] {
			sk, si = append(sk, keys[j]), append(si, ids[j])
		}
	}
	if len(sk) == 0 {
		return nil
	}
	rows, _ = a.conn.Query(ctx, `SELECT key, id, delta FROM ids
		WHERE (key, id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, sk, si)
	var delta *int64
	if _, err := pgx.ForEachRow(rows, []any{&k, &id, &delta}, func() error {
		if i, ok := b.Find(k, id); ok && delta != nil {
			b.Stored(i, *delta)
		}
		return nil
	}); err != nil {
		return err
	}
	// An ID stored when it was inserted but gone now was pruned in
	// between: it was there, so the event is a duplicate.
	for j := range sk {
		if i, ok := b.Find(sk[j], si[j]); ok {
			b.Stored(i, b.Events[i].Delta)
		}
	}
	return nil
}

// legacy marks the pending events whose ID is stored without a key.
func (a *appender) legacy(ctx context.Context, b *sqlkit.Batch) error {
	pending := b.Pending()
	ids := make([]string, len(pending))
	for j, i := range pending {
		ids[j] = b.Events[i].ID
	}
	rows, _ := a.conn.Query(ctx, `SELECT id FROM ids WHERE key = '' AND id = ANY($1::text[])`, ids)
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, id := range found {
		b.StoredLegacy(id)
	}
	return err
}

// send runs pipe in one round trip; the queued callbacks read the results.
func (a *appender) send(ctx context.Context, pipe *pgx.Batch) error {
	if pipe.Len() == 0 {
		return nil
	}
	return a.conn.SendBatch(ctx, pipe).Close()
}

// queueCommit queues COMMIT last in pipe. In a pipeline, a failed
// statement skips the rest, so COMMIT runs only when all before it
// succeeded; its tag is checked all the same.
func (a *appender) queueCommit(pipe *pgx.Batch) {
	pipe.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		a.open = false
		if tag.String() != "COMMIT" {
			return fmt.Errorf("%w: append: transaction was rolled back (%s)", durable.ErrBackend, tag)
		}
		return nil
	})
}

// rowArrays splits rows into column arrays.
func rowArrays(rows []sqlkit.Row) (keys []string, deltas, ats, ns []int64) {
	for _, r := range rows {
		keys, deltas, ats, ns = append(keys, r.Key), append(deltas, r.Delta), append(ats, r.At), append(ns, r.N)
	}
	return keys, deltas, ats, ns
}

const rollupSQL = `WITH cand AS (
		SELECT key, sum(delta) AS s FROM events WHERE at_ns < $1 GROUP BY key
	), judged AS (
		SELECT c.key, c.s BETWEEN $2 AND $3 AND coalesce(t.total, 0) + c.s BETWEEN $2 AND $3 AS ok
		FROM cand c LEFT JOIN totals t ON t.key = c.key
	), moved AS (
		DELETE FROM events e USING judged j
		WHERE j.ok AND e.key = j.key AND e.at_ns < $1 RETURNING e.key, e.delta, e.n
	), agg AS (
		SELECT key, sum(delta) AS s, sum(n) AS n FROM moved GROUP BY key
	), folded AS (
		INSERT INTO totals (key, total) SELECT key, s::bigint FROM agg
		ON CONFLICT (key) DO UPDATE SET total = totals.total + excluded.total
		RETURNING total
	), bound AS (
		INSERT INTO magnitude (stripe, mag) VALUES
			(-1, (SELECT coalesce(max(abs(total::numeric)), 0) FROM folded)),
			(0, -(SELECT coalesce(sum(abs(delta::numeric)), 0) FROM moved))
		ON CONFLICT (stripe) DO UPDATE SET mag = CASE
			WHEN magnitude.stripe = -1 THEN greatest(magnitude.mag, excluded.mag)
			ELSE magnitude.mag + excluded.mag END
	)
	SELECT (SELECT coalesce(sum(n), 0)::bigint FROM agg), (SELECT count(*) FROM agg),
		coalesce((SELECT array_agg(key ORDER BY key) FROM judged WHERE NOT ok), '{}')`

// remeasureSQL sets the store's magnitude to what the log and the totals
// hold now: the largest |total| and the sum of |delta|. The magnitude only
// over-estimates between two measures (a clear removes rows without
// lowering it, and stripe -1 only rises), so a store that once came near
// the limit would otherwise be checked exactly for good. It runs in a
// rollup that found the magnitude above the cheap bound, under the rollup
// lock (no clear) and gateAll (no batch in flight), so nothing it reads
// moves while it writes.
const remeasureSQL = `UPDATE magnitude SET mag = CASE stripe
		WHEN -1 THEN (SELECT coalesce(max(abs(total::numeric)), 0) FROM totals)
		WHEN 0 THEN (SELECT coalesce(sum(abs(delta::numeric)), 0) FROM events)
		ELSE 0 END`

// Rollup implements durable.Log: Prune, then one statement that folds
// every key whose total stays in int64, under the rollup lock. When the
// store's magnitude is above the cheap bound, it holds every batch off
// meanwhile and measures the magnitude afresh after the fold
// (remeasureSQL), so that the store goes back to cheap checks once its
// large counters are cleared.
func (db *DB) Rollup(ctx context.Context, before time.Time) (durable.RollupReport, error) {
	var rep durable.RollupReport
	pruned, perr := db.Prune(ctx)
	rep.Pruned = pruned
	if err := db.check(); err != nil {
		return rep, err
	}
	var folded, keys int64
	var failed []string
	ferr := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, db.locks, lockRollup); err != nil {
			return err
		}
		var high bool
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(mag), 0) > $1 FROM magnitude`, int64(sqlkit.FastBound)).Scan(&high); err != nil {
			return err
		}
		if high {
			// Before any other lock (batches take the gate first too).
			if _, err := tx.Exec(ctx, gateAll); err != nil {
				return err
			}
		}
		if err := tx.QueryRow(ctx, rollupSQL, before.UnixNano(), int64(math.MinInt64), int64(math.MaxInt64)).
			Scan(&folded, &keys, &failed); err != nil {
			return err
		}
		if high {
			_, err := tx.Exec(ctx, remeasureSQL)
			return err
		}
		return nil
	})
	if ferr != nil {
		return rep, errors.Join(perr, wrap("rollup", ferr))
	}
	rep.Folded, rep.Keys = int(folded), int(keys)
	for _, k := range failed {
		rep.Failed = append(rep.Failed, durable.KeyError{Key: k, Err: sqlkit.Overflow(k)})
	}
	return rep, perr
}

// ExactMulti implements durable.Log, in one statement (one snapshot).
func (db *DB) ExactMulti(ctx context.Context, keys []string) (map[string]int64, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rows, _ := db.pool.Query(ctx, `SELECT k.k, (coalesce(t.total, 0) +
		coalesce((SELECT sum(delta) FROM events e WHERE e.key = k.k), 0))::text
		FROM (SELECT DISTINCT unnest($1::text[]) COLLATE "C" AS k) k LEFT JOIN totals t ON t.key = k.k`, keys)
	var k, v string
	var bad []error
	_, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error {
		n, ok := new(big.Int).SetString(v, 10)
		switch {
		case !ok:
			return fmt.Errorf("%w: bad total %q of %q", durable.ErrBackend, v, k)
		case !n.IsInt64():
			bad = append(bad, sqlkit.Overflow(k))
		default:
			out[k] = n.Int64()
		}
		return nil
	})
	if err != nil {
		return nil, wrap("exact", err)
	}
	return out, errors.Join(bad...)
}
