package sqlkit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Conn runs statements on a pool, a connection or a transaction of one
// backend. Statements number their parameters $1, $2, … in the order they
// first appear (SQLite binds $N names by position too).
type Conn interface {
	// Exec runs a statement and returns the number of rows it changed.
	Exec(ctx context.Context, q string, args ...any) (int64, error)
	// Query runs a query and calls row for each row it returns; scan reads
	// the current row.
	Query(ctx context.Context, q string, args []any, row func(scan func(dst ...any) error) error) error
}

// Dialect is what differs in the statements the shared operations run.
type Dialect struct {
	// In returns a condition: col is one of the strings of list parameter
	// $n.
	In func(col string, n int) string
	// List converts strings to a list parameter.
	List func([]string) any
	// Prefix returns a condition: col starts with the text parameter $n.
	Prefix func(col string, n int) string
	// KeyBounds: the store keeps a magnitude bound per key (bounds rows
	// with mag), which a clear gives again to the log events it keeps.
	KeyBounds bool
}

// errNoRows: QueryOne found no row.
var errNoRows = errors.New("no rows")

// QueryOne scans the first row of a query into dst, or returns errNoRows.
func QueryOne(ctx context.Context, c Conn, q string, args []any, dst ...any) error {
	found := false
	err := c.Query(ctx, q, args, func(scan func(...any) error) error {
		if found {
			return nil
		}
		found = true
		return scan(dst...)
	})
	if err == nil && !found {
		return errNoRows
	}
	return err
}

// Strings runs a query of one text column.
func Strings(ctx context.Context, c Conn, q string, args ...any) ([]string, error) {
	var out []string
	var s string
	err := c.Query(ctx, q, args, func(scan func(...any) error) error {
		if err := scan(&s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// SaveMeta stores data under key.
func SaveMeta(ctx context.Context, c Conn, key string, data []byte, now time.Time) error {
	if !durable.ValidKey(key) {
		return fmt.Errorf("%w: meta key %q", keyspace.ErrInvalidKey, key)
	}
	if data == nil {
		data = []byte{}
	}
	_, err := c.Exec(ctx, `INSERT INTO meta (key, data, updated_ns) VALUES ($1, $2, $3)
		ON CONFLICT (key) DO UPDATE SET data = excluded.data, updated_ns = excluded.updated_ns`,
		key, data, now.UnixNano())
	return err
}

// LoadMeta returns the data under key, or durable.ErrNotFound.
func LoadMeta(ctx context.Context, c Conn, key string) ([]byte, error) {
	var data []byte
	err := QueryOne(ctx, c, `SELECT data FROM meta WHERE key = $1`, []any{key}, &data)
	if errors.Is(err, errNoRows) {
		return nil, fmt.Errorf("%w: meta %q", durable.ErrNotFound, key)
	}
	if data == nil {
		data = []byte{}
	}
	return data, err
}

// Prune forgets IDs and tombstones past their retention, each in its own
// statement.
func Prune(ctx context.Context, c Conn, keep Retention, now time.Time, wrap func(string, error) error) (durable.PruneReport, error) {
	ids, err := c.Exec(ctx, `DELETE FROM ids WHERE seen_ns < $1`, now.Add(-keep.IDs).UnixNano())
	tombs, terr := c.Exec(ctx, `DELETE FROM clears WHERE cleared_ns < $1`, now.Add(-keep.Tombstones).UnixNano())
	return durable.PruneReport{IDs: int(ids), Tombstones: int(tombs)},
		errors.Join(wrap("prune ids", err), wrap("prune tombstones", terr))
}

// Tombstones returns the tombstones of keys.
func Tombstones(ctx context.Context, c Conn, d Dialect, keys []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	var k string
	var at int64
	err := c.Query(ctx, `SELECT key, at_ns FROM clears WHERE `+d.In("key", 1), []any{d.List(keys)},
		func(scan func(...any) error) error {
			if err := scan(&k, &at); err != nil {
				return err
			}
			out[k] = FromNanos(at)
			return nil
		})
	return out, err
}

// Clear removes everything of counter key as of at but its IDs and
// records its tombstone, within the caller's transaction. Log events and
// checkpoints newer than at stay. The tombstone's retention counts from at
// when at is in the past: a checkpoint read at or before at is saved
// within the retention after it, so a clear made later than that needs no
// tombstone kept for long. Its bounds rows go first: in
// PostgreSQL that waits for the batches of the key in flight (with the
// gate the caller holds, for every batch in flight), so that the deletes
// of its log rows that follow see them.
//
// With ended (durable.Lifecycle.ClearEnded), the metadata and the
// deadline record are kept: they belong to the counter that lives on.
func Clear(ctx context.Context, tx Conn, d Dialect, key string, at, now time.Time, ended bool) error {
	lo, hi := SubKeyRange(key)
	subs, err := Strings(ctx, tx, `SELECT key FROM checkpoints WHERE key >= $1 AND key < $2`, lo, hi)
	if err != nil {
		return err
	}
	mine := []string{key}
	for _, s := range subs {
		if CounterOf(s) == key {
			mine = append(mine, s)
		}
	}
	for _, q := range []struct {
		sql   string
		args  []any
		owned bool // the living counter's, kept by ClearEnded
	}{
		{`DELETE FROM bounds WHERE key = $1`, []any{key}, false},
		{`DELETE FROM events WHERE key = $1 AND at_ns <= $2`, []any{key, Nanos(at)}, false},
		{`DELETE FROM totals WHERE key = $1`, []any{key}, false},
		{`DELETE FROM meta WHERE key = $1`, []any{key}, true},
		{`DELETE FROM deadlines WHERE key = $1`, []any{key}, true},
		{`DELETE FROM checkpoints WHERE ` + d.In("key", 1) + ` AND at_ns <= $2`, []any{d.List(mine), Nanos(at)}, false},
		{`INSERT INTO clears (key, at_ns, cleared_ns) VALUES ($1, $2, $3)
			ON CONFLICT (key) DO UPDATE SET
				cleared_ns = CASE WHEN excluded.cleared_ns > clears.cleared_ns THEN excluded.cleared_ns ELSE clears.cleared_ns END,
				at_ns = CASE WHEN excluded.at_ns > clears.at_ns THEN excluded.at_ns ELSE clears.at_ns END`,
			[]any{key, Nanos(at), min(now.UnixNano(), Nanos(at))}, false},
	} {
		if ended && q.owned {
			continue
		}
		if _, err := tx.Exec(ctx, q.sql, q.args...); err != nil {
			return err
		}
	}
	if !d.KeyBounds {
		return nil
	}
	return keepBound(ctx, tx, key)
}

// keepBound gives the log events of key that a clear kept (newer than it)
// a magnitude bound again: the sum of their absolute deltas.
func keepBound(ctx context.Context, tx Conn, key string) error {
	var mag int64
	found := false
	var d int64
	err := tx.Query(ctx, `SELECT delta FROM events WHERE key = $1`, []any{key}, func(scan func(...any) error) error {
		if err := scan(&d); err != nil {
			return err
		}
		found = true
		mag = AddSat(mag, Abs(d))
		return nil
	})
	if err != nil || !found {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO bounds (key, stripe, mag) VALUES ($1, 0, $2)`, key, mag)
	return err
}

// LoadMetas returns the data under keys.
func LoadMetas(ctx context.Context, c Conn, d Dialect, keys []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	var k string
	err := c.Query(ctx, `SELECT key, data FROM meta WHERE `+d.In("key", 1), []any{d.List(keys)},
		func(scan func(...any) error) error {
			var data []byte
			if err := scan(&k, &data); err != nil {
				return err
			}
			if data == nil {
				data = []byte{}
			}
			out[k] = data
			return nil
		})
	return out, err
}

// SetDeadline records (zero at: removes) the deadline of counter key.
func SetDeadline(ctx context.Context, c Conn, key string, at time.Time, onlyNew bool) error {
	if at.IsZero() {
		_, err := c.Exec(ctx, `DELETE FROM deadlines WHERE key = $1`, key)
		return err
	}
	q := `INSERT INTO deadlines (key, at_ns) VALUES ($1, $2) ON CONFLICT (key) DO `
	if onlyNew {
		q += `NOTHING`
	} else {
		q += `UPDATE SET at_ns = excluded.at_ns`
	}
	_, err := c.Exec(ctx, q, key, Nanos(at))
	return err
}

// DueDeadlines returns up to limit deadlines at or before now, oldest
// first.
func DueDeadlines(ctx context.Context, c Conn, now time.Time, limit int) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	var k string
	var at int64
	err := c.Query(ctx, `SELECT key, at_ns FROM deadlines WHERE at_ns <= $1 ORDER BY at_ns LIMIT $2`,
		[]any{Nanos(now), limit}, func(scan func(...any) error) error {
			if err := scan(&k, &at); err != nil {
				return err
			}
			out[k] = FromNanos(at)
			return nil
		})
	return out, err
}

// LoadCheckpoints returns the checkpoints of keys.
func LoadCheckpoints(ctx context.Context, c Conn, d Dialect, keys []string) (map[string]durable.Checkpoint, error) {
	out := make(map[string]durable.Checkpoint, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	cps, err := checkpoints(ctx, c, `SELECT key, total, epoch, at_ns FROM checkpoints WHERE `+d.In("key", 1), d.List(keys))
	for _, cp := range cps {
		out[cp.Key] = cp
	}
	return out, err
}

// ListCheckpoints returns the checkpoints whose key starts with prefix,
// sorted by key.
func ListCheckpoints(ctx context.Context, c Conn, d Dialect, prefix string) ([]durable.Checkpoint, error) {
	return checkpoints(ctx, c, `SELECT key, total, epoch, at_ns FROM checkpoints WHERE `+d.Prefix("key", 1)+
		` ORDER BY key`, prefix)
}

// ListCheckpointsAfter returns up to limit checkpoints whose key starts
// with prefix and is after after, sorted by key (see KeyRange).
func ListCheckpointsAfter(ctx context.Context, c Conn, d Dialect, prefix, after string, limit int) ([]durable.Checkpoint, error) {
	if limit <= 0 {
		return nil, nil
	}
	cond, args := KeyRange(d, "key", prefix, after)
	args = append(args, int64(limit))
	return checkpoints(ctx, c, `SELECT key, total, epoch, at_ns FROM checkpoints WHERE `+cond+
		` ORDER BY key LIMIT $`+strconv.Itoa(len(args)), args...)
}

// KeyRange returns the condition on col of the keys that start with prefix
// and come after after in byte order, with its parameters ($1 on): a range
// of the key index (from prefix or after, whichever is later, to the first
// key past the prefix), so that a page ordered by col with a limit reads
// only its own rows.
func KeyRange(d Dialect, col, prefix, after string) (string, []any) {
	cond, args := d.Prefix(col, 1), []any{prefix}
	if after >= prefix {
		cond += ` AND ` + col + ` > $2`
		args = append(args, after)
	} else {
		cond += ` AND ` + col + ` >= $2`
		args = append(args, prefix)
	}
	if hi, ok := PrefixEnd(prefix); ok {
		cond += ` AND ` + col + ` < $3`
		args = append(args, hi)
	}
	return cond, args
}

// PrefixEnd returns the least valid UTF-8 string, in byte order, after
// every string that starts with prefix: prefix with its last character
// replaced by the next one (dropping trailing U+10FFFF). ok is false for an
// empty prefix, one of U+10FFFF only, or one that is not valid UTF-8 (the
// range then has no upper bound).
func PrefixEnd(prefix string) (string, bool) {
	if !utf8.ValidString(prefix) {
		return "", false
	}
	for prefix != "" {
		r, size := utf8.DecodeLastRuneInString(prefix)
		prefix = prefix[:len(prefix)-size]
		if r == utf8.MaxRune {
			continue
		}
		r++
		if r >= 0xD800 && r <= 0xDFFF { // surrogates are not characters
			r = 0xE000
		}
		return prefix + string(r), true
	}
	return "", false
}

func checkpoints(ctx context.Context, c Conn, q string, args ...any) ([]durable.Checkpoint, error) {
	var out []durable.Checkpoint
	var key string
	var total, epoch, at int64
	err := c.Query(ctx, q, args, func(scan func(...any) error) error {
		if err := scan(&key, &total, &epoch, &at); err != nil {
			return err
		}
		out = append(out, Checkpoint(key, total, epoch, at))
		return nil
	})
	return out, err
}

// Keys lists, sorted, the keys starting with prefix that have a rollup
// total or log rows.
func Keys(ctx context.Context, c Conn, d Dialect, prefix string) ([]string, error) {
	keys, err := Strings(ctx, c, `SELECT key FROM totals WHERE `+d.Prefix("key", 1)+
		` UNION SELECT key FROM events WHERE `+d.Prefix("key", 1), prefix)
	return SortKeys(keys), err
}

// KeysAfter lists, sorted, up to limit keys starting with prefix and
// after after that have a rollup total or log rows. Each table gives at
// most limit keys from its key index (the events' distinct keys), and the
// union of those is cut to limit.
func KeysAfter(ctx context.Context, c Conn, d Dialect, prefix, after string, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	cond, args := KeyRange(d, "key", prefix, after)
	args = append(args, int64(limit))
	lim := ` ORDER BY key LIMIT $` + strconv.Itoa(len(args))
	keys, err := Strings(ctx, c, `SELECT key FROM (SELECT key FROM totals WHERE `+cond+lim+`) AS t
		UNION SELECT key FROM (SELECT DISTINCT key FROM events WHERE `+cond+lim+`) AS e`+lim, args...)
	return SortKeys(keys), err
}

// CountRows counts the rows of every table.
func CountRows(ctx context.Context, c Conn) (map[string]int64, error) {
	out := make(map[string]int64, len(Tables))
	for _, t := range Tables {
		var n int64
		if err := QueryOne(ctx, c, `SELECT count(*) FROM `+t, nil, &n); err != nil {
			return nil, err
		}
		out[t] = n
	}
	return out, nil
}

// Rows is what pgx.Rows and *sql.Rows share.
type Rows interface {
	Next() bool
	Scan(dst ...any) error
	Err() error
}

// Each calls row for every row of rows; the caller closes rows.
func Each(rows Rows, row func(scan func(dst ...any) error) error) error {
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Common implements the operations of durable.Backend that are the same in
// every backend; a backend embeds it.
type Common struct {
	cfg    CommonConfig
	closed atomic.Bool
}

// CommonConfig configures NewCommon.
type CommonConfig struct {
	// Read runs reads, Write runs writes (each statement its own
	// transaction).
	Read, Write Conn
	// Dialect is the backend's.
	Dialect Dialect
	// Keep is the retention of IDs and tombstones.
	Keep Retention
	// Now tells the time.
	Now func() time.Time
	// Wrap classifies the errors of an operation.
	Wrap func(op string, err error) error
	// ExactMulti is the backend's.
	ExactMulti func(ctx context.Context, keys []string) (map[string]int64, error)
}

// NewCommon returns the shared operations of a backend.
func NewCommon(cfg CommonConfig) *Common { return &Common{cfg: cfg} }

// Check returns store.ErrClosed once c is closed.
func Check(c *Common) error {
	if c.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// Shut marks c closed and reports whether it was open.
func Shut(c *Common) bool { return !c.closed.Swap(true) }

// Exact implements durable.Log.
func (c *Common) Exact(ctx context.Context, key string) (int64, error) {
	m, err := c.cfg.ExactMulti(ctx, []string{key})
	return m[key], err
}

// LoadCheckpoints implements durable.Checkpoints.
func (c *Common) LoadCheckpoints(ctx context.Context, keys []string) (map[string]durable.Checkpoint, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	m, err := LoadCheckpoints(ctx, c.cfg.Read, c.cfg.Dialect, keys)
	return m, c.cfg.Wrap("load checkpoints", err)
}

// ListCheckpoints implements durable.Checkpoints.
func (c *Common) ListCheckpoints(ctx context.Context, prefix string) ([]durable.Checkpoint, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	cps, err := ListCheckpoints(ctx, c.cfg.Read, c.cfg.Dialect, prefix)
	return cps, c.cfg.Wrap("list checkpoints", err)
}

// ListCheckpointsAfter implements durable.Checkpoints.
func (c *Common) ListCheckpointsAfter(ctx context.Context, prefix, after string, limit int) ([]durable.Checkpoint, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	cps, err := ListCheckpointsAfter(ctx, c.cfg.Read, c.cfg.Dialect, prefix, after, limit)
	return cps, c.cfg.Wrap("list checkpoints", err)
}

// SaveMeta implements durable.Meta.
func (c *Common) SaveMeta(ctx context.Context, key string, data []byte) error {
	if err := Check(c); err != nil {
		return err
	}
	return c.cfg.Wrap("save meta", SaveMeta(ctx, c.cfg.Write, key, data, c.cfg.Now()))
}

// LoadMeta implements durable.Meta.
func (c *Common) LoadMeta(ctx context.Context, key string) ([]byte, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	data, err := LoadMeta(ctx, c.cfg.Read, key)
	return data, c.cfg.Wrap("load meta", err)
}

// LoadMetas implements durable.Meta.
func (c *Common) LoadMetas(ctx context.Context, keys []string) (map[string][]byte, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	m, err := LoadMetas(ctx, c.cfg.Read, c.cfg.Dialect, keys)
	return m, c.cfg.Wrap("load metas", err)
}

// DeleteMeta implements durable.Meta.
func (c *Common) DeleteMeta(ctx context.Context, key string) error {
	if err := Check(c); err != nil {
		return err
	}
	_, err := c.cfg.Write.Exec(ctx, `DELETE FROM meta WHERE key = $1`, key)
	return c.cfg.Wrap("delete meta", err)
}

// CheckDeadlines validates the keys of SetDeadlines.
func CheckDeadlines(deadlines map[string]time.Time) error {
	for k := range deadlines {
		if err := ClearKey(k); err != nil {
			return err
		}
	}
	return nil
}

// DueDeadlines implements durable.Lifecycle.
func (c *Common) DueDeadlines(ctx context.Context, now time.Time, limit int) (map[string]time.Time, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	m, err := DueDeadlines(ctx, c.cfg.Read, now, limit)
	return m, c.cfg.Wrap("due deadlines", err)
}

// LoadDeadlines implements durable.Lifecycle.
func (c *Common) LoadDeadlines(ctx context.Context, keys []string) (map[string]time.Time, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	var k string
	var at int64
	err := c.cfg.Read.Query(ctx, `SELECT key, at_ns FROM deadlines WHERE `+c.cfg.Dialect.In("key", 1),
		[]any{c.cfg.Dialect.List(keys)}, func(scan func(...any) error) error {
			if err := scan(&k, &at); err != nil {
				return err
			}
			out[k] = FromNanos(at)
			return nil
		})
	return out, c.cfg.Wrap("load deadlines", err)
}

// Tombstones implements durable.Lifecycle.
func (c *Common) Tombstones(ctx context.Context, keys []string) (map[string]time.Time, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	m, err := Tombstones(ctx, c.cfg.Read, c.cfg.Dialect, keys)
	return m, c.cfg.Wrap("tombstones", err)
}

// Prune implements durable.Lifecycle; each statement commits on its own.
func (c *Common) Prune(ctx context.Context) (durable.PruneReport, error) {
	if err := Check(c); err != nil {
		return durable.PruneReport{}, err
	}
	return Prune(ctx, c.cfg.Write, c.cfg.Keep, c.cfg.Now(), c.cfg.Wrap)
}

// Keys implements durable.Log.
func (c *Common) Keys(ctx context.Context, prefix string) ([]string, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	keys, err := Keys(ctx, c.cfg.Read, c.cfg.Dialect, prefix)
	return keys, c.cfg.Wrap("keys", err)
}

// KeysAfter implements durable.Log.
func (c *Common) KeysAfter(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	keys, err := KeysAfter(ctx, c.cfg.Read, c.cfg.Dialect, prefix, after, limit)
	return keys, c.cfg.Wrap("keys", err)
}
