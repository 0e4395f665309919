package rediscluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// defaultIOTimeout bounds one exchange when ctx has no deadline.
const defaultIOTimeout = 10 * time.Second

// maxReplyDepth bounds nesting of array replies.
const maxReplyDepth = 16

// maxBulkLen bounds a bulk string's announced length: Redis's own limit
// (proto-max-bulk-len, 512 MB). Longer is a broken or hostile reply.
const maxBulkLen = 512 << 20

// preallocElems bounds what an array's announced length allocates before
// its elements arrive: a larger array grows as they are read.
const preallocElems = 1024

// reply is one parsed RESP2 reply.
type reply struct {
	kind  byte // '+', '-', ':', '$', '*'
	str   string
	isNil bool
	elems []reply
}

// text renders r the way Do returns it: strings as they are, integers in
// decimal, array elements one per line.
func (r reply) text() string {
	if r.kind != '*' {
		return r.str
	}
	parts := make([]string, len(r.elems))
	for i, e := range r.elems {
		parts[i] = e.text()
	}
	return strings.Join(parts, "\n")
}

// err returns the error r stands for, if any.
func (r reply) err() error {
	switch {
	case r.kind == '-':
		return fmt.Errorf("%w: %s", ErrReply, r.str)
	case r.isNil:
		return ErrNil
	}
	return nil
}

// Do runs one command on the node at addr over a fresh connection and returns
// the reply as text: a status or bulk string as it is, an integer in decimal,
// an array with one element per line. An error reply wraps ErrReply (the
// message, e.g. "MOVED 3999 127.0.0.1:7001", follows); a nil reply is ErrNil.
// Redirects are not followed (see Cluster.Do). Without a ctx deadline the
// exchange is bounded by 10 s.
func Do(ctx context.Context, addr string, args ...string) (string, error) {
	rs, err := exchange(ctx, addr, [][]string{args})
	if err != nil {
		return "", err
	}
	if err := rs[0].err(); err != nil {
		return "", err
	}
	return rs[0].text(), nil
}

// DoAll runs cmds pipelined on one fresh connection to addr, e.g. AUTH and
// then a command, and returns each reply as text (as Do does). The first
// error reply ends it with that error.
func DoAll(ctx context.Context, addr string, cmds ...[]string) ([]string, error) {
	rs, err := exchange(ctx, addr, cmds)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		if err := r.err(); err != nil {
			return nil, err
		}
		out[i] = r.text()
	}
	return out, nil
}

// exchange sends cmds pipelined on one connection and reads one reply each.
func exchange(ctx context.Context, addr string, cmds [][]string) ([]reply, error) {
	for _, c := range cmds {
		if len(c) == 0 {
			return nil, fmt.Errorf("%w: empty command", ErrInvalidOptions)
		}
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultIOTimeout)
	}
	d := net.Dialer{Deadline: deadline}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rediscluster: %s: %w", addr, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("rediscluster: %s: %w", addr, err)
	}
	// Closing the connection on cancellation unblocks the exchange.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(c))
		for _, a := range c {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return nil, fmt.Errorf("rediscluster: %s: %w", addr, ctxErr(ctx, err))
	}
	br := bufio.NewReader(conn)
	out := make([]reply, len(cmds))
	for i := range cmds {
		if out[i], err = readReply(br, 0); err != nil {
			return nil, fmt.Errorf("rediscluster: %s: %w", addr, ctxErr(ctx, err))
		}
	}
	return out, nil
}

// ctxErr prefers the context's error when it caused err.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// readReply reads one RESP2 reply.
func readReply(br *bufio.Reader, depth int) (reply, error) {
	if depth > maxReplyDepth {
		return reply{}, fmt.Errorf("%w: nesting too deep", ErrProtocol)
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return reply{}, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return reply{}, fmt.Errorf("%w: bad line %q", ErrProtocol, line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+', '-', ':':
		return reply{kind: kind, str: body}, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > maxBulkLen {
			return reply{}, fmt.Errorf("%w: bad bulk length %q", ErrProtocol, body)
		}
		if n == -1 {
			return reply{kind: kind, isNil: true}, nil
		}
		// Read as it arrives: a length the reply does not carry costs no
		// more than what came.
		var buf strings.Builder
		if _, err := io.CopyN(&buf, br, int64(n)+2); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return reply{}, err
		}
		str := buf.String()
		if str[n:] != "\r\n" {
			return reply{}, fmt.Errorf("%w: bulk string of %d bytes not ended by CRLF", ErrProtocol, n)
		}
		return reply{kind: kind, str: str[:n]}, nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return reply{}, fmt.Errorf("%w: bad array length %q", ErrProtocol, body)
		}
		if n == -1 {
			return reply{kind: kind, isNil: true}, nil
		}
		r := reply{kind: kind, elems: make([]reply, 0, min(n, preallocElems))}
		for range n {
			e, err := readReply(br, depth+1)
			if err != nil {
				return reply{}, err
			}
			r.elems = append(r.elems, e)
		}
		return r, nil
	}
	return reply{}, fmt.Errorf("%w: unknown reply type %q", ErrProtocol, kind)
}

// CommandStats parses INFO commandstats of the node at addr into command name
// (lowercase, e.g. "incrby", "get", "evalsha"; subcommands as
// "cluster|nodes") -> number of calls since start or CONFIG RESETSTAT.
func CommandStats(ctx context.Context, addr string) (map[string]int64, error) {
	s, err := Do(ctx, addr, "INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	return parseCommandStats(s)
}

// parseCommandStats parses the text of INFO commandstats.
func parseCommandStats(s string) (map[string]int64, error) {
	out := make(map[string]int64)
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("%w: commandstats line %q", ErrProtocol, line)
		}
		found := false
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%w: commandstats line %q", ErrProtocol, line)
				}
				out[strings.ToLower(name)] = n
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: commandstats line %q has no calls", ErrProtocol, line)
		}
	}
	return out, nil
}

// infoField returns the value of field in INFO text, and whether it is there.
func infoField(info, field string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, true
		}
	}
	return "", false
}
