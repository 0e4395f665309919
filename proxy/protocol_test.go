package proxy_test

import (
	"bufio"
	"context"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/proxy"
)

// standalone starts a standalone redis-server for the test: the reference
// the proxy's answers are compared with.
func standalone(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	return n.Addr
}

// TestProtocolAsRedis sends malformed and unusual requests to a
// standalone Redis and to the proxy: the answers (up to the connection's
// end) must be the same bytes. The cases are those of Redis's own
// protocol test unit and more.
func TestProtocolAsRedis(t *testing.T) {
	ref := standalone(t)
	e := startProxy(t, nil, proxy.Config{})
	ping := "*1\r\n$4\r\nPING\r\n"
	cases := []struct{ name, input string }{
		{"empty query", "\r\n" + ping},
		{"negative multibulk length", "*-10\r\n" + ping},
		{"zero multibulk length", "*0\r\n" + ping},
		{"out of range multibulk length", "*3000000000\r\n"},
		{"multibulk length -0", "*-0\r\n" + ping},
		{"multibulk length +1", "*+1\r\n" + ping},
		{"multibulk length 01", "*01\r\n" + ping},
		{"wrong payload header", "*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n"},
		{"negative payload length", "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n"},
		{"out of range payload length", "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n"},
		{"payload length near the int range", "*1\r\n$9223372036854775807\r\n"},
		{"non-number payload length", "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n"},
		{"multibulk not followed by bulks", "*1\r\nfoo\r\n"},
		{"line break for a bulk header", "*1\r\n\r\n"},
		{"unbalanced quotes", "set \"\"\"test-key\"\"\" test-value\r\nping\r\n"},
		{"quote not followed by a blank", "ECHO \"a\"b\r\nPING\r\n"},
		{"single quote unfinished", "ECHO 'ab\r\n"},
		{"inline escapes", "ECHO \"a\\x41\\n\\tb\\\"\" 'it\\'s'\r\nECHO \"x\\x4\"\r\nECHO 'a\\nb'\r\n"},
		{"inline blanks", "  ECHO \t hi  \r\n\r\n\n   \r\nPING\n"},
		{"inline with a NUL", "ECHO a\x00b\r\nPING\r\n"},
		{"bulk longer than said", "*1\r\n$2\r\nPING\r\n"},
		{"bytes after a bulk are not checked", "*1\r\n$4\r\nPINGxx" + ping},
		{"count line without CR", "*1\n$4\nPING\n"},
		{"dollar line is inline", "$5 hello\r\n"},
		{"desync: NUL", "\x00" + strings.Repeat("payload", 10000)},
		{"desync: star NUL", "*\x00" + strings.Repeat("payload", 10000)},
		{"desync: dollar NUL", "$\x00" + strings.Repeat("payload", 10000)},
		{"too big inline", strings.Repeat("a", 70000)},
		{"too big bulk count", "*1\r\n$" + strings.Repeat("1", 70000)},
		{"wrong arity", "PING x y z\r\n"},
		{"empty command name", "*1\r\n$0\r\n\r\n"},
		{"SELECT +0", "SELECT +0\r\nSELECT 00\r\nSELECT -0\r\nSELECT 0\r\n"},
		{"HELLO +3", "HELLO +3\r\nHELLO 03\r\n"},
		{"CLIENT UNBLOCK +1", "CLIENT UNBLOCK +1\r\nCLIENT UNBLOCK 01\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := exchange(t, ref, []byte(tc.input))
			if err != nil {
				t.Fatalf("redis-server: %v (%q)", err, want)
			}
			got, err := exchange(t, e.addr, []byte(tc.input))
			if err != nil {
				t.Fatalf("no end of the exchange (a hang): %v; got %q", err, got)
			}
			if string(got) != string(want) {
				t.Fatalf("proxy answered\n%q\nredis-server answered\n%q", got, want)
			}
		})
	}
}

// TestProtocolErrorAtOnce: a bulk length over the limit is answered as
// soon as its header arrives, without waiting for its data, and the
// connection is closed; nothing of it is buffered.
func TestProtocolErrorAtOnce(t *testing.T) {
	e := startProxy(t, nil, proxy.Config{})
	for _, in := range []string{
		"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$" + itoa(proxy.DefaultMaxBulkLen+1) + "\r\n",
		"*" + strings.Repeat("1", 70000),
	} {
		nc, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write([]byte(in)); err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		line, err := bufio.NewReader(nc).ReadString('\n')
		nc.Close()
		if err != nil || !strings.HasPrefix(line, "-ERR Protocol error: ") {
			t.Fatalf("%.40q: got %q, %v", in, line, err)
		}
	}
}

// TestDeepReply: a script reply nested as deep as Redis writes it (Lua
// stops near 8,000 levels with an error) passes through as Redis wrote
// it.
func TestDeepReply(t *testing.T) {
	ref := standalone(t)
	e := startProxy(t, nil, proxy.Config{})
	script := "local t = {} local c = t for i = 1, 10000 do c[1] = {} c = c[1] end return t"
	for _, depth := range []string{"100", "deep"} {
		s := script
		if depth == "100" {
			s = strings.Replace(script, "10000", "100", 1)
		}
		in := encode("EVAL", s, "0")
		want, err := exchange(t, ref, in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := exchange(t, e.addr, in)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("depth %s: proxy answered %d bytes ending %q, redis-server %d bytes ending %q", depth, len(got), tail(got), len(want), tail(want))
		}
	}
}

func tail(b []byte) string {
	if len(b) > 120 {
		b = b[len(b)-120:]
	}
	return string(b)
}

// TestMemoryBudget: 50 connections each announce a bulk just under
// MaxBulkLen and send it; the input the proxy holds stays within
// MemoryBudget (the connections that do not fit wait, or are closed), the
// process's heap does not grow by the 50 bulks, and the proxy serves on.
func TestMemoryBudget(t *testing.T) {
	const (
		bulk   = 2 << 20
		budget = 16 << 20
		conns  = 50
	)
	e := startProxy(t, nil, proxy.Config{MaxBulkLen: bulk, QueryBufferLimit: bulk + 64<<10, MemoryBudget: budget, Timeout: 30 * time.Second})
	p := uniq(t)
	payload := strings.Repeat("x", bulk-10)
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peakHeap atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peakHeap.Load() {
				peakHeap.Store(ms.HeapInuse)
			}
		}
	}()
	var wg sync.WaitGroup
	var ok, closed atomic.Int64
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := p + itoa(i)
			nc, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(2 * time.Minute))
			hdr := "*3\r\n$3\r\nSET\r\n$" + itoa(len(key)) + "\r\n" + key + "\r\n$" + itoa(len(payload)) + "\r\n"
			go func() {
				nc.Write([]byte(hdr))
				for off := 0; off < len(payload); off += 64 << 10 {
					if _, err := nc.Write([]byte(payload[off:min(off+64<<10, len(payload))])); err != nil {
						return
					}
				}
				nc.Write([]byte("\r\n"))
			}()
			line, err := bufio.NewReader(nc).ReadString('\n')
			switch {
			case line == "+OK\r\n":
				ok.Add(1)
			case strings.Contains(line, "memory budget") || err != nil:
				closed.Add(1)
			default:
				t.Errorf("connection %d: %q", i, line)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	if ok.Load() == 0 {
		t.Fatalf("no SET went through (%d closed)", closed.Load())
	}
	grew := int64(peakHeap.Load()) - int64(base.HeapInuse)
	t.Logf("%d stored, %d closed; heap in use grew by at most %.1f MiB (budget %d MiB, %d bulks of %d MiB offered)",
		ok.Load(), closed.Load(), float64(grew)/(1<<20), budget>>20, conns, bulk>>20)
	// The 50 payloads offered are 100 MiB: without the budget the heap
	// grew by 200 MiB (a read buffer and the pass-through's copy of each).
	// The budget lets 16 MiB of input in at once; the pass-through's
	// copies of what it let in, buffers released but not yet collected
	// and the test's own client side take the rest of the margin.
	if grew > 8*budget {
		t.Fatalf("heap in use grew by %d bytes with a budget of %d", grew, budget)
	}
	r := dialRaw(t, e.addr)
	if got := r.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING after: %q", got)
	}
}

// TestProtocolBeforeAuth: before AUTH, Redis parses with smaller bounds
// (10 arguments, 16 KiB bulks); the proxy with a password answers the
// same bytes as a redis-server with requirepass, and a command pipelined
// right after AUTH is parsed with the full bounds.
func TestProtocolBeforeAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	if got := dialRaw(t, n.Addr).do("CONFIG", "SET", "requirepass", "pw"); got != "+OK\r\n" {
		t.Fatalf("CONFIG SET requirepass: %q", got)
	}
	e := startProxy(t, nil, proxy.Config{Password: "pw"})
	big := strings.Repeat("x", 20000)
	cases := []struct{ name, input string }{
		{"many arguments", "*11\r\n"},
		{"large bulk", "*2\r\n$4\r\nECHO\r\n$20000\r\n"},
		{"small command", "*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n"},
		{"after AUTH", string(encode("AUTH", "pw")) + string(encode("ECHO", big)) + string(encode("MSET", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5", "f", "6"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := exchange(t, n.Addr, []byte(tc.input))
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "after AUTH" {
				// MSET across slots is split by the proxy; its reply is
				// the same +OK.
				if !strings.HasSuffix(string(want), "+OK\r\n") {
					t.Fatalf("redis-server answered %q", tail([]byte(want)))
				}
			}
			got, err := exchange(t, e.addr, []byte(tc.input))
			if err != nil {
				t.Fatalf("no end of the exchange: %v; got %q", err, got)
			}
			if string(got) != string(want) {
				t.Fatalf("proxy answered\n%q\nredis-server answered\n%q", tail(got), tail(want))
			}
		})
	}
}
