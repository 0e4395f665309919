package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/proxy"
)

// fidelityCase is a sequence of commands on plain keys; {k}, {k2}, {k3}
// are keys of one slot, {x} a key of another slot.
type fidelityCase struct {
	name string
	cmds [][]string
}

func seq(cmds ...[]string) [][]string { return cmds }
func c(args ...string) []string       { return args }

// fidelityCases: every reply of every command must be byte-identical
// through the proxy and from the node that owns the slot.
var fidelityCases = []fidelityCase{
	{"SET GET", seq(c("SET", "{k}", "v"), c("GET", "{k}"))},
	{"GET missing", seq(c("GET", "{k}"))},
	{"SET EX TTL", seq(c("SET", "{k}", "v", "EX", "1000"), c("TTL", "{k}"))},
	{"SET NX XX GET", seq(c("SET", "{k}", "a", "NX"), c("SET", "{k}", "b", "NX"), c("SET", "{k}", "c", "XX", "GET"))},
	{"SETNX", seq(c("SETNX", "{k}", "a"), c("SETNX", "{k}", "b"))},
	{"GETSET GETDEL", seq(c("GETSET", "{k}", "a"), c("GETSET", "{k}", "b"), c("GETDEL", "{k}"), c("GETDEL", "{k}"))},
	{"GETEX PERSIST", seq(c("SET", "{k}", "a", "EX", "1000"), c("GETEX", "{k}", "PERSIST"), c("TTL", "{k}"))},
	{"APPEND STRLEN", seq(c("APPEND", "{k}", "ab"), c("APPEND", "{k}", "cd"), c("STRLEN", "{k}"), c("STRLEN", "{k2}"))},
	{"INCR DECR", seq(c("INCR", "{k}"), c("INCRBY", "{k}", "41"), c("DECR", "{k}"), c("DECRBY", "{k}", "-10"))},
	{"INCRBY overflow", seq(c("SET", "{k}", "9223372036854775807"), c("INCRBY", "{k}", "1"), c("INCR", "{k}"))},
	{"DECRBY overflow", seq(c("SET", "{k}", "-9223372036854775808"), c("DECR", "{k}"), c("DECRBY", "{k}", "1"))},
	{"INCR not integer", seq(c("SET", "{k}", "abc"), c("INCR", "{k}"), c("INCRBY", "{k}", "x"))},
	{"INCRBYFLOAT", seq(c("INCRBYFLOAT", "{k}", "1.5"), c("INCRBYFLOAT", "{k}", "2.25"))},
	{"SETRANGE GETRANGE", seq(c("SETRANGE", "{k}", "3", "abc"), c("GETRANGE", "{k}", "0", "-1"))},
	{"MSET MGET one slot", seq(c("MSET", "{k}", "1", "{k2}", "2"), c("MGET", "{k}", "{k2}", "{k3}"))},
	{"MSETNX CROSSSLOT", seq(c("MSETNX", "{k}", "1", "{x}", "2"))},
	{"SUNION CROSSSLOT", seq(c("SUNION", "{k}", "{x}"))},
	{"RENAME CROSSSLOT", seq(c("SET", "{k}", "1"), c("RENAME", "{k}", "{x}"))},
	{"RENAME", seq(c("SET", "{k}", "1"), c("RENAME", "{k}", "{k2}"), c("GET", "{k2}"), c("RENAME", "{k}", "{k3}"))},
	{"DEL EXISTS one slot", seq(c("SET", "{k}", "1"), c("EXISTS", "{k}", "{k2}", "{k}"), c("DEL", "{k}", "{k2}"))},
	{"UNLINK TOUCH", seq(c("SET", "{k}", "1"), c("TOUCH", "{k}", "{k2}"), c("UNLINK", "{k}"))},
	{"EXPIRE PERSIST", seq(c("SET", "{k}", "1"), c("EXPIRE", "{k}", "1000"), c("PERSIST", "{k}"), c("PERSIST", "{k}"), c("TTL", "{k}"))},
	{"EXPIREAT EXPIRETIME", seq(c("SET", "{k}", "1"), c("EXPIREAT", "{k}", "4102444800"), c("EXPIRETIME", "{k}"), c("PEXPIRETIME", "{k}"), c("EXPIRETIME", "{k2}"))},
	{"TYPE", seq(c("RPUSH", "{k}", "a"), c("TYPE", "{k}"), c("TYPE", "{k2}"))},
	{"WRONGTYPE", seq(c("RPUSH", "{k}", "a"), c("GET", "{k}"), c("INCR", "{k}"), c("SADD", "{k}", "x"))},
	{"list push range", seq(c("RPUSH", "{k}", "a", "b", "c"), c("LPUSH", "{k}", "z"), c("LRANGE", "{k}", "0", "-1"), c("LLEN", "{k}"))},
	{"LPOP RPOP", seq(c("RPUSH", "{k}", "a", "b", "c"), c("LPOP", "{k}"), c("RPOP", "{k}", "5"), c("LPOP", "{k}"))},
	{"LPOP count missing", seq(c("LPOP", "{k}", "2"), c("RPOP", "{k}"))},
	{"LINDEX LSET LREM", seq(c("RPUSH", "{k}", "a", "b", "a"), c("LINDEX", "{k}", "1"), c("LSET", "{k}", "1", "x"), c("LREM", "{k}", "0", "a"), c("LSET", "{k}", "9", "y"))},
	{"LTRIM LINSERT LPOS", seq(c("RPUSH", "{k}", "a", "b", "c", "d"), c("LTRIM", "{k}", "1", "-1"), c("LINSERT", "{k}", "BEFORE", "c", "q"), c("LPOS", "{k}", "c"), c("LPOS", "{k}", "nope"))},
	{"LMOVE RPOPLPUSH", seq(c("RPUSH", "{k}", "a", "b"), c("LMOVE", "{k}", "{k2}", "LEFT", "RIGHT"), c("RPOPLPUSH", "{k}", "{k2}"), c("LRANGE", "{k2}", "0", "-1"))},
	{"BLPOP ready", seq(c("RPUSH", "{k}", "a"), c("BLPOP", "{k}", "{k2}", "1"))},
	{"BLPOP timeout", seq(c("BLPOP", "{k}", "0.01"))},
	{"BLMOVE timeout", seq(c("BLMOVE", "{k}", "{k2}", "LEFT", "LEFT", "0.01"))},
	{"BZPOPMIN timeout", seq(c("BZPOPMIN", "{k}", "0.01"))},
	{"LMPOP empty", seq(c("LMPOP", "2", "{k}", "{k2}", "LEFT"), c("RPUSH", "{k2}", "a"), c("LMPOP", "2", "{k}", "{k2}", "LEFT"))},
	{"set ops", seq(c("SADD", "{k}", "1", "2", "3"), c("SADD", "{k2}", "2", "3", "4"), c("SINTER", "{k}", "{k2}"), c("SUNION", "{k}", "{k2}"), c("SDIFF", "{k}", "{k2}"), c("SINTERCARD", "2", "{k}", "{k2}"))},
	{"SISMEMBER SCARD SREM", seq(c("SADD", "{k}", "a", "b"), c("SISMEMBER", "{k}", "a"), c("SMISMEMBER", "{k}", "a", "z"), c("SCARD", "{k}"), c("SREM", "{k}", "a", "z"), c("SMEMBERS", "{k}"))},
	{"SMOVE SINTERSTORE", seq(c("SADD", "{k}", "a", "b"), c("SMOVE", "{k}", "{k2}", "a"), c("SINTERSTORE", "{k3}", "{k}", "{k2}"), c("SINTERSTORE", "{k3}", "{k}", "{x}"))},
	{"hash", seq(c("HSET", "{k}", "f", "v", "g", "w"), c("HGET", "{k}", "f"), c("HGET", "{k}", "nope"), c("HMGET", "{k}", "f", "x", "g"), c("HGETALL", "{k}"))},
	{"hash more", seq(c("HSET", "{k}", "f", "v"), c("HSETNX", "{k}", "f", "z"), c("HEXISTS", "{k}", "f"), c("HLEN", "{k}"), c("HKEYS", "{k}"), c("HVALS", "{k}"), c("HSTRLEN", "{k}", "f"), c("HDEL", "{k}", "f", "x"))},
	{"HINCRBY", seq(c("HINCRBY", "{k}", "n", "5"), c("HINCRBYFLOAT", "{k}", "m", "1.5"), c("HSET", "{k}", "s", "x"), c("HINCRBY", "{k}", "s", "1"))},
	{"zset", seq(c("ZADD", "{k}", "1", "a", "2", "b", "3", "c"), c("ZRANGE", "{k}", "0", "-1", "WITHSCORES"), c("ZSCORE", "{k}", "b"), c("ZSCORE", "{k}", "zz"), c("ZINCRBY", "{k}", "2.5", "a"))},
	{"zset more", seq(c("ZADD", "{k}", "1", "a", "2", "b"), c("ZRANK", "{k}", "b"), c("ZREVRANGE", "{k}", "0", "-1"), c("ZRANGEBYSCORE", "{k}", "-inf", "+inf", "WITHSCORES"), c("ZCARD", "{k}"), c("ZCOUNT", "{k}", "1", "1"))},
	{"ZPOPMIN ZMSCORE", seq(c("ZADD", "{k}", "1", "a", "2", "b"), c("ZMSCORE", "{k}", "a", "x"), c("ZPOPMIN", "{k}"), c("ZADD", "{k}", "INCR", "5", "b"), c("ZADD", "{k}", "NX", "9", "b"))},
	{"ZUNIONSTORE ZMPOP", seq(c("ZADD", "{k}", "1", "a"), c("ZUNIONSTORE", "{k3}", "2", "{k}", "{k2}"), c("ZMPOP", "1", "{k2}", "MIN"), c("ZRANGE", "{k3}", "0", "-1"))},
	{"geo", seq(c("GEOADD", "{k}", "13.361389", "38.115556", "Palermo"), c("GEOPOS", "{k}", "Palermo", "Nowhere"), c("GEODIST", "{k}", "Palermo", "Nowhere"))},
	{"stream", seq(c("XADD", "{k}", "1-1", "f", "v"), c("XADD", "{k}", "2-1", "g", "w"), c("XLEN", "{k}"), c("XRANGE", "{k}", "-", "+"), c("XRANGE", "{k}", "-", "+", "COUNT", "0"))},
	{"XREAD nothing", seq(c("XADD", "{k}", "1-1", "f", "v"), c("XREAD", "STREAMS", "{k}", "1-1"), c("XREAD", "COUNT", "1", "STREAMS", "{k}", "0"))},
	{"XPENDING empty", seq(c("XADD", "{k}", "1-1", "f", "v"), c("XGROUP", "CREATE", "{k}", "g", "$"), c("XPENDING", "{k}", "g"))},
	{"XREADGROUP deleted", seq(c("XADD", "{k}", "1-1", "f", "v"), c("XGROUP", "CREATE", "{k}", "g", "0"), c("XREADGROUP", "GROUP", "g", "c", "STREAMS", "{k}", ">"), c("XDEL", "{k}", "1-1"), c("XREADGROUP", "GROUP", "g", "c", "STREAMS", "{k}", "0"))},
	{"hyperloglog", seq(c("PFADD", "{k}", "a", "b", "c"), c("PFCOUNT", "{k}"))},
	{"bits", seq(c("SETBIT", "{k}", "7", "1"), c("GETBIT", "{k}", "7"), c("BITCOUNT", "{k}"), c("BITFIELD", "{k}", "GET", "u8", "0"))},
	{"EVAL", seq(c("SET", "{k}", "x"), c("EVAL", "return redis.call('GET', KEYS[1])", "1", "{k}"), c("EVAL", "return {1, 'a', false}", "1", "{k}"))},
	{"EVAL error", seq(c("EVAL", "return redis.call('INCR', KEYS[1], 'x')", "1", "{k}"), c("EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "1", "{k}"))},
	{"unknown command", seq(c("NOSUCHCMD", "{k}", "x"))},
	{"wrong arity", seq(c("GET"), c("GET", "{k}", "x"), c("SET", "{k}"))},
	{"OBJECT ENCODING", seq(c("SET", "{k}", "12"), c("OBJECT", "ENCODING", "{k}"), c("RPUSH", "{k2}", "a"), c("OBJECT", "ENCODING", "{k2}"))},
	{"SORT", seq(c("RPUSH", "{k}", "3", "1", "2"), c("SORT", "{k}"), c("SORT", "{k}", "DESC", "LIMIT", "0", "2"))},
	{"COPY LCS", seq(c("SET", "{k}", "ohmytext"), c("SET", "{k2}", "mynewtext"), c("LCS", "{k}", "{k2}"), c("COPY", "{k}", "{k3}"), c("GET", "{k3}"))},
	{"SETEX PSETEX", seq(c("SETEX", "{k}", "1000", "v"), c("PSETEX", "{k2}", "1000000", "w"), c("SETEX", "{k3}", "-1", "v"))},
	{"scan cursors", seq(c("HSET", "{k}", "f", "1"), c("HSCAN", "{k}", "0"), c("SADD", "{k2}", "a"), c("SSCAN", "{k2}", "0"), c("ZADD", "{k3}", "1", "a"), c("ZSCAN", "{k3}", "0"))},
	{"MULTI EXEC", seq(c("MULTI"), c("SET", "{k}", "1"), c("INCR", "{k}"), c("GET", "{k2}"), c("LPOP", "{k2}", "2"), c("EXEC"))},
	{"MULTI error EXECABORT", seq(c("MULTI"), c("SET", "{k}", "1"), c("INCR", "{k}", "x", "y"), c("EXEC"), c("GET", "{k}"))},
	{"MULTI runtime error", seq(c("SET", "{k}", "a"), c("MULTI"), c("INCR", "{k}"), c("SET", "{k2}", "b"), c("EXEC"))},
	{"MULTI DISCARD", seq(c("MULTI"), c("SET", "{k}", "1"), c("DISCARD"), c("GET", "{k}"), c("EXEC"), c("DISCARD"))},
	{"MULTI nested", seq(c("MULTI"), c("MULTI"), c("DISCARD"))},
	{"WATCH EXEC", seq(c("WATCH", "{k}"), c("GET", "{k}"), c("MULTI"), c("SET", "{k}", "1"), c("EXEC"), c("UNWATCH"))},
	{"BLMOVE in MULTI", seq(c("MULTI"), c("BLMOVE", "{k}", "{k2}", "LEFT", "LEFT", "0"), c("BLPOP", "{k}", "0"), c("EXEC"))},
	{"PING ECHO", seq(c("PING"), c("PING", "hi"), c("ECHO", "x"))},
	{"CONFIG unknown subcommand", seq(c("CONFIG", "GET_XX"), c("CONFIG"), c("CONFIG", "GET", "maxmemory-policy"))},
}

// substitute replaces the placeholders of a case's commands.
func substitute(cmds [][]string, keys map[string]string) [][]string {
	out := make([][]string, len(cmds))
	for i, cmd := range cmds {
		out[i] = make([]string, len(cmd))
		for j, a := range cmd {
			if k, ok := keys[a]; ok {
				a = k
			}
			out[i][j] = a
		}
	}
	return out
}

// ownerOf returns the primary that owns key's slot.
func ownerOf(t *testing.T, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := cluster.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		_, err := testenv.Do(ctx, p, "EXISTS", key)
		if err == nil {
			return p
		}
		if !errors.Is(err, testenv.ErrReply) || !strings.Contains(err.Error(), "MOVED") {
			t.Fatalf("EXISTS on %s: %v", p, err)
		}
	}
	t.Fatalf("no primary owns %q", key)
	return ""
}

// TestFidelity runs each case through the proxy and, after deleting its
// keys, directly on the node that owns their slot, in RESP2 and RESP3, and
// compares the replies byte for byte.
func TestFidelity(t *testing.T) {
	e := startProxy(t, []hotcount.Namespace{{Prefix: "fidelity-counter:"}}, proxy.Config{})
	cmdCount := 0
	names := map[string]bool{}
	for _, fc := range fidelityCases {
		for _, cmd := range fc.cmds {
			names[strings.ToUpper(cmd[0])] = true
			cmdCount++
		}
	}
	if len(names) < 60 {
		t.Fatalf("the table covers %d distinct commands, want at least 60", len(names))
	}
	t.Logf("%d cases, %d commands, %d distinct", len(fidelityCases), cmdCount, len(names))
	base := uniq(t)
	for _, proto := range []string{"2", "3"} {
		for i, fc := range fidelityCases {
			t.Run(fmt.Sprintf("RESP%s/%s", proto, fc.name), func(t *testing.T) {
				tag := fmt.Sprintf("%sp%s:%d", base, proto, i)
				keys := map[string]string{
					"{k}":  "{" + tag + "}k",
					"{k2}": "{" + tag + "}k2",
					"{k3}": "{" + tag + "}k3",
				}
				for j := 0; ; j++ {
					x := fmt.Sprintf("{%s:x%d}x", tag, j)
					if keyspace.Slot(x) != keyspace.Slot(keys["{k}"]) {
						keys["{x}"] = x
						break
					}
				}
				cmds := substitute(fc.cmds, keys)
				owner := ownerOf(t, keys["{k}"])
				run := func(addr string) string {
					r := dialRaw(t, addr)
					if proto == "3" {
						r.do("HELLO", "3")
					}
					var b strings.Builder
					for _, cmd := range cmds {
						b.WriteString(r.do(cmd...))
					}
					return b.String()
				}
				clean := func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					for _, k := range keys {
						if _, err := testenv.Do(ctx, ownerOf(t, k), "DEL", k); err != nil {
							t.Fatal(err)
						}
					}
				}
				clean()
				viaProxy := run(e.addr)
				clean()
				direct := run(owner)
				clean()
				if viaProxy != direct {
					t.Errorf("replies differ\ncommands: %q\nproxy:  %q\ndirect: %q", cmds, viaProxy, direct)
				}
			})
		}
	}
}
