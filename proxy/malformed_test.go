package proxy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/proxy"
)

// exchange writes input on a fresh connection, half-closes it and reads
// everything the proxy answers until it closes its side.
func exchange(t testing.TB, addr string, input []byte) ([]byte, error) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	werr := make(chan error, 1)
	go func() {
		_, err := nc.Write(input)
		nc.(*net.TCPConn).CloseWrite()
		werr <- err
	}()
	out, err := io.ReadAll(nc)
	<-werr // a write cut short by the proxy closing is fine
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return out, err
	}
	return out, nil
}

// parseReplies checks that b is a sequence of whole RESP replies and
// returns them.
func parseReplies(b []byte) ([]string, error) {
	br := bufio.NewReader(bytes.NewReader(b))
	var out []string
	for {
		if _, err := br.Peek(1); err == io.EOF {
			return out, nil
		}
		s, err := readRaw(br)
		if err != nil {
			return out, err
		}
		out = append(out, s)
	}
}

// TestMalformed sends broken RESP: each input gets error replies or a
// closed connection, never a crash or a hang, and the proxy serves on.
func TestMalformed(t *testing.T) {
	p := uniq(t)
	e := startProxy(t, []hotcount.Namespace{{Prefix: p + "c:", Buffered: true}}, proxy.Config{QueryBufferLimit: 1 << 20, MaxBulkLen: 512 << 10})
	cases := []struct {
		name, input string
		want        string // a reply that must be among the answers; "" none
	}{
		{"truncated bulk", "*1\r\n$3\r\nGE", ""},
		{"truncated header", "*2\r\n$3\r\nGET\r\n$", ""},
		{"bulk length near the int range", "*1\r\n$9223372036854775807\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"negative bulk length", "*1\r\n$-5\r\nabcdefgh\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bulk length not a number", "*1\r\n$x\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"huge bulk, little data", "*2\r\n$3\r\nSET\r\n$400000000\r\nabc", ""},
		{"nested array", "*1\r\n*1\r\n$4\r\nPING\r\n", "-ERR Protocol error: expected '$', got '*'\r\n"},
		{"binary junk", "\x00\xff\xfe\x01garbage\x7f\r\n\x00\r\n", ""},
		{"unbalanced quotes", "SET \"a b\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"valid then junk", "*1\r\n$4\r\nPING\r\n*1\r\n$x\r\n", "+PONG\r\n"},
		{"inline ping", "PING\r\nECHO hi\r\n", "$2\r\nhi\r\n"},
		{"counter key with junk args", "*3\r\n$6\r\nINCRBY\r\n$" + itoa(len(p+"c:k")) + "\r\n" + p + "c:k\r\n$3\r\n\x00\x01\x02\r\n", "-ERR value is not an integer or out of range\r\n"},
		{"empty command name", "*1\r\n$0\r\n\r\n", "-ERR unknown command '', with args beginning with: \r\n"},
		{"subscribe suffix", "*1\r\n$14\r\nFOOUNSUBSCRIBE\r\n", "-ERR unknown command 'FOOUNSUBSCRIBE', with args beginning with: \r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exchange(t, e.addr, []byte(tc.input))
			if err != nil {
				t.Fatalf("no end of the exchange (a hang): %v; got %q", err, out)
			}
			replies, err := parseReplies(out)
			if err != nil {
				t.Fatalf("the answer is not whole RESP replies: %v: %q", err, out)
			}
			if tc.want != "" && !contains(replies, tc.want) {
				t.Fatalf("answers %q, want %q among them", replies, tc.want)
			}
		})
	}

	// Oversized: a bulk longer than MaxBulkLen (512 KiB here) is refused
	// on its header; a command whose arguments add up past
	// QueryBufferLimit (1 MiB) is refused before the rest arrives.
	t.Run("past MaxBulkLen", func(t *testing.T) {
		in := append([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$200000000\r\n"), bytes.Repeat([]byte("x"), 16<<20)...)
		out, err := exchange(t, e.addr, in)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != "-ERR Protocol error: invalid bulk length\r\n" {
			t.Fatalf("got %q", out)
		}
	})
	t.Run("past QueryBufferLimit", func(t *testing.T) {
		arg := "$400000\r\n" + strings.Repeat("x", 400000) + "\r\n"
		in := []byte("*41\r\n$4\r\nMSET\r\n" + strings.Repeat(arg, 40))
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		out, err := exchange(t, e.addr, in)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "-ERR Protocol error: query buffer limit reached") {
			t.Fatalf("got %q", out)
		}
		runtime.ReadMemStats(&ms1)
		// 16 MiB were offered; at most the 1 MiB limit (doubled by buffer
		// growth) may have been held.
		if grew := int64(ms1.TotalAlloc - ms0.TotalAlloc); grew > 12<<20 {
			t.Fatalf("%d bytes allocated for a command capped at 1 MiB", grew)
		}
	})
	t.Run("long inline line", func(t *testing.T) {
		out, err := exchange(t, e.addr, bytes.Repeat([]byte("a"), 200<<10))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "-ERR Protocol error: too big inline request") {
			t.Fatalf("got %q", out)
		}
	})
	r := dialRaw(t, e.addr)
	if got := r.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING after the malformed inputs: %q", got)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
