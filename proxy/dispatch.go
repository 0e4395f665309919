package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/redis/rueidis"
)

// handler runs one command that the proxy answers itself.
type handler func(c *conn, args [][]byte)

// local lists the commands the proxy answers itself, by lower-case name.
var local map[string]handler

func init() {
	local = map[string]handler{
		"ping":     (*conn).ping,
		"echo":     (*conn).echo,
		"hello":    (*conn).hello,
		"auth":     (*conn).auth,
		"select":   (*conn).selectDB,
		"client":   (*conn).client,
		"info":     (*conn).infoCmd,
		"quit":     (*conn).quitCmd,
		"reset":    (*conn).reset,
		"multi":    (*conn).multi,
		"exec":     (*conn).exec,
		"discard":  (*conn).discard,
		"watch":    (*conn).watch,
		"unwatch":  (*conn).unwatch,
		"dbsize":   (*conn).dbsize,
		"keys":     (*conn).keysCmd,
		"flushall": (*conn).flushAll,
		"flushdb":  (*conn).flushAll,
		"scan":     (*conn).scan,
		"script":   (*conn).script,
		"role":     (*conn).role,
		"config":   (*conn).config,
	}
	local["function"] = (*conn).function
	local["randomkey"] = (*conn).randomKey
	local["cluster"] = (*conn).clusterCmd
	local["readonly"] = (*conn).okCmd
	local["readwrite"] = (*conn).okCmd
	local["asking"] = (*conn).okCmd
	for _, name := range refusedNames {
		local[name] = (*conn).refuse
	}
}

// refusedNames are commands the proxy answers with an error: pub/sub
// (a subscribed connection would need its own upstream connection per
// client), replication and node administration, and per-connection
// features the pass-through cannot keep (MONITOR, client tracking).
var refusedNames = []string{
	"subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe",
	"monitor", "sync", "psync", "replconf", "replicaof", "slaveof", "shutdown", "debug",
	"failover", "swapdb", "move", "migrate",
	"save", "bgsave", "bgrewriteaof", "lastsave", "acl", "module",
	"wait", "waitaof", "slowlog", "latency",
}

// refusal says why a refused command is not served.
func refusal(name string) string {
	switch name {
	case "subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe":
		return "pub/sub is not supported by the hotcount proxy; PUBLISH works, subscribe on the cluster directly"
	case "monitor":
		return "MONITOR is not supported by the hotcount proxy; run it on a cluster node"
	}
	return strings.ToUpper(name) + " is not supported by the hotcount proxy; run it on the cluster nodes directly"
}

// notAuthed lists the commands a client may send before AUTH.
func notAuthed(name string) bool {
	return name == "auth" || name == "hello" || name == "quit" || name == "reset"
}

// run runs one command.
func (c *conn) run(args [][]byte) {
	s := c.s
	s.stats.commands.Add(1)
	if len(args[0]) == 0 {
		c.flushGroup()
		c.out = appendErr(c.out, unknownCommand(args))
		return
	}
	var nb [32]byte
	lname := lower(nb[:0], args[0])
	name := string(lname) // one allocation per command; names are short
	c.noteCommand(name)
	if !c.authed && !notAuthed(name) {
		c.flushGroup()
		c.out = appendErr(c.out, "NOAUTH Authentication required.")
		return
	}
	if h := local[name]; h != nil && (!c.tx.inMulti || txControl(name)) {
		c.flushGroup()
		h(c, args)
		return
	}
	if strings.HasSuffix(name, "subscribe") {
		// Never passed on: rueidis keeps subscriptions to itself.
		c.flushGroup()
		c.out = appendErr(c.out, unknownCommand(args))
		return
	}
	ci := s.cmds.lookup(args)
	strs := c.strings(args)
	if c.tx.inMulti {
		c.flushGroup()
		c.txQueue(name, ci, args, strs)
		return
	}
	if ci == nil || !ci.arityOK(len(args)) {
		// Any node answers the unknown-command or arity error.
		c.queue(strs, -1, ci, nil)
		return
	}
	keys, ok := ci.keyIndexes(args, c.keybuf[:0])
	c.keybuf = keys
	if !ok {
		c.flushGroup()
		if keys, ok = c.getKeys(strs); !ok {
			return // answered
		}
	}
	var counter []bool
	for i, k := range keys {
		if s.ownKey(strs[k]) {
			c.flushGroup()
			c.s.stats.refused.Add(1)
			c.out = appendErr(c.out, ownKeyErr(strs[k]))
			return
		}
		if _, ok := s.counters.Namespace(strs[k]); ok {
			if counter == nil {
				counter = make([]bool, len(keys))
			}
			counter[i] = true
		}
	}
	switch {
	case counter != nil:
		c.flushGroup()
		c.counterCommand(name, ci, args, strs, keys, counter)
	case len(keys) == 0:
		if name == "eval" || name == "eval_ro" {
			c.flushGroup()
			c.loadEverywhere(strs[1])
		}
		c.queue(strs, keyAnchor, ci, args)
	default:
		if _, same := c.slotOf(strs, keys); !same {
			c.flushGroup()
			c.crossSlot(name, ci, strs, keys, nil)
			return
		}
		if ci.blocks(args) {
			c.flushGroup()
			c.blocking(ci.baseName(), strs, keys[0], args)
			return
		}
		c.queue(strs, keys[0], ci, args)
	}
}

// txControl names the commands that act on a transaction rather than
// being queued in it.
func txControl(name string) bool {
	switch name {
	case "exec", "discard", "multi", "watch", "quit", "reset":
		return true
	}
	return false
}

// noteCommand records the last command for CLIENT INFO and LIST.
func (c *conn) noteCommand(name string) {
	c.lastActive.Store(c.s.cfg.Clock.Now().UnixNano())
	c.meta.Lock()
	c.meta.lastCmd = name
	c.meta.Unlock()
}

// strings copies a command's arguments into strings (rueidis keeps them
// until the reply arrives; the read buffer is reused before that). An
// argument of bigArg bytes or more is not copied: its string points into
// the read buffer, and the connection then leaves that buffer to the
// garbage collector instead of reusing it (handleBatch), so that a large
// value passed through costs its read buffer alone, which the memory
// budget counts, not a second copy.
func (c *conn) strings(args [][]byte) []string {
	strs := make([]string, len(args))
	for i, a := range args {
		if len(a) >= bigArg {
			strs[i] = unsafe.String(&a[0], len(a))
			c.aliased = true
			continue
		}
		strs[i] = string(a)
	}
	return strs
}

// bigArg: arguments at least this long are not copied (see strings).
const bigArg = 256 << 10

// slotOf returns the slot of the keys and whether they share it (always,
// when the upstream is not a cluster).
func (c *conn) slotOf(strs []string, keys []int) (uint16, bool) {
	if len(keys) == 0 {
		return 0, true
	}
	slot := keyspace.Slot(strs[keys[0]])
	if !c.s.cluster {
		return slot, true
	}
	for _, k := range keys[1:] {
		if keyspace.Slot(strs[k]) != slot {
			return slot, false
		}
	}
	return slot, true
}

// build makes the rueidis command for strs, routed by the key at position
// key (-1: any node). rueidis computes the slot from that one key; the
// others share it (checked by the caller).
func (c *conn) build(strs []string, key int) (cmd rueidis.Completed) {
	b := c.s.upstream(c.proto).B()
	if key == keyAnchor {
		return b.Arbitrary(strs...).Build().SetSlot(anchorKey)
	}
	if key <= 0 {
		return b.Arbitrary(strs...).Build()
	}
	return b.Arbitrary(strs[:key]...).Keys(strs[key]).Args(strs[key+1:]...).Build()
}

// queue adds a pass-through command to the batch's group. A command
// without a key (key < 0: any node answers it) never shares a group with
// commands that have one: rueidis refuses (panics on) a DoMulti that mixes
// the two across slots, so the group is sent first.
func (c *conn) queue(strs []string, key int, ci *cmdInfo, args [][]byte) {
	shape := nullShape{}
	if ci != nil && args != nil {
		shape = shapeOf(ci.baseName(), args)
	}
	noSlot := key <= 0 && key != keyAnchor
	if len(c.group.cmds) > 0 && noSlot != c.group.noSlot {
		c.flushGroup()
	}
	c.group.noSlot = noSlot
	c.s.stats.passed.Add(1)
	c.group.cmds = append(c.group.cmds, c.build(strs, key))
	c.group.shapes = append(c.group.shapes, shape)
}

// baseName is the command's name without its subcommand.
func (ci *cmdInfo) baseName() string {
	name, _, _ := strings.Cut(ci.name, "|")
	return name
}

// do sends one command now and appends its reply.
func (c *conn) do(strs []string, key int, shape nullShape) {
	c.s.stats.passed.Add(1)
	ctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.Timeout)
	defer cancel()
	res := c.s.upstream(c.proto).Do(ctx, c.build(strs, key))
	c.appendResult(&res, &shape)
}

// blocking runs a command that may block (BLPOP, XREAD BLOCK, ...) on a
// connection of rueidis's blocking pool. It waits as long as the command
// asks, and ends when the client hangs up or the proxy shuts down. It
// counts in INFO's blocked_clients from the moment it is sent (a command
// that finds its data at once counts for that instant too).
func (c *conn) blocking(name string, strs []string, key int, args [][]byte) {
	c.s.stats.passed.Add(1)
	b := c.s.upstream(c.proto).B()
	cmd := b.Arbitrary(strs[:key]...).Keys(strs[key]).Args(strs[key+1:]...).Blocking()
	shape := shapeOf(name, args)
	c.s.stats.blocked.Add(1) // INFO's blocked_clients, until the reply or the hang-up
	defer c.s.stats.blocked.Add(-1)
	c.watchClient(func(ctx context.Context) {
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		c.meta.Lock()
		c.meta.unblock = cancel
		c.meta.Unlock()
		res := c.s.upstream(c.proto).Do(ctx, cmd)
		c.meta.Lock()
		c.meta.unblock = nil
		c.meta.Unlock()
		if res.NonRedisError() != nil {
			switch context.Cause(ctx) {
			case errUnblockTimeout: // the command's own timeout reply
				if shape.kind == shapeBlmove {
					c.out = appendNull(c.out, c.proto)
				} else {
					c.out = appendNullArray(c.out, c.proto)
				}
				return
			case errUnblockError:
				c.out = appendErr(c.out, "UNBLOCKED client unblocked via CLIENT UNBLOCK")
				return
			}
		}
		c.appendResult(&res, &shape)
	})
}

// The causes CLIENT UNBLOCK gives a blocking command it ends.
var (
	errUnblockTimeout = errors.New("CLIENT UNBLOCK TIMEOUT")
	errUnblockError   = errors.New("CLIENT UNBLOCK ERROR")
)

// unblockClient: CLIENT UNBLOCK id [TIMEOUT|ERROR]. It ends the blocking
// command of the proxy's client id (the upstream wait ends with it) and
// answers 1, or 0 when that client is not in a blocking command.
func (c *conn) unblockClient(args [][]byte) {
	cause := errUnblockTimeout
	if len(args) == 4 {
		var nb [32]byte
		switch string(lower(nb[:0], args[3])) {
		case "timeout":
		case "error":
			cause = errUnblockError
		default:
			c.out = appendErr(c.out, "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
			return
		}
	}
	id, ok := string2ll(args[2])
	if !ok {
		c.out = appendErr(c.out, "ERR value is not an integer or out of range")
		return
	}
	var unblock func(error)
	s := c.s
	s.mu.Lock()
	for o := range s.conns {
		if o.id == id {
			o.meta.Lock()
			unblock = o.meta.unblock
			o.meta.Unlock()
			break
		}
	}
	s.mu.Unlock()
	if unblock == nil {
		c.out = appendInt(c.out, 0)
		return
	}
	unblock(cause)
	c.out = appendInt(c.out, 1)
}

// getKeys asks the cluster for the keys of a movable-key command the
// proxy has no rule for (COMMAND GETKEYS). When the cluster answers an
// error (the arguments are wrong), that error is the reply and ok is
// false.
func (c *conn) getKeys(strs []string) (keys []int, ok bool) {
	ctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.Timeout)
	defer cancel()
	up := c.s.upstream(c.proto)
	res := up.Do(ctx, up.B().Arbitrary("COMMAND", "GETKEYS").Args(strs...).Build())
	if err := res.NonRedisError(); err != nil {
		c.out = appendErr(c.out, upstreamError(err))
		return nil, false
	}
	if err := res.Error(); err != nil {
		// e.g. "Invalid arguments specified for command": forward the
		// command itself to any node, which answers its own error.
		c.do(strs, -1, nullShape{})
		return nil, false
	}
	names, _ := res.AsStrSlice()
	used := make([]bool, len(strs))
	for _, n := range names {
		for i := 1; i < len(strs); i++ {
			if !used[i] && strs[i] == n {
				used[i] = true
				keys = append(keys, i)
				break
			}
		}
	}
	return keys, true
}

// unknownCommand is Redis's reply to a command it does not know.
func unknownCommand(args [][]byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ERR unknown command '%.128s', with args beginning with: ", args[0])
	for _, a := range args[1:] {
		if b.Len() > 1024 {
			break
		}
		fmt.Fprintf(&b, "'%.128s' ", a)
	}
	return b.String()
}

// refuse answers a command the proxy does not serve.
func (c *conn) refuse(args [][]byte) {
	c.s.stats.refused.Add(1)
	var nb [32]byte
	name := string(lower(nb[:0], args[0]))
	if (name == "config" || name == "function") && len(args) > 1 {
		// Other subcommands are served: name the one refused.
		name += " " + strings.ToLower(string(args[1]))
	}
	c.out = appendErr(c.out, "ERR "+refusal(name))
}

// counterNames lists what counter keys accept, for error messages.
const counterNames = "GET, MGET, SET <integer>, INCR, INCRBY, DECR, DECRBY, DEL, UNLINK, EXISTS, TYPE, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST"

// notForCounters is the error for a command a counter key does not
// accept.
func notForCounters(name, key string) string {
	return fmt.Sprintf("ERR %s is not supported on counter key '%.200s'; counter keys accept %s",
		strings.ToUpper(name), key, counterNames)
}

// counterInMulti is the error for a counter key named inside MULTI: its
// command may be one counter keys accept outside a transaction.
func counterInMulti(name, key string) string {
	return fmt.Sprintf("ERR %s inside MULTI is not supported on counter key '%.200s': counter keys take no part in transactions (outside MULTI they accept %s)",
		strings.ToUpper(name), key, counterNames)
}

// replyOf returns the reply mode of the counter namespace of key.
func (c *conn) replyOf(ns hotcount.Namespace) Reply {
	if r, ok := c.s.cfg.Replies[ns.Prefix]; ok {
		return r
	}
	return ReplyEstimate
}
