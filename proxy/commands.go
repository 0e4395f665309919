package proxy

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// cmdInfo is what the proxy knows of one Redis command: its arity and
// where its keys are. It is read from the cluster at start (COMMAND), so
// it matches the Redis version behind the proxy.
type cmdInfo struct {
	name     string // lower case; "object|encoding" for a subcommand
	arity    int    // Redis convention: negative means "at least -arity"
	first    int    // first key position, 0 for none
	last     int    // last key position; negative counts from the end
	step     int
	movable  bool // keys depend on the arguments (numkeys, STREAMS, ...)
	blocking bool // may block the connection (BLPOP, XREAD BLOCK, ...)
	write    bool
	noMulti  bool // Redis refuses it inside MULTI (SAVE, SHUTDOWN, ...)
	subs     map[string]*cmdInfo
}

// commandTable maps lower-case command names to what is known of them.
type commandTable map[string]*cmdInfo

// loadCommands reads the command table of the cluster with COMMAND.
func loadCommands(ctx context.Context, c rueidis.Client) (commandTable, error) {
	res := c.Do(ctx, c.B().Command().Build())
	entries, err := res.ToArray()
	if err != nil {
		return nil, fmt.Errorf("COMMAND: %w", err)
	}
	t := make(commandTable, len(entries))
	for i := range entries {
		ci, err := parseCommand(&entries[i])
		if err != nil {
			return nil, err
		}
		t[ci.name] = ci
	}
	if len(t) == 0 {
		return nil, fmt.Errorf("COMMAND: empty reply")
	}
	return t, nil
}

// parseCommand reads one entry of the COMMAND reply: name, arity, flags,
// first key, last key, step, then (Redis 7) ACL categories, tips, key
// specifications and subcommands.
func parseCommand(m *rueidis.RedisMessage) (*cmdInfo, error) {
	f, err := m.ToArray()
	if err != nil || len(f) < 6 {
		return nil, fmt.Errorf("COMMAND: unexpected entry %v", m)
	}
	name, err := f[0].ToString()
	if err != nil {
		return nil, fmt.Errorf("COMMAND: entry name: %w", err)
	}
	ci := &cmdInfo{name: strings.ToLower(name)}
	ints := []*int{&ci.arity, &ci.first, &ci.last, &ci.step}
	for i, k := range []int{1, 3, 4, 5} {
		v, err := f[k].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("COMMAND %s: field %d: %w", name, k, err)
		}
		*ints[i] = int(v)
	}
	flags, _ := f[2].ToArray()
	for i := range flags {
		switch s, _ := flags[i].ToString(); s {
		case "movablekeys":
			ci.movable = true
		case "blocking":
			ci.blocking = true
		case "write":
			ci.write = true
		case "no_multi":
			ci.noMulti = true
		}
	}
	if len(f) >= 10 {
		subs, _ := f[9].ToArray()
		for i := range subs {
			sub, err := parseCommand(&subs[i])
			if err != nil {
				return nil, err
			}
			if ci.subs == nil {
				ci.subs = make(map[string]*cmdInfo, len(subs))
			}
			_, short, _ := strings.Cut(sub.name, "|")
			ci.subs[short] = sub
		}
	}
	return ci, nil
}

// lookup returns the info of the command in args (its subcommand's, for a
// container command such as OBJECT), or nil for an unknown command.
func (t commandTable) lookup(args [][]byte) *cmdInfo {
	var lb [32]byte
	ci := t[string(lower(lb[:0], args[0]))]
	if ci == nil || ci.subs == nil || len(args) < 2 {
		return ci
	}
	if sub := ci.subs[string(lower(lb[:0], args[1]))]; sub != nil {
		return sub
	}
	return ci
}

// arityOK reports whether args satisfies the command's arity.
func (ci *cmdInfo) arityOK(n int) bool {
	if ci.arity >= 0 {
		return n == ci.arity
	}
	return n >= -ci.arity
}

// keyIndexes appends to dst the positions of the keys in args. ok is false
// when the keys cannot be told from the arguments alone (the caller asks
// the cluster with COMMAND GETKEYS) — only for movable-key commands the
// proxy has no rule for.
func (ci *cmdInfo) keyIndexes(args [][]byte, dst []int) (keys []int, ok bool) {
	if ci.movable {
		return movableKeys(ci.name, args, dst)
	}
	if ci.first <= 0 || ci.step <= 0 {
		return dst, true
	}
	last := ci.last
	if last < 0 {
		last = len(args) + last
	}
	if last >= len(args) {
		last = len(args) - 1
	}
	for i := ci.first; i <= last; i += ci.step {
		dst = append(dst, i)
	}
	return dst, true
}

// movableKeys finds the keys of the common movable-key commands.
func movableKeys(name string, args [][]byte, dst []int) ([]int, bool) {
	// numkeysAt: the argument at pos is a key count, keys follow it.
	numkeysAt := func(pos int) ([]int, bool) {
		if pos >= len(args) {
			return dst, true // too short: Redis answers the arity error
		}
		n, err := strconv.Atoi(string(args[pos]))
		if err != nil || n < 0 || pos+1+n > len(args) {
			return dst, true // Redis answers the syntax error, from any node
		}
		for i := pos + 1; i <= pos+n; i++ {
			dst = append(dst, i)
		}
		return dst, true
	}
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return numkeysAt(2)
	case "zunion", "zinter", "zdiff", "sintercard", "zintercard", "lmpop", "zmpop":
		return numkeysAt(1)
	case "zunionstore", "zinterstore", "zdiffstore":
		if len(args) > 1 {
			dst = append(dst, 1)
		}
		return numkeysAt(2)
	case "blmpop", "bzmpop":
		return numkeysAt(2)
	case "xread", "xreadgroup":
		for i := 1; i < len(args); i++ {
			if bytes.EqualFold(args[i], []byte("streams")) {
				rest := len(args) - i - 1
				if rest == 0 || rest%2 != 0 {
					return dst, true
				}
				for k := i + 1; k <= i+rest/2; k++ {
					dst = append(dst, k)
				}
				return dst, true
			}
		}
		return dst, true
	}
	return dst, false
}

// blocks reports whether this call of a blocking-flagged command may
// block: XREAD and XREADGROUP only with BLOCK.
func (ci *cmdInfo) blocks(args [][]byte) bool {
	if !ci.blocking {
		return false
	}
	if ci.name == "xread" || ci.name == "xreadgroup" {
		for _, a := range args[1:] {
			if bytes.EqualFold(a, []byte("block")) {
				return true
			}
			if bytes.EqualFold(a, []byte("streams")) {
				return false
			}
		}
		return false
	}
	return true
}

// lower appends the ASCII lower case of s to dst.
func lower(dst, s []byte) []byte {
	for _, c := range s {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}
