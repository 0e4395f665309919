package proxy

import (
	"bytes"
	"fmt"
	"math"
)

// Requests are parsed as Redis 7.0 parses them (networking.c:
// processInlineBuffer, processMultibulkBuffer), so that malformed input
// gets the same error text at the same moment as from Redis:
//
//   - A request starting with '*' is a multibulk request: "*<count>\r",
//     then <count> times "$<len>\r" and <len> bytes. A line ends at its
//     '\r'; the byte after it is skipped unread, as are the two bytes
//     after a bulk argument. A count of 0 or less is an empty request,
//     ignored. A count line or a bulk length line that is still
//     unfinished past 64 KiB is refused ("too big mbulk count string",
//     "too big bulk count string"). A count that is not an integer or
//     above 2^31-1 is "invalid multibulk length"; a bulk length that is
//     not an integer, negative or above the largest bulk (MaxBulkLen) is
//     "invalid bulk length", at once, before any of its data is read.
//   - Anything else is an inline command: one line, split as Redis splits
//     it (sdssplitargs: blanks separate arguments, "double quotes" take
//     \n, \r, \t, \b, \a and \xHH escapes, 'single quotes' take \', a
//     closing quote must be followed by a blank). An unfinished quote is
//     "unbalanced quotes in request"; a line unfinished past 64 KiB is
//     "too big inline request". An empty line is ignored.
//   - Before authentication (a proxy password set), a count above 10 or a
//     bulk above 16 KiB is refused ("unauthenticated multibulk length",
//     "unauthenticated bulk length").
//
// Lines are searched as C strings, as in Redis: a NUL byte before the end
// of a line hides the line's end.

// parseLimits are the bounds a request is parsed under.
type parseLimits struct {
	maxBulk int64 // the largest bulk argument (Config.MaxBulkLen)
	unauth  bool  // the client must still authenticate
}

// Redis's bounds before authentication.
const (
	unauthMaxCount = 10
	unauthMaxBulk  = 16384
)

// parseRequest reads the first request in data. It returns the bytes the
// request takes (0: the request is not complete yet, read more) and its
// arguments, which alias data for a multibulk request (none for an empty
// request, which is to be skipped). need is, for an unfinished request,
// the length it has at least as far as its headers tell (0: not known
// beyond what arrived). A malformed request returns a protocolError.
func parseRequest(data []byte, argbuf [][]byte, lim parseLimits) (n int, args [][]byte, need int, err error) {
	args = argbuf[:0]
	if len(data) == 0 {
		return 0, args, 0, nil
	}
	if data[0] != '*' {
		n, args, err := parseInline(data, args)
		return n, args, 0, err
	}
	cr := lineEnd(data, '\r')
	if cr < 0 {
		if len(data) > MaxInlineSize {
			return 0, args, 0, protocolError("too big mbulk count string")
		}
		return 0, args, 0, nil
	}
	if cr > len(data)-2 {
		return 0, args, 0, nil // the byte after '\r' is still to come
	}
	count, ok := string2ll(data[1:cr])
	if !ok || count > math.MaxInt32 {
		return 0, args, 0, protocolError("invalid multibulk length")
	}
	if count > unauthMaxCount && lim.unauth {
		return 0, args, 0, protocolError("unauthenticated multibulk length")
	}
	pos := cr + 2
	if count <= 0 {
		return pos, args, 0, nil
	}
	for i := int64(0); i < count; i++ {
		rest := data[pos:]
		cr := lineEnd(rest, '\r')
		if cr < 0 {
			if len(rest) > MaxInlineSize {
				return 0, args, 0, protocolError("too big bulk count string")
			}
			return 0, args, 0, nil
		}
		if cr > len(rest)-2 {
			return 0, args, 0, nil
		}
		if rest[0] != '$' {
			ch := rest[0]
			if ch == '\r' || ch == '\n' {
				ch = ' ' // Redis writes no line break in an error
			}
			return 0, args, 0, protocolError(fmt.Sprintf("expected '$', got '%c'", ch))
		}
		ll, ok := string2ll(rest[1:cr])
		if !ok || ll < 0 || ll > lim.maxBulk {
			return 0, args, 0, protocolError("invalid bulk length")
		}
		if ll > unauthMaxBulk && lim.unauth {
			return 0, args, 0, protocolError("unauthenticated bulk length")
		}
		pos += cr + 2
		if int64(len(data)-pos) < ll+2 {
			return 0, args, pos + int(ll) + 2, nil
		}
		args = append(args, data[pos:pos+int(ll):pos+int(ll)])
		pos += int(ll) + 2
	}
	return pos, args, 0, nil
}

// lineEnd returns the index of the first c in data, or -1 when there is
// none before the first NUL byte (Redis searches with strchr).
func lineEnd(data []byte, c byte) int {
	i := bytes.IndexByte(data, c)
	if i < 0 {
		return -1
	}
	if bytes.IndexByte(data[:i], 0) >= 0 {
		return -1
	}
	return i
}

// parseInline reads an inline command: one line split into arguments as
// Redis's sdssplitargs splits it. The arguments are copies.
func parseInline(data []byte, args [][]byte) (int, [][]byte, error) {
	nl := lineEnd(data, '\n')
	if nl < 0 {
		if len(data) > MaxInlineSize {
			return 0, args, protocolError("too big inline request")
		}
		return 0, args, nil
	}
	line := data[:nl]
	if nl > 0 && data[nl-1] == '\r' {
		line = data[:nl-1]
	}
	args, ok := splitArgs(line, args)
	if !ok {
		return 0, args[:0], protocolError("unbalanced quotes in request")
	}
	return nl + 1, args, nil
}

// isSpace is C's isspace.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func hexVal(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// splitArgs is Redis's sdssplitargs over line (which holds no NUL before
// its end, see lineEnd; a NUL ends it as in C). ok is false for
// unbalanced quotes.
func splitArgs(line []byte, args [][]byte) (_ [][]byte, ok bool) {
	at := func(i int) byte { // C string access: 0 past the end
		if i < len(line) {
			return line[i]
		}
		return 0
	}
	p := 0
	for {
		for at(p) != 0 && isSpace(at(p)) {
			p++
		}
		if at(p) == 0 {
			return args, true
		}
		var cur []byte
		inq, insq, done := false, false, false
		for !done {
			c := at(p)
			switch {
			case inq:
				switch {
				case c == '\\' && at(p+1) == 'x' && isHex(at(p+2)) && isHex(at(p+3)):
					cur = append(cur, hexVal(at(p+2))*16+hexVal(at(p+3)))
					p += 3
				case c == '\\' && at(p+1) != 0:
					p++
					switch e := at(p); e {
					case 'n':
						cur = append(cur, '\n')
					case 'r':
						cur = append(cur, '\r')
					case 't':
						cur = append(cur, '\t')
					case 'b':
						cur = append(cur, '\b')
					case 'a':
						cur = append(cur, '\a')
					default:
						cur = append(cur, e)
					}
				case c == '"':
					if n := at(p + 1); n != 0 && !isSpace(n) {
						return args, false
					}
					done = true
				case c == 0:
					return args, false
				default:
					cur = append(cur, c)
				}
			case insq:
				switch {
				case c == '\\' && at(p+1) == '\'':
					p++
					cur = append(cur, '\'')
				case c == '\'':
					if n := at(p + 1); n != 0 && !isSpace(n) {
						return args, false
					}
					done = true
				case c == 0:
					return args, false
				default:
					cur = append(cur, c)
				}
			default:
				switch c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					cur = append(cur, c)
				}
			}
			if at(p) != 0 {
				p++
			}
		}
		if cur == nil {
			cur = []byte{}
		}
		args = append(args, cur)
	}
}

// string2ll is Redis's string2ll: a decimal int64 with an optional '-',
// no '+', no leading zeros, no blanks, at most 20 characters.
func string2ll(s []byte) (int64, bool) {
	if len(s) == 0 || len(s) >= 21 {
		return 0, false
	}
	if len(s) == 1 && s[0] == '0' {
		return 0, true
	}
	neg := false
	if s[0] == '-' {
		neg = true
		s = s[1:]
		if len(s) == 0 {
			return 0, false
		}
	}
	if s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	if neg {
		if v > uint64(math.MaxInt64)+1 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}
