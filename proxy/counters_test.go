package proxy_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/proxy"
)

// TestCounterCommands: what counter keys accept and answer, on an
// unbuffered and a buffered namespace; their sub-counters land in the
// cluster, and nothing is written under the counter key itself.
func TestCounterCommands(t *testing.T) {
	p := uniq(t)
	ns := []hotcount.Namespace{
		{Prefix: p + "u:", ReadCacheTTL: readCacheTTL},
		{Prefix: p + "b:", Buffered: true, ReadCacheTTL: readCacheTTL},
	}
	e := startProxy(t, ns, proxy.Config{})
	for _, kind := range []string{"u", "b"} {
		t.Run(kind, func(t *testing.T) {
			r := dialRaw(t, e.addr)
			k := p + kind + ":post:1"
			k2 := p + kind + ":post:2"
			steps := []struct {
				cmd  []string
				want string
			}{
				{[]string{"GET", k}, "$-1\r\n"},
				{[]string{"EXISTS", k}, ":0\r\n"},
				{[]string{"TYPE", k}, "+none\r\n"},
				{[]string{"INCR", k}, ":1\r\n"},
				{[]string{"INCRBY", k, "41"}, ":42\r\n"},
				{[]string{"DECR", k}, ":41\r\n"},
				{[]string{"DECRBY", k, "-9"}, ":50\r\n"},
				{[]string{"INCRBY", k, "0"}, ":50\r\n"},
				{[]string{"GET", k}, "$2\r\n50\r\n"},
				{[]string{"TYPE", k}, "+string\r\n"},
				{[]string{"INCRBY", k, "x"}, "-ERR value is not an integer or out of range\r\n"},
				{[]string{"DECRBY", k, "-9223372036854775808"}, "-ERR decrement would overflow\r\n"},
				{[]string{"INCR", k, "extra"}, "-ERR wrong number of arguments for 'incr' command\r\n"},
				{[]string{"APPEND", k, "x"}, "-ERR APPEND is not supported on counter key '" + k + "'; counter keys accept GET, MGET, SET <integer>, INCR, INCRBY, DECR, DECRBY, DEL, UNLINK, EXISTS, TYPE, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST\r\n"},
				{[]string{"INCRBYFLOAT", k, "1.5"}, "-ERR INCRBYFLOAT is not supported on counter key"},
				{[]string{"TTL", k}, ":-1\r\n"},
				{[]string{"EXPIRE", k, "100"}, ":1\r\n"},
				{[]string{"TTL", k}, ":100\r\n"},
				{[]string{"EXPIRE", k, "100", "NX"}, "-ERR counter key '" + k + "' takes EXPIRE key <time> without options\r\n"},
				{[]string{"PERSIST", k}, ":1\r\n"},
				{[]string{"PERSIST", k}, ":0\r\n"},
				{[]string{"PTTL", k}, ":-1\r\n"},
				{[]string{"TTL", k2}, ":-2\r\n"},
				{[]string{"EXPIRE", k2, "10"}, ":0\r\n"},
				{[]string{"RENAME", k, k2}, "-ERR RENAME is not supported on counter key"},
				{[]string{"SET", k, "abc"}, "-ERR counter key '" + k + "' holds an integer: SET takes an integer\r\n"},
				{[]string{"SET", k, "5", "EX", "10"}, "-ERR counter key '" + k + "' takes SET key <integer> without options\r\n"},
				{[]string{"WATCH", k}, "-ERR WATCH is not supported on counter key"},
				{[]string{"MULTI"}, "+OK\r\n"},
				{[]string{"INCR", k}, "-ERR INCR inside MULTI is not supported on counter key '" + k + "': counter keys take no part in transactions (outside MULTI they accept GET, MGET, SET <integer>, INCR, INCRBY, DECR, DECRBY, DEL, UNLINK, EXISTS, TYPE, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST)\r\n"},
				{[]string{"EXEC"}, "-EXECABORT Transaction discarded because of previous errors.\r\n"},
				{[]string{"SET", k, "7"}, "+OK\r\n"},
				{[]string{"GET", k}, "$1\r\n7\r\n"},
				{[]string{"INCR", k}, ":8\r\n"},
				{[]string{"SET", p + "plain", "p"}, "+OK\r\n"},
				{[]string{"MGET", k, p + "plain", k2, k}, "*4\r\n$1\r\n8\r\n$1\r\np\r\n$-1\r\n$1\r\n8\r\n"},
				{[]string{"EXISTS", k, k2, p + "plain", k}, ":3\r\n"},
				{[]string{"DEL", k, k2, p + "plain"}, ":2\r\n"},
				{[]string{"GET", k}, "$-1\r\n"},
				{[]string{"INCR", k}, ":1\r\n"},
				{[]string{"UNLINK", k}, ":1\r\n"},
				{[]string{"EXISTS", k}, ":0\r\n"},
				{[]string{"INCRBY", k, "3"}, ":3\r\n"},
				{[]string{"DECRBY", k, "3"}, ":0\r\n"},
				{[]string{"GET", k}, "$1\r\n0\r\n"}, // exists at 0, as in Redis
				// Buffered too: a cold key's INCRBY goes to the cluster at
				// once, so the counter exists at 0 and expires, as in Redis.
				{[]string{"EXPIRE", k, "-1"}, ":1\r\n"},
				{[]string{"EXISTS", k}, ":0\r\n"},
				{[]string{"GET", k}, "$-1\r\n"},
			}
			for _, s := range steps {
				got := r.do(s.cmd...)
				if got != s.want && !(strings.HasPrefix(got, s.want) && !strings.HasSuffix(s.want, "\r\n")) {
					t.Fatalf("%q: got %q, want %q", s.cmd, got, s.want)
				}
			}
			// Nothing under the counter key itself: its value lives in
			// sub-counters.
			if _, err := cluster.Do(context.Background(), "GET", k); err == nil || !strings.Contains(err.Error(), "nil") {
				t.Fatalf("the counter key itself holds something: %v", err)
			}
		})
	}
	// The sub-counters of a counter are in the cluster, summing to the
	// value.
	k := p + "u:post:sum"
	r := dialRaw(t, e.addr)
	for i := 0; i < 20; i++ {
		r.do("INCRBY", k, "5")
	}
	sub, err := e.client.SubKeys(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, s := range sub {
		v, err := cluster.Do(context.Background(), "GET", s)
		if err == nil {
			n, _ := strconv.ParseInt(v, 10, 64)
			sum += n
		}
	}
	if sum != 100 {
		t.Fatalf("sub-counters %v sum to %d, want 100", sub, sum)
	}
}

// TestCounterBadArguments: an argument Redis refuses is refused on a
// counter key too, with Redis's error, and leaves the counter as it was:
// integers are parsed as Redis parses them (no '+', no leading zeros), a
// SET past the sub-counter bound does not clear the counter first, and an
// expire time that passes int64 in milliseconds is refused rather than
// clamped into a deadline that clears the counter.
func TestCounterBadArguments(t *testing.T) {
	p := uniq(t)
	ns := []hotcount.Namespace{
		{Prefix: p + "u:", ReadCacheTTL: readCacheTTL},
		{Prefix: p + "b:", Buffered: true, ReadCacheTTL: readCacheTTL},
	}
	e := startProxy(t, ns, proxy.Config{})
	notInt := "-ERR value is not an integer or out of range\r\n"
	for _, kind := range []string{"u", "b"} {
		t.Run(kind, func(t *testing.T) {
			r := dialRaw(t, e.addr)
			k := p + kind + ":post:1"
			bound := "-ERR counter key '" + k + "' holds at most ±9007199254740991: SET takes an integer within it\r\n"
			if got := r.do("SET", k, "10"); got != "+OK\r\n" {
				t.Fatalf("SET: %q", got)
			}
			for _, s := range []struct {
				cmd  []string
				want string
			}{
				{[]string{"INCRBY", k, "+5"}, notInt},
				{[]string{"INCRBY", k, "007"}, notInt},
				{[]string{"INCRBY", k, "-0"}, notInt},
				{[]string{"DECRBY", k, "+5"}, notInt},
				{[]string{"SET", k, "+5"}, "-ERR counter key '" + k + "' holds an integer: SET takes an integer\r\n"},
				{[]string{"SET", k, "9223372036854775807"}, bound},
				{[]string{"SET", k, "-9007199254740992"}, bound},
				{[]string{"EXPIRE", k, "+100"}, notInt},
				{[]string{"EXPIRE", k, "0100"}, notInt},
				{[]string{"EXPIRE", k, "9223372036854775807"}, "-ERR invalid expire time in 'expire' command\r\n"},
				{[]string{"EXPIRE", k, "-9223372036854775808"}, "-ERR invalid expire time in 'expire' command\r\n"},
				{[]string{"EXPIREAT", k, "9223372036854775807"}, "-ERR invalid expire time in 'expireat' command\r\n"},
				{[]string{"PEXPIRE", k, "9223372036854775807"}, "-ERR invalid expire time in 'pexpire' command\r\n"},
			} {
				if got := r.do(s.cmd...); got != s.want {
					t.Errorf("%q: got %q, want %q", s.cmd, got, s.want)
				}
				get, ttl := r.do("GET", k), r.do("TTL", k)
				if get != "$2\r\n10\r\n" || ttl != ":-1\r\n" {
					t.Errorf("after %q: GET %q, TTL %q; want 10 without a deadline", s.cmd, get, ttl)
					r.do("SET", k, "10") // the next step starts afresh
				}
			}
			// What Redis accepts still works: the largest SET, and an
			// EXPIRE within range.
			if got := r.do("SET", k, "-9007199254740991"); got != "+OK\r\n" {
				t.Fatalf("SET -(2^53-1): %q", got)
			}
			if got := r.do("GET", k); got != "$17\r\n-9007199254740991\r\n" {
				t.Fatalf("GET after SET -(2^53-1): %q", got)
			}
			if got := r.do("EXPIRE", k, "100000000000"); got != ":1\r\n" {
				t.Fatalf("EXPIRE far: %q", got)
			}
			if got := r.do("EXPIRE", k, "-9223372036854775"); got != ":1\r\n" {
				t.Fatalf("EXPIRE far past: %q", got)
			}
			if got := r.do("EXISTS", k); got != ":0\r\n" {
				t.Fatalf("EXISTS after an expire in the past: %q", got)
			}
		})
	}
}

// TestExactReply: a namespace with ReplyExact answers INCR with a fresh
// summed read, which sees increments of another process at once, whatever
// the namespace's read-cache TTL (the Client's cache is not consulted).
func TestExactReply(t *testing.T) {
	p := uniq(t)
	ctx := context.Background()
	ns := []hotcount.Namespace{{Prefix: p + "exact:", ReadCacheTTL: time.Hour}, {Prefix: p + "est:", ReadCacheTTL: time.Hour}}
	e := startProxy(t, ns, proxy.Config{Replies: map[string]proxy.Reply{p + "exact:": proxy.ReplyExact}})
	other, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: cluster.Seeds()}, Namespaces: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	r := dialRaw(t, e.addr)
	for _, kind := range []string{"exact", "est"} {
		k := p + kind + ":k"
		if got := r.do("INCR", k); got != ":1\r\n" {
			t.Fatalf("%s: first INCR %q", kind, got)
		}
		if err := other.Incr(ctx, k, 100); err != nil { // another process
			t.Fatal(err)
		}
		got := r.do("INCR", k)
		want := ":2\r\n" // the estimate: last read (1) plus this proxy's +1
		if kind == "exact" {
			want = ":102\r\n"
		}
		if got != want {
			t.Fatalf("%s: INCR after another process added 100: %q, want %q", kind, got, want)
		}
	}
	if st := e.srv.Stats(); st.CounterReads < 3 || st.EstimateAnswers < 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCrossSlot: MGET, DEL, UNLINK, EXISTS, TOUCH and MSET over keys in
// many slots are split and answered as a standalone Redis answers them;
// other multi-key commands across slots get CROSSSLOT; SCAN, KEYS and
// DBSIZE cover every primary.
func TestCrossSlot(t *testing.T) {
	p := uniq(t)
	e := startProxy(t, nil, proxy.Config{})
	r := dialRaw(t, e.addr)
	var keys []string
	slots := map[uint16]bool{}
	for i := 0; len(keys) < 12; i++ {
		k := fmt.Sprintf("%sk%d", p, i)
		keys = append(keys, k)
		slots[keyspace.Slot(k)] = true
	}
	if len(slots) < 3 {
		t.Fatalf("keys in %d slots only", len(slots))
	}
	mset := []string{"MSET"}
	for i, k := range keys[:8] {
		mset = append(mset, k, strconv.Itoa(i))
	}
	steps := []struct {
		cmd  []string
		want string
	}{
		{mset, "+OK\r\n"},
		{append([]string{"MGET"}, keys[6:10]...), "*4\r\n$1\r\n6\r\n$1\r\n7\r\n$-1\r\n$-1\r\n"},
		{append([]string{"EXISTS"}, keys[6], keys[9], keys[7], keys[6]), ":3\r\n"},
		{append([]string{"TOUCH"}, keys[5:9]...), ":3\r\n"},
		{append([]string{"DEL"}, keys[0:3]...), ":3\r\n"},
		{append([]string{"UNLINK"}, keys[2:5]...), ":2\r\n"},
		{[]string{"SUNIONSTORE", keys[0], keys[1], keys[2]}, "-CROSSSLOT Keys in request don't hash to the same slot\r\n"},
		{[]string{"MSETNX", keys[0], "1", keys[1], "2"}, "-CROSSSLOT Keys in request don't hash to the same slot\r\n"},
		{[]string{"RPOPLPUSH", keys[0], keys[1]}, "-CROSSSLOT Keys in request don't hash to the same slot\r\n"},
	}
	for _, s := range steps {
		if keyspace.Slot(s.cmd[1]) == keyspace.Slot(s.cmd[2]) && strings.HasPrefix(s.want, "-CROSSSLOT") {
			t.Fatalf("test keys %q share a slot", s.cmd[1:3])
		}
		if got := r.do(s.cmd...); got != s.want {
			t.Fatalf("%q: got %q, want %q", s.cmd, got, s.want)
		}
	}
	// SCAN over every primary finds exactly the keys left (5..7).
	var found []string
	cursor := "0"
	for i := 0; ; i++ {
		if i > 10000 {
			t.Fatal("SCAN does not end")
		}
		reply := r.do("SCAN", cursor, "MATCH", p+"*", "COUNT", "1000")
		lines := strings.Split(reply, "\r\n")
		cursor = lines[2]
		for j := 4; j+1 < len(lines); j += 2 {
			found = append(found, lines[j+1])
		}
		if cursor == "0" {
			break
		}
	}
	sort.Strings(found)
	want := append([]string(nil), keys[5:8]...)
	sort.Strings(want)
	if strings.Join(found, ",") != strings.Join(want, ",") {
		t.Fatalf("SCAN found %v, want %v", found, want)
	}
	if got := r.do("KEYS", p+"*"); !strings.HasPrefix(got, "*3\r\n") {
		t.Fatalf("KEYS: %q", got)
	}
	total := int64(0)
	ps, err := cluster.Primaries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range ps {
		v, err := testenv.Do(context.Background(), a, "DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
	}
	got := r.do("DBSIZE")
	n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(got, ":"), "\r\n"), 10, 64)
	// Other tests write meanwhile: the sum is close, never a single node's.
	if n < total/2 || n > 2*total+100 {
		t.Fatalf("DBSIZE through the proxy %d, sum of primaries %d", n, total)
	}
	// SCRIPT LOAD reaches every primary: EVALSHA works on keys anywhere.
	sha := strings.Split(r.do("SCRIPT", "LOAD", "return KEYS[1]"), "\r\n")[1]
	for _, k := range keys[:4] {
		if got := r.do("EVALSHA", sha, "1", k); got != fmt.Sprintf("$%d\r\n%s\r\n", len(k), k) {
			t.Fatalf("EVALSHA on %s: %q", k, got)
		}
	}
	if got := r.do("SCRIPT", "EXISTS", sha, "0000000000000000000000000000000000000000"); got != "*2\r\n:1\r\n:0\r\n" {
		t.Fatalf("SCRIPT EXISTS: %q", got)
	}
}
