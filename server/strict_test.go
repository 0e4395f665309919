package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
)

// TestStrictJSONBodies: member names match exactly, a member appears once
// and null is not a value. Each of these bodies answers 400 with a JSON
// error and changes nothing.
func TestStrictJSONBodies(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	ctx := context.Background()
	if err := c.Incr(ctx, "k", 7); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, method, path, body, want string }{
		{"upper-case by", "POST", "/v1/counters/k/incr", `{"BY":3}`, "case-sensitive"},
		{"title-case by", "POST", "/v1/counters/k/incr", `{"By":3}`, "case-sensitive"},
		{"upper-case id", "POST", "/v1/counters/k/incr", `{"by":1,"ID":"x"}`, "case-sensitive"},
		{"by twice", "POST", "/v1/counters/k/incr", `{"by":1,"by":2}`, "more than once"},
		{"by twice, same value", "POST", "/v1/counters/k/incr", `{"by":3,"by":3}`, "more than once"},
		{"id twice", "POST", "/v1/counters/k/incr", `{"by":1,"id":"a","id":"b"}`, "more than once"},
		{"by null", "POST", "/v1/counters/k/incr", `{"by":null}`, "null"},
		{"id null", "POST", "/v1/counters/k/incr", `{"by":2,"id":null}`, "null"},
		{"upper-case n", "PUT", "/v1/counters/k/shards", `{"N":4}`, "case-sensitive"},
		{"n twice", "PUT", "/v1/counters/k/shards", `{"n":4,"n":2}`, "more than once"},
		{"n null", "PUT", "/v1/counters/k/shards", `{"n":null}`, "null"},
		{"upper-case keys", "POST", "/v1/counters:get", `{"KEYS":["k"]}`, "case-sensitive"},
		{"keys twice", "POST", "/v1/counters:get", `{"keys":["k"],"keys":["k"]}`, "more than once"},
		{"keys null", "POST", "/v1/counters:get", `{"keys":null}`, "null"},
		{"null key in keys", "POST", "/v1/counters:get", `{"keys":["k",null]}`, "keys[1]"},
		{"trailing comma", "POST", "/v1/counters/k/incr", `{"by":1,}`, "invalid JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, tc.method, tc.path, tc.body)
			msg, _ := r.body["error"].(string)
			if r.status != 400 || !strings.Contains(msg, tc.want) {
				t.Errorf("%s %s %s: %d %s; want 400 mentioning %q", tc.method, tc.path, tc.body, r.status, r.raw, tc.want)
			}
			if v := value(t, c, "k"); v != 7 {
				t.Fatalf("k changed to %d", v)
			}
		})
	}
	// The exact names still work.
	if r := call(t, s, "POST", "/v1/counters/k/incr", `{"by":3}`); r.status != 200 || value(t, c, "k") != 10 {
		t.Fatalf("exact name: %d %s", r.status, r.raw)
	}
}

// TestEscapedDotKeys: an escaped "." or ".." segment cannot name a counter,
// so no key "." or ".." is created, read or cleared through a path.
func TestEscapedDotKeys(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	for _, seg := range []string{"%2e%2e", "%2E%2E", ".%2e", "%2e.", "%2e"} {
		for _, rq := range []struct{ method, suffix, body string }{
			{"POST", "/incr", `{"by":5}`}, {"GET", "", ""}, {"DELETE", "", ""},
			{"GET", "/shards", ""}, {"PUT", "/shards", `{"n":2}`},
		} {
			r := call(t, s, rq.method, "/v1/counters/"+seg+rq.suffix, rq.body)
			if r.status != 400 || r.body["error"] == nil {
				t.Errorf("%s /v1/counters/%s%s: %d %s, want 400", rq.method, seg, rq.suffix, r.status, r.raw)
			}
		}
	}
	for _, key := range []string{".", ".."} {
		if v := value(t, c, key); v != 0 {
			t.Errorf("key %q holds %d", key, v)
		}
	}
}

// rawExchange writes req on a fresh connection to addr and returns every
// response read until the server closes the connection (or nothing more
// comes within the deadline).
func rawExchange(t *testing.T, addr, req string) (resps []*http.Response, closed bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return resps, !(errors.As(err, &ne) && ne.Timeout())
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		resps = append(resps, resp)
	}
}

// TestContentLengthWithTransferEncoding: a request carrying both
// Content-Length and Transfer-Encoding is framed by Transfer-Encoding
// alone (net/http drops the Content-Length), and the connection is closed
// after the answer, so that bytes a Content-Length-framing front end would
// have treated as body are never read as a second request. Sent as raw
// bytes on a real loopback listener.
func TestContentLengthWithTransferEncoding(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	ts := httptest.NewServer(s)
	defer ts.Close()
	addr := strings.TrimPrefix(ts.URL, "http://")

	smuggled := "POST /v1/counters/canary/incr HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{\"by\":100}"
	chunk := `{"by":3}`
	body := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(chunk), chunk) + smuggled
	req := "POST /v1/counters/framed/incr HTTP/1.1\r\nHost: x\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n", len(body)) +
		"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n" + body
	resps, closed := rawExchange(t, addr, req)
	if len(resps) != 1 || resps[0].StatusCode != 200 {
		t.Fatalf("got %d answers (first %v), want exactly one 200", len(resps), statusOf(resps))
	}
	if !closed {
		t.Fatalf("the connection stayed open after a request with both Content-Length and Transfer-Encoding")
	}
	if v := value(t, c, "framed"); v != 3 {
		t.Fatalf("framed = %d, want 3 (the chunked body)", v)
	}
	if v := value(t, c, "canary"); v != 0 {
		t.Fatalf("the bytes after the chunked body were served as a request: canary = %d", v)
	}

	// A plain keep-alive pair on one connection still gets two answers.
	one := "POST /v1/counters/framed/incr HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n{\"by\":1}"
	resps, _ = rawExchange(t, addr, one+one+"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if len(resps) != 3 || value(t, c, "framed") != 5 {
		t.Fatalf("keep-alive: %v answers, framed = %d", statusOf(resps), value(t, c, "framed"))
	}
}

func statusOf(rs []*http.Response) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.StatusCode
	}
	return out
}

// TestConcurrentResizesOverHTTP: resizes of one key that overlap answer
// 409 with a message that says so, never 500, and the value is kept. Two
// servers, each over its own Client, share one real redis-server, so that
// resizes overlap within one process and across processes. A round in
// which no two resizes overlapped is tried again.
func TestConcurrentResizesOverHTTP(t *testing.T) {
	ctx := context.Background()
	node, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()
	var urls []string
	var c *hotcount.Client
	for range 2 {
		c, err = hotcount.New(ctx, hotcount.Config{
			Redis: hotcount.RedisConfig{Addrs: []string{node.Addr}},
			Reads: hotcount.ReadConfig{NoCache: true},
			// A shrink waits out the metadata TTL, so resizes overlap.
			Meta: hotcount.MetaConfig{TTL: 50 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		s, _ := newTestServer(t, c, Config{})
		ts := httptest.NewServer(s)
		defer ts.Close()
		urls = append(urls, ts.URL)
	}
	if err := c.Incr(ctx, "k", 7); err != nil {
		t.Fatal(err)
	}
	for try := 1; ; try++ {
		codes := make([]int, 16)
		msgs := make([]string, len(codes))
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() {
				body := fmt.Sprintf(`{"n":%d}`, 1+i%5*2)
				req, _ := http.NewRequest("PUT", urls[i%2]+"/v1/counters/k/shards", strings.NewReader(body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					msgs[i] = err.Error()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				codes[i], msgs[i] = resp.StatusCode, string(b)
			})
		}
		wg.Wait()
		conflicts := 0
		for i, code := range codes {
			switch code {
			case 200:
			case 409:
				conflicts++
				if !strings.Contains(msgs[i], "resize") {
					t.Errorf("409 without a clear message: %s", msgs[i])
				}
			default:
				t.Fatalf("resize %d: %d %s (want 200 or 409)", i, code, msgs[i])
			}
		}
		if v := value(t, c, "k"); v != 7 {
			t.Fatalf("value after resizes: %d", v)
		}
		if conflicts > 0 {
			t.Logf("try %d: %d of %d resizes answered 409, e.g. %s", try, conflicts, len(codes), firstConflict(codes, msgs))
			return
		}
		if try == 5 {
			t.Skipf("no two resizes overlapped in %d tries: the conflict was not exercised", try)
		}
	}
}

func firstConflict(codes []int, msgs []string) string {
	for i, c := range codes {
		if c == 409 {
			return strings.TrimSpace(msgs[i])
		}
	}
	return ""
}
