package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
)

// The common batch (IDs inserted optimistically, the magnitude checked
// cheaply) goes through pgconn with its parameters encoded here: its two
// arrays of strings and three of integers are written straight into one
// buffer, in PostgreSQL's binary array format, where pgtype encoded every
// element through its type map into buffers grown by appending (more than
// half of the bytes the client allocated per batch). Its five statements
// are prepared once per connection under fixed names and sent in one
// round trip (a pgconn pipeline, as pgx sends the other batches).
const (
	oidText = 25
	oidInt8 = 20
)

// fastStatements are the statements of the common batch, prepared on
// each connection under their names.
var fastStatements = [...]struct{ name, sql string }{
	{"hotcount_begin", "BEGIN"},
	{"hotcount_gate", gateFast},
	{"hotcount_ids", insertIDs},
	{"hotcount_raise", raiseAndLog},
	{"hotcount_commit", "COMMIT"},
}

// Parameter formats of insertIDs and raiseAndLog: arrays in binary, the
// scalars as text (their types are inferred by the server: smallint,
// numeric, bigint).
var (
	idsFormats   = []int16{1, 1, 1, 0}
	raiseFormats = []int16{1, 1, 1, 1, 0, 0, 0}
)

// prepared reports whether the connection may hold prepared statements:
// pgx's default mode, which caches them per connection. A URL that asks
// for another (default_query_exec_mode, e.g. behind a pooler that does
// not keep them) sends every batch through pgx in that mode.
func (a *appender) prepared() bool {
	return a.conn.Conn().Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
}

// fast runs the common batch: BEGIN, the gate (gateFast), the insert of
// the pending IDs (insertIDs) and the raise of the magnitude with the log
// rows (raiseAndLog), then COMMIT, in one round trip. It returns the
// server's error as the pgx pipeline would (isUnique, boundExceeded).
func (a *appender) fast(ctx context.Context, b *sqlkit.Batch, pending []int, mag int64) error {
	var sds [len(fastStatements)]*pgconn.StatementDescription
	for i, s := range fastStatements {
		sd, err := a.conn.Conn().Prepare(ctx, s.name, s.sql)
		if err != nil {
			return err
		}
		sds[i] = sd
	}
	rows := b.Rows()
	// One buffer for the 7 arrays, sized from the strings they hold.
	size := 7 * 20
	for _, i := range pending {
		e := &b.Events[i]
		size += len(e.Key) + len(e.ID) + 3*4 + 8
	}
	for _, r := range rows {
		size += len(r.Key) + 4 + 3*(4+8)
	}
	bp := a.db.bufs.Get().(*[]byte)
	defer a.db.bufs.Put(bp)
	if cap(*bp) < size {
		*bp = make([]byte, 0, size)
	}
	buf := (*bp)[:0]
	var p [4][]byte
	buf, p[0] = textArray(buf, len(pending), func(j int) string { return b.Events[pending[j]].Key })
	buf, p[1] = textArray(buf, len(pending), func(j int) string { return b.Events[pending[j]].ID })
	buf, p[2] = int8Array(buf, len(pending), func(j int) int64 { return b.Events[pending[j]].Delta })
	ids := [][]byte{p[0], p[1], p[2], []byte(strconv.FormatInt(b.Now, 10))}
	buf, p[0] = textArray(buf, len(rows), func(j int) string { return rows[j].Key })
	buf, p[1] = int8Array(buf, len(rows), func(j int) int64 { return rows[j].Delta })
	buf, p[2] = int8Array(buf, len(rows), func(j int) int64 { return rows[j].At })
	_, p[3] = int8Array(buf, len(rows), func(j int) int64 { return rows[j].N })
	raise := [][]byte{p[0], p[1], p[2], p[3],
		[]byte(strconv.Itoa(a.stripe)),
		[]byte(strconv.FormatInt(mag, 10)),
		[]byte(strconv.FormatInt(sqlkit.FastBound, 10))}

	// The pipeline copies the parameters into the connection's write
	// buffer as they are sent: buf is free again when fast returns.
	a.open = true
	pl := a.conn.Conn().PgConn().StartPipeline(ctx)
	pl.SendQueryStatement(sds[0], nil, nil, nil)
	pl.SendQueryStatement(sds[1], nil, nil, nil)
	pl.SendQueryStatement(sds[2], ids, idsFormats, nil)
	pl.SendQueryStatement(sds[3], raise, raiseFormats, nil)
	pl.SendQueryStatement(sds[4], nil, nil, nil)
	err := pl.Sync()
	var tag pgconn.CommandTag
	// In a pipeline a failed statement skips the rest up to the sync, so
	// the first error is the one to report; Close reads what is left.
	for range len(fastStatements) {
		if err != nil {
			break
		}
		var res any
		if res, err = pl.GetResults(); err == nil {
			rr, ok := res.(*pgconn.ResultReader)
			if !ok {
				err = fmt.Errorf("%w: append: unexpected pipeline result %T", durable.ErrBackend, res)
				break
			}
			tag, err = rr.Close()
		}
	}
	if cerr := pl.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	a.open = false
	if tag.String() != "COMMIT" {
		return fmt.Errorf("%w: append: transaction was rolled back (%s)", durable.ErrBackend, tag)
	}
	return nil
}

// textArray appends to buf a one-dimensional text[] of n elements, in the
// binary format, and returns buf and the array (a slice of buf).
func textArray(buf []byte, n int, elem func(int) string) ([]byte, []byte) {
	start := len(buf)
	buf = arrayHeader(buf, n, oidText)
	for j := range n {
		s := elem(j)
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		buf = append(buf, s...)
	}
	return buf, buf[start:len(buf):len(buf)]
}

// int8Array is textArray for bigint[].
func int8Array(buf []byte, n int, elem func(int) int64) ([]byte, []byte) {
	start := len(buf)
	buf = arrayHeader(buf, n, oidInt8)
	for j := range n {
		buf = binary.BigEndian.AppendUint32(buf, 8)
		buf = binary.BigEndian.AppendUint64(buf, uint64(elem(j)))
	}
	return buf, buf[start:len(buf):len(buf)]
}

// arrayHeader appends the header of a one-dimensional array of n elements
// of type oid, without NULLs (an empty array has no dimension).
func arrayHeader(buf []byte, n int, oid uint32) []byte {
	dims := uint32(1)
	if n == 0 {
		dims = 0
	}
	buf = binary.BigEndian.AppendUint32(buf, dims)
	buf = binary.BigEndian.AppendUint32(buf, 0) // no NULLs
	buf = binary.BigEndian.AppendUint32(buf, oid)
	if n > 0 {
		buf = binary.BigEndian.AppendUint32(buf, uint32(n))
		buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	}
	return buf
}
