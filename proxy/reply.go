package proxy

import (
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/redis/rueidis"
	"github.com/tidwall/redcon"
)

// Replies are appended to a connection's output buffer with redcon's
// append helpers; the RESP3 types redcon has no helper for (map, null,
// verbatim string, double) are written here in the same style.

func appendOK(b []byte) []byte { return redcon.AppendOK(b) }

func appendStatus(b []byte, s string) []byte { return redcon.AppendString(b, s) }

func appendErr(b []byte, s string) []byte { return redcon.AppendError(b, s) }

func appendInt(b []byte, n int64) []byte { return redcon.AppendInt(b, n) }

func appendBulk(b []byte, s string) []byte { return redcon.AppendBulkString(b, s) }

func appendArray(b []byte, n int) []byte { return redcon.AppendArray(b, n) }

// appendNull appends the null bulk string of RESP2 ("$-1") or the RESP3
// null ("_").
func appendNull(b []byte, proto int) []byte {
	if proto >= 3 {
		return append(b, '_', '\r', '\n')
	}
	return redcon.AppendNull(b)
}

// appendNullArray appends RESP2's null array ("*-1") or the RESP3 null.
func appendNullArray(b []byte, proto int) []byte {
	if proto >= 3 {
		return append(b, '_', '\r', '\n')
	}
	return append(b, '*', '-', '1', '\r', '\n')
}

// appendMap appends a map header of n pairs: RESP3 "%n", RESP2 an array of
// 2n elements.
func appendMap(b []byte, n int, proto int) []byte {
	if proto >= 3 {
		b = append(b, '%')
		b = strconv.AppendInt(b, int64(n), 10)
		return append(b, '\r', '\n')
	}
	return redcon.AppendArray(b, 2*n)
}

// appendText appends human-readable text (INFO, CLIENT INFO): a bulk
// string in RESP2, a verbatim string of format "txt" in RESP3, as Redis
// does.
func appendText(b []byte, s string, proto int) []byte {
	if proto >= 3 {
		b = append(b, '=')
		b = strconv.AppendInt(b, int64(len(s)+4), 10)
		b = append(b, "\r\ntxt:"...)
		b = append(b, s...)
		return append(b, '\r', '\n')
	}
	return redcon.AppendBulkString(b, s)
}

// errBadMessage is returned by appendMessage for a serialized message it
// cannot walk (a rueidis serialization it does not know).
var errBadMessage = errors.New("proxy: unreadable upstream message")

// appendMessage appends m, a reply from Redis, to b exactly as Redis wrote
// it. scratch is reused for the message's serialization.
//
// rueidis keeps every RESP type of a reply but exposes it only through its
// cache serialization (CacheMarshal: seven TTL bytes, then per message a
// type byte, an 8-byte big-endian length or integer, and the payload or
// the children), which is walked here. Two things are lost on the way and
// restored here: RESP2 has two nulls, "$-1" and "*-1", which rueidis reads
// as one; shape says which one the command sends where (see nullShape).
func appendMessage(b []byte, m *rueidis.RedisMessage, proto int, shape *nullShape, scratch *[]byte) ([]byte, error) {
	if m.IsInt64() {
		v, _ := m.AsInt64()
		return redcon.AppendInt(b, v), nil
	}
	if m.IsNil() {
		if shape.nullArray(nil) {
			return appendNullArray(b, proto), nil
		}
		return appendNull(b, proto), nil
	}
	*scratch = m.CacheMarshal((*scratch)[:0])
	src := *scratch
	if len(src) < 7 {
		return b, errBadMessage
	}
	w := walker{proto: proto, shape: shape}
	out, rest, err := w.walk(b, src[7:])
	if err != nil {
		return b, err
	}
	if len(rest) != 0 {
		return b, errBadMessage
	}
	return out, nil
}

// walker re-encodes a serialized message.
type walker struct {
	proto int
	shape *nullShape
	path  []int // indices from the top-level reply down to the current one
}

// maxDepth bounds the nesting walked: far above what Redis writes (a Lua
// script's reply stops near 8,000 levels).
const maxDepth = 1 << 16

func (w *walker) walk(b, src []byte) (out, rest []byte, err error) {
	if len(src) < 9 || len(w.path) > maxDepth {
		return b, nil, errBadMessage
	}
	typ := src[0]
	n := binary.BigEndian.Uint64(src[1:9])
	src = src[9:]
	switch typ {
	case ':':
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(n), 10)
		return append(b, '\r', '\n'), src, nil
	case '#':
		if n == 1 {
			return append(b, '#', 't', '\r', '\n'), src, nil
		}
		return append(b, '#', 'f', '\r', '\n'), src, nil
	case '_':
		if w.shape.nullArray(w.path) {
			return appendNullArray(b, w.proto), src, nil
		}
		return appendNull(b, w.proto), src, nil
	case '*', '~', '%':
		if n > uint64(len(src)) { // every child takes at least 9 bytes
			return b, nil, errBadMessage
		}
		count := n
		if typ == '%' {
			count = n / 2
		}
		b = append(b, typ)
		b = strconv.AppendUint(b, count, 10)
		b = append(b, '\r', '\n')
		for i := uint64(0); i < n; i++ {
			w.path = append(w.path, int(i))
			b, src, err = w.walk(b, src)
			w.path = w.path[:len(w.path)-1]
			if err != nil {
				return b, nil, err
			}
		}
		return b, src, nil
	case '+', '-', ',', '(':
		if n > uint64(len(src)) {
			return b, nil, errBadMessage
		}
		b = append(b, typ)
		b = append(b, src[:n]...)
		return append(b, '\r', '\n'), src[n:], nil
	case '$', '!', '=':
		if n > uint64(len(src)) {
			return b, nil, errBadMessage
		}
		b = append(b, typ)
		b = strconv.AppendUint(b, n, 10)
		b = append(b, '\r', '\n')
		b = append(b, src[:n]...)
		return append(b, '\r', '\n'), src[n:], nil
	}
	return b, nil, errBadMessage
}

// nullShape says where a command's RESP2 reply holds a null array ("*-1")
// rather than a null bulk string ("$-1"). The table follows Redis 7.0's
// addReplyNullArray calls: blocking pops that time out, EXEC of a
// transaction whose WATCHed key changed, LPOP/RPOP with a count on a
// missing key, LMPOP/ZMPOP with nothing to pop, XREAD/XREADGROUP with
// nothing to read (and entries deleted under a pending ID), XRANGE with
// COUNT 0, the missing members of GEOPOS and the consumer list of an empty
// XPENDING summary. Inside EXEC each element follows its own command, and
// BLMOVE/BRPOPLPUSH, which cannot block there, answer a null bulk string.
type nullShape struct {
	kind   shapeKind
	queued []nullShape // EXEC: the queued commands
}

type shapeKind uint8

const (
	shapeBulk     shapeKind = iota // nulls are null bulk strings
	shapeTop                       // a null reply is a null array
	shapeBlmove                    // a null array outside EXEC, a null bulk inside
	shapeBlmoveTx                  // BLMOVE inside EXEC: null bulk
	shapeGeopos                    // elements are null arrays
	shapeXread                     // every null is a null array
	shapeXpending                  // the fourth element of the summary
	shapeExec                      // EXEC: null array on abort, else per queued command
)

// shapeOf returns the null shape of a command given its lower-case name
// and its arguments.
func shapeOf(name string, args [][]byte) nullShape {
	switch name {
	case "blpop", "brpop", "blmpop", "lmpop", "bzpopmin", "bzpopmax", "bzmpop", "zmpop", "xrange", "xrevrange":
		return nullShape{kind: shapeTop}
	case "lpop", "rpop":
		if len(args) == 3 {
			return nullShape{kind: shapeTop}
		}
	case "blmove", "brpoplpush":
		return nullShape{kind: shapeBlmove}
	case "geopos":
		return nullShape{kind: shapeGeopos}
	case "xread", "xreadgroup":
		return nullShape{kind: shapeXread}
	case "xpending":
		return nullShape{kind: shapeXpending}
	}
	return nullShape{}
}

func (s *nullShape) nullArray(path []int) bool {
	if s == nil {
		return false
	}
	switch s.kind {
	case shapeTop, shapeBlmove:
		return len(path) == 0
	case shapeGeopos:
		return len(path) == 1
	case shapeXread:
		return true
	case shapeXpending:
		return len(path) == 1 && path[0] == 3
	case shapeExec:
		if len(path) == 0 {
			return true
		}
		if path[0] < len(s.queued) {
			return s.queued[path[0]].nullArray(path[1:])
		}
	}
	return false
}

// inTx returns the shape of s when it runs inside a transaction.
func (s nullShape) inTx() nullShape {
	if s.kind == shapeBlmove {
		return nullShape{kind: shapeBlmoveTx}
	}
	return s
}
