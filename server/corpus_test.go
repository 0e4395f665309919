package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// corpusCase is one request of the hostile corpus: sent with net/http, or
// as raw bytes on a fresh connection when raw is set.
type corpusCase struct {
	name         string
	method, path string
	body         string
	header       []string // name, value pairs; "Authorization" may repeat
	raw          string
	// delta is what a 2xx answer adds to the canary (an increment sent on
	// purpose); intended requests must answer 2xx.
	delta    int64
	intended bool
	// mayPass marks a request whose 2xx is harmless and does not touch
	// the canary (a read, a resize, a write to another key).
	mayPass bool
}

const (
	writer = "Bearer w-secret"
	reader = "Bearer r-secret"
	admin  = "Bearer a-secret"
)

// hostileCorpus returns the requests of TestHostileCorpus: every strict-
// HTTP case of the API (names, duplicates, null, dot segments, framing,
// tokens, scopes, queries, methods) against the counter "canary", among
// requests that change it on purpose.
func hostileCorpus() []corpusCase {
	incr := "/v1/counters/canary/incr"
	w := []string{"Authorization", writer}
	var cs []corpusCase
	add := func(c corpusCase) { cs = append(cs, c) }
	// Increments sent on purpose.
	for i, body := range []string{`{"by":2}`, ``, `{"by":-1}`, `{ "by" : 10 }`, `{"\u0062y":4}`, "{\"by\":3}\n"} {
		d := []int64{2, 1, -1, 10, 4, 3}[i]
		add(corpusCase{name: "intended " + body, method: "POST", path: incr, body: body, header: w, delta: d, intended: true})
	}
	add(corpusCase{name: "intended, lower-case scheme", method: "POST", path: incr, body: `{"by":5}`, header: []string{"Authorization", "bearer w-secret"}, delta: 5, intended: true})
	add(corpusCase{name: "intended, chunked", raw: rawChunked("POST", incr, writer, `{"by":6}`, ""), delta: 6, intended: true})

	// Bodies that must not count: names, duplicates, null, types, syntax.
	for _, body := range []string{
		`{"BY":100}`, `{"By":100}`, `{"bY":100}`, `{"by ":100}`, `{" by":100}`, `{"by\u0000":100}`,
		`{"by":1,"by":100}`, `{"by":100,"by":1}`, `{"by":1,"b\u0079":100}`, `{"by":null}`, `{"by":1,"id":null}`,
		`{"by":"100"}`, `{"by":100.0}`, `{"by":1e2}`, `{"by":1E2}`, `{"by":0x64}`, `{"by":+100}`, `{"by":0100}`,
		`{"by":-0}`, `{"by":0}`, `{"by":true}`, `{"by":[100]}`, `{"by":{"n":100}}`, `{"by":100,"extra":1}`,
		`{"by":100,}`, `{"by":100}{"by":100}`, `{"by":100} x`, `[{"by":100}]`, `"by"`, `100`, `null`, `true`,
		"\ufeff{\"by\":100}", `{"by":100 /* c */}`, `{'by':100}`, `{by:100}`, `{"by":100`, `{"by"100}`,
		`{"by":9223372036854775808}`, `{"by":-9223372036854775809}`, `{"by":1e400}`, `{"by":9007199254740992}`,
		`{"by":100,"id":""}`, `{"by":100,"id":"a b"}`, `{"by":100,"id":"x"}`, `{"by":100,"id":5}`,
		strings.Repeat("[", 10000), `{"by":100,"pad":"` + strings.Repeat("x", 70<<10) + `"}`, "\x00\xff",
		`{"by":1,"by":null}`, `{"by":100,"keys":["canary"]}`, `{"by":100,"n":4}`,
	} {
		add(corpusCase{name: "body " + body, method: "POST", path: incr, body: body, header: w})
	}
	// Paths: dot segments, escapes, bad keys, near-miss routes.
	for _, p := range []string{
		"/v1/counters/%2e%2e/incr", "/v1/counters/%2E%2E/incr", "/v1/counters/.%2e/incr", "/v1/counters/%2e/incr",
		"/v1/counters/../counters/canary/incr", "/v1/counters/./incr", "/v1/counters//incr",
		"/v1/counters/canary/../canary/incr", "/v1/counters/canary/%2e%2e/canary/incr", "/v1/counters/canary%2fincr",
		"/v1/counters/canary/incr/", "/v1/counters/canary/INCR", "/V1/counters/canary/incr", "/v1/Counters/canary/incr",
		"/v1/counters/canary%00/incr", "/v1/counters/canary%0a/incr", "/v1/counters/canary%ff/incr",
		"/v1/counters/%7Bcanary%7D/incr", "/v1/counters/" + strings.Repeat("c", 600) + "/incr",
		"/v1/counters/canary/incr?by=100", "/v1/counters/canary/incr?id=x", "/v1/counters/canary/incr?x=%zz",
		"/v1/counters/canary/incr?a;b", "/v1/counters/canary/incr#frag", "/v1/counters:incr", "/v1/counters/canary/incr/x",
	} {
		c := corpusCase{name: "path " + p, method: "POST", path: p, body: `{"by":100}`, header: w}
		if p == "/v1/counters/canary/incr#frag" {
			// The fragment is never sent: this is the canary's own
			// increment route, on purpose.
			c.delta, c.intended = 100, true
		}
		add(c)
	}
	// Tokens and scopes.
	for _, h := range [][]string{
		nil, {"Authorization", ""}, {"Authorization", "Bearer"}, {"Authorization", "Bearer w-secretx"},
		{"Authorization", "Bearer W-SECRET"}, {"Authorization", "Basic dzpzZWNyZXQ="}, {"Authorization", "w-secret"},
		{"Authorization", reader}, {"Authorization", admin}, {"Authorization", "Bearer m-secret"},
		{"Authorization", "Bearer o-secret"}, {"Authorization", "Bearer r-secret w-secret"},
		{"Authorization", "Bearer wrong", "Authorization", writer}, {"Authorization", writer, "Authorization", "Bearer wrong"},
		{"X-Authorization", writer}, {"Proxy-Authorization", writer}, {"Cookie", "token=w-secret"},
	} {
		add(corpusCase{name: fmt.Sprintf("token %q", h), method: "POST", path: incr, body: `{"by":100}`, header: h})
	}
	add(corpusCase{name: "token in the query", method: "POST", path: incr + "?access_token=w-secret", body: `{"by":100}`})
	// Cross-site browser requests.
	add(corpusCase{name: "cross-site fetch", method: "POST", path: incr, body: `{"by":100}`, header: []string{"Authorization", writer, "Sec-Fetch-Site", "cross-site"}})
	add(corpusCase{name: "foreign origin", method: "POST", path: incr, body: `{"by":100}`, header: []string{"Authorization", writer, "Origin", "https://evil.example"}})
	// Methods.
	for _, m := range []string{"GET", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "HEAD", "post", "PROPFIND"} {
		add(corpusCase{name: "method " + m, method: m, path: incr, body: `{"by":100}`, header: w})
	}
	add(corpusCase{name: "method override", method: "GET", path: "/v1/counters/canary", header: []string{"Authorization", writer, "X-HTTP-Method-Override", "POST"}})
	add(corpusCase{name: "clear by a writer", method: "DELETE", path: "/v1/counters/canary", header: w})
	add(corpusCase{name: "clear by a reader", method: "DELETE", path: "/v1/counters/canary", header: []string{"Authorization", reader}})
	add(corpusCase{name: "clear by another tenant", method: "DELETE", path: "/v1/counters/canary", header: []string{"Authorization", "Bearer o-secret"}})
	// Resizes: bad bodies (an admin), and one good one, which keeps the value.
	for _, body := range []string{`{"N":2}`, `{"n":2,"n":3}`, `{"n":null}`, `{"n":0}`, `{"n":-1}`, `{"n":1025}`, `{"n":"4"}`, `{"n":4.5}`, `{"n":1e1}`, ``, `{}`} {
		add(corpusCase{name: "resize " + body, method: "PUT", path: "/v1/counters/canary/shards", body: body, header: []string{"Authorization", admin}})
	}
	add(corpusCase{name: "resize by a writer", method: "PUT", path: "/v1/counters/canary/shards", body: `{"n":2}`, header: w})
	add(corpusCase{name: "resize", method: "PUT", path: "/v1/counters/canary/shards", body: `{"n":4}`, header: []string{"Authorization", admin}, mayPass: true})
	// Reads, with bad and good queries and bodies.
	for _, q := range []string{"?consistency=exact", "?consistency=strong", "?consistency=cached&consistency=exact", "?by=1", "?x=%zz"} {
		add(corpusCase{name: "read " + q, method: "GET", path: "/v1/counters/canary" + q, header: []string{"Authorization", reader}})
	}
	add(corpusCase{name: "read", method: "GET", path: "/v1/counters/canary?consistency=cached", header: []string{"Authorization", reader}, mayPass: true})
	for _, body := range []string{`{"KEYS":["canary"]}`, `{"keys":["canary"],"keys":["x"]}`, `{"keys":null}`, `{"keys":["canary",null]}`, `{"keys":[]}`, `{"keys":["{x}"]}`, `{"keys":"canary"}`} {
		add(corpusCase{name: "batch " + body, method: "POST", path: "/v1/counters:get", body: body, header: []string{"Authorization", reader}})
	}
	add(corpusCase{name: "batch", method: "POST", path: "/v1/counters:get", body: `{"keys":["canary","other"]}`, header: []string{"Authorization", reader}, mayPass: true})
	// Raw framing.
	smuggle := "POST " + incr + " HTTP/1.1\r\nHost: x\r\nAuthorization: " + writer + "\r\nContent-Length: 10\r\n\r\n{\"by\":100}"
	add(corpusCase{name: "CL and TE, smuggled request after the chunks", raw: rawChunked("POST", incr, writer, `{"by":7}`, "Content-Length: 200\r\n") + smuggle, delta: 7, intended: true})
	add(corpusCase{name: "TE with a short CL", raw: rawChunked("POST", incr, writer, `{"by":8}`, "Content-Length: 3\r\n"), delta: 8, intended: true})
	add(corpusCase{name: "two different CLs", raw: "POST " + incr + " HTTP/1.1\r\nHost: x\r\nAuthorization: " + writer + "\r\nContent-Length: 10\r\nContent-Length: 11\r\n\r\n{\"by\":100} "})
	add(corpusCase{name: "negative CL", raw: "POST " + incr + " HTTP/1.1\r\nHost: x\r\nAuthorization: " + writer + "\r\nContent-Length: -10\r\n\r\n{\"by\":100}"})
	add(corpusCase{name: "CL with a sign", raw: "POST " + incr + " HTTP/1.1\r\nHost: x\r\nAuthorization: " + writer + "\r\nContent-Length: +10\r\n\r\n{\"by\":100}"})
	add(corpusCase{name: "CL shorter than the body", raw: "POST " + incr + " HTTP/1.1\r\nHost: x\r\nAuthorization: " + writer + "\r\nContent-Length: 9\r\nConnection: close\r\n\r\n{\"by\":100}"})
	add(corpusCase{name: "bad chunk size", raw: "POST " + incr + " HTTP/1.1\r\nHost: x\r\nAuthorization: " + writer + "\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{\"by\":100}\r\n0\r\n\r\n"})
	add(corpusCase{name: "chunk longer than said", raw: "POST " + incr + " HTTP/1.1\r\nHost: x\r\nAuthorization: " + writer + "\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"by\":100}\r\n0\r\n\r\n"})
	add(corpusCase{name: "no Host on HTTP/1.1", raw: "POST " + incr + " HTTP/1.1\r\nAuthorization: " + writer + "\r\nContent-Length: 10\r\n\r\n{\"by\":100}"})
	// RFC 9112 section 5.2 lets a server replace obs-fold by a space, and
	// section 2.2 lets it take a bare LF as a line end: net/http does both,
	// so these two carry the right token and a good body.
	add(corpusCase{name: "header folding", delta: 100, intended: true, raw: "POST " + incr + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n w-secret\r\nContent-Length: 10\r\nConnection: close\r\n\r\n{\"by\":100}"})
	add(corpusCase{name: "header without colon", raw: "POST " + incr + " HTTP/1.1\r\nHost: x\r\nAuthorization " + writer + "\r\nContent-Length: 10\r\n\r\n{\"by\":100}"})
	add(corpusCase{name: "space before colon", raw: "POST " + incr + " HTTP/1.1\r\nHost: x\r\nAuthorization : " + writer + "\r\nContent-Length: 10\r\n\r\n{\"by\":100}"})
	add(corpusCase{name: "bare LF line ends", delta: 100, intended: true, raw: "POST " + incr + " HTTP/1.1\nHost: x\nAuthorization: " + writer + "\nContent-Length: 10\nConnection: close\n\n{\"by\":100}"})
	add(corpusCase{name: "huge header", raw: "POST " + incr + " HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", 2<<20) + "\r\nAuthorization: " + writer + "\r\nContent-Length: 10\r\n\r\n{\"by\":100}"})
	add(corpusCase{name: "NUL in a header", raw: "POST " + incr + " HTTP/1.1\r\nHost: x\r\nAuthorization: " + writer + "\x00\r\nContent-Length: 10\r\n\r\n{\"by\":100}"})
	add(corpusCase{name: "request line with spaces in the path", raw: "POST /v1/counters/canary /incr HTTP/1.1\r\nHost: x\r\nAuthorization: " + writer + "\r\nContent-Length: 10\r\n\r\n{\"by\":100}"})
	add(corpusCase{name: "asterisk form", raw: "POST * HTTP/1.1\r\nHost: x\r\nAuthorization: " + writer + "\r\nContent-Length: 10\r\n\r\n{\"by\":100}"})
	add(corpusCase{name: "garbage", raw: "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n"})
	return cs
}

// rawChunked is a raw request whose body is one chunk, with extra header
// lines.
func rawChunked(method, path, auth, body, extra string) string {
	return method + " " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: " + auth + "\r\n" + extra +
		"Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
}

// sendRaw writes raw on a fresh connection and returns the status of the
// first answer (0 when the server closed without one). It reads until the
// server closes, so that nothing is left in flight.
func sendRaw(t *testing.T, addr, raw string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() { io.WriteString(conn, raw) }() // a huge header may not be read whole
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	status := 0
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return status
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if status == 0 {
			status = resp.StatusCode
		} else {
			t.Errorf("a second answer (%d) on one raw request", resp.StatusCode)
		}
		if resp.Close {
			return status
		}
	}
}

// TestHostileCorpus sends a corpus of at least 150 hostile requests to a
// server with scoped tokens on a real loopback listener. None answers 5xx;
// no request that is not meant to succeed answers 2xx; the canary counter
// ends at exactly the sum of the increments sent on purpose, each of which
// answered 2xx.
func TestHostileCorpus(t *testing.T) {
	corpus := hostileCorpus()
	if len(corpus) < 150 {
		t.Fatalf("only %d requests in the corpus", len(corpus))
	}
	s, c := newTestServer(t, nil, Config{Tokens: scopeTokens})
	ts := httptest.NewServer(s)
	defer ts.Close()
	addr := strings.TrimPrefix(ts.URL, "http://")
	hc := &http.Client{
		Transport:     &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer hc.CloseIdleConnections()
	var want int64
	statuses := map[int]int{}
	for _, tc := range corpus {
		var code int
		if tc.raw != "" {
			code = sendRaw(t, addr, tc.raw)
		} else {
			req, err := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			for i := 0; i+1 < len(tc.header); i += 2 {
				req.Header.Add(tc.header[i], tc.header[i+1])
			}
			resp, err := hc.Do(req)
			switch {
			case err == nil:
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			case tc.intended:
				t.Fatalf("%s: %v", tc.name, err)
			default:
				// Refused by closing the connection (status 0, as
				// sendRaw counts it): a body over MaxBody gets its 413
				// and the close, and a client still writing the rest
				// may see the reset before it reads the answer.
				code = 0
			}
		}
		statuses[code]++
		ok := code >= 200 && code < 300
		switch {
		case code >= 500:
			t.Errorf("%.80s: %d", tc.name, code)
		case tc.intended && !ok:
			t.Errorf("%.80s: %d, but it was sent to succeed", tc.name, code)
		case ok && !tc.intended && !tc.mayPass:
			t.Errorf("%.80s: %d, a hostile request succeeded", tc.name, code)
		}
		if ok && tc.intended {
			want += tc.delta
		}
	}
	if got := value(t, c, "canary"); got != want {
		t.Errorf("canary = %d, want %d (the increments sent on purpose)", got, want)
	}
	for _, key := range []string{".", "..", "Canary", "canary/incr"} {
		if v := value(t, c, key); v != 0 {
			t.Errorf("key %q holds %d", key, v)
		}
	}
	if r := call(t, s, "GET", "/healthz", ""); r.status != 200 {
		t.Fatalf("healthz after the corpus: %d", r.status)
	}
	t.Logf("%d requests, canary %d, statuses %v", len(corpus), want, statuses)
}
