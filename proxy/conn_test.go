package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/proxy"
)

// waitFor polls cond every 10 ms, up to 10 s (a hang check).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: not within 10 s", what)
}

// TestBlockingClientLeaves: a client blocked in BLPOP (timeout 0) hangs
// up; the proxy ends the upstream wait, so an element pushed afterwards is
// not taken by a wait nobody is behind. Commands pipelined behind the
// blocking one run after it.
func TestBlockingClientLeaves(t *testing.T) {
	p := uniq(t)
	e := startProxy(t, nil, proxy.Config{})
	key := "{" + p + "}q"
	r := dialRaw(t, e.addr)
	r.nc.Write(append(encode("BLPOP", key, "0"), encode("PING")...))
	waitFor(t, "BLPOP blocked on the node", func() bool {
		out, err := testenv.Do(context.Background(), ownerOf(t, key), "CLIENT", "LIST")
		return err == nil && strings.Contains(out, "cmd=blpop")
	})
	r.nc.Close()
	owner := ownerOf(t, key)
	waitFor(t, "the upstream BLPOP ended", func() bool {
		out, err := testenv.Do(context.Background(), owner, "CLIENT", "LIST")
		return err == nil && !strings.Contains(out, "cmd=blpop")
	})
	if _, err := testenv.Do(context.Background(), owner, "RPUSH", key, "v"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a stray BLPOP would take it now
	if n, err := testenv.Do(context.Background(), owner, "LLEN", key); err != nil || n != "1" {
		t.Fatalf("LLEN after the client left = %q, %v; a blocked pop outlived its client", n, err)
	}
	waitFor(t, "the connection closed", func() bool { return e.srv.Clients() == 0 })

	// Pipelined behind a blocking command that gets its element.
	r = dialRaw(t, e.addr)
	r.nc.SetDeadline(time.Now().Add(10 * time.Second))
	r.nc.Write(append(encode("BLPOP", key, "0"), encode("ECHO", "after")...))
	got1, err1 := readRaw(r.br)
	got2, err2 := readRaw(r.br)
	if err1 != nil || err2 != nil || !strings.Contains(got1, "v") || got2 != "$5\r\nafter\r\n" {
		t.Fatalf("got %q %v, %q %v", got1, err1, got2, err2)
	}
}

// TestShutdownEndsBlocked: Shutdown with a client blocked in BLPOP 0
// answers it with an error and returns.
func TestShutdownEndsBlocked(t *testing.T) {
	p := uniq(t)
	ctx := context.Background()
	hc, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: cluster.Seeds()}})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close(ctx)
	srv, err := proxy.New(ctx, proxy.Config{Counters: hc, Redis: hotcount.RedisConfig{Addrs: cluster.Seeds()}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	r := dialRaw(t, ln.Addr().String())
	r.nc.Write(encode("BLPOP", "{"+p+"}q", "0"))
	waitFor(t, "blocked", func() bool { return srv.Stats().Passed == 1 })
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; err != proxy.ErrClosed {
		t.Fatalf("Serve returned %v", err)
	}
	r.nc.SetDeadline(time.Now().Add(5 * time.Second))
	rest, _ := io.ReadAll(r.br)
	if !strings.HasPrefix(string(rest), "-ERR hotcount proxy: shutting down") {
		t.Fatalf("the blocked client got %q", rest)
	}
}

// TestMaxClients: past MaxClients a connection is answered with Redis's
// error and closed; the others keep working.
func TestMaxClients(t *testing.T) {
	e := startProxy(t, nil, proxy.Config{MaxClients: 2})
	a, b := dialRaw(t, e.addr), dialRaw(t, e.addr)
	a.do("PING")
	b.do("PING")
	out, err := exchange(t, e.addr, encode("PING"))
	if err != nil || string(out) != "-ERR max number of clients reached\r\n" {
		t.Fatalf("third client got %q, %v", out, err)
	}
	if got := a.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("first client: %q", got)
	}
	if e.srv.Stats().Rejected != 1 {
		t.Fatalf("stats %+v", e.srv.Stats())
	}
}

// TestAuth: the proxy's own password for its clients, apart from the
// password the proxy (and the Client) give Redis.
func TestAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	if _, err := testenv.Do(ctx, n.Addr, "CONFIG", "SET", "requirepass", "upstream-secret"); err != nil {
		t.Fatal(err)
	}
	hc, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: []string{n.Addr}, Password: "upstream-secret"},
		Namespaces: []hotcount.Namespace{{Prefix: "likes:"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close(ctx)
	srv, err := proxy.New(ctx, proxy.Config{
		Counters: hc,
		Redis:    hotcount.RedisConfig{Addrs: []string{n.Addr}, Password: "upstream-secret"}, Password: "client-secret",
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	r := dialRaw(t, ln.Addr().String())
	for _, step := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"GET", "k"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"INCR", "likes:1"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"HELLO", "3"}, "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"},
		{[]string{"AUTH", "upstream-secret"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"AUTH", "someone", "client-secret"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"AUTH", "client-secret"}, "+OK\r\n"},
		{[]string{"SET", "k", "v"}, "+OK\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
		{[]string{"INCR", "likes:1"}, ":1\r\n"},
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"GET", "k"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"HELLO", "2", "AUTH", "default", "client-secret", "SETNAME", "app"}, ""},
		{[]string{"CLIENT", "GETNAME"}, "$3\r\napp\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
	} {
		got := r.do(step.cmd...)
		if step.want != "" && got != step.want {
			t.Fatalf("%q: got %q, want %q", step.cmd, got, step.want)
		}
	}
	// Without a proxy password, AUTH is refused as by a Redis without one.
	e := startProxy(t, nil, proxy.Config{})
	if got := dialRaw(t, e.addr).do("AUTH", "x"); !strings.HasPrefix(got, "-ERR AUTH <password> called without any password configured") {
		t.Fatalf("AUTH without a password configured: %q", got)
	}
}

// TestConnectionCommands: what the proxy answers for the connection
// itself.
func TestConnectionCommands(t *testing.T) {
	e := startProxy(t, nil, proxy.Config{})
	r := dialRaw(t, e.addr)
	for _, step := range []struct {
		cmd     []string
		want    string
		prefix  bool
		contain string
	}{
		{cmd: []string{"PING"}, want: "+PONG\r\n"},
		{cmd: []string{"ECHO", "hi"}, want: "$2\r\nhi\r\n"},
		{cmd: []string{"SELECT", "0"}, want: "+OK\r\n"},
		{cmd: []string{"SELECT", "1"}, want: "-ERR DB index is out of range\r\n"},
		{cmd: []string{"CLIENT", "SETNAME", "a b"}, want: "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"},
		{cmd: []string{"CLIENT", "SETNAME", "worker-1"}, want: "+OK\r\n"},
		{cmd: []string{"CLIENT", "GETNAME"}, want: "$8\r\nworker-1\r\n"},
		{cmd: []string{"CLIENT", "ID"}, prefix: true, want: ":"},
		{cmd: []string{"CLIENT", "INFO"}, contain: "name=worker-1"},
		{cmd: []string{"CLIENT", "LIST"}, contain: "name=worker-1"},
		{cmd: []string{"CLIENT", "SETINFO", "LIB-NAME", "test"}, want: "+OK\r\n"},
		{cmd: []string{"CLIENT", "TRACKING", "on"}, prefix: true, want: "-ERR client-side caching"},
		{cmd: []string{"COMMAND", "COUNT"}, prefix: true, want: ":"},
		{cmd: []string{"COMMAND", "DOCS", "GET"}, contain: "summary"},
		{cmd: []string{"INFO"}, contain: "redis_mode:standalone"},
		{cmd: []string{"INFO", "replication"}, contain: "role:master"},
		{cmd: []string{"ROLE"}, want: "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n"},
		{cmd: []string{"SUBSCRIBE", "ch"}, prefix: true, want: "-ERR pub/sub is not supported"},
		{cmd: []string{"PUBLISH", "ch", "m"}, want: ":0\r\n"},
		{cmd: []string{"MONITOR"}, prefix: true, want: "-ERR MONITOR is not supported"},
		{cmd: []string{"CONFIG", "GET", "maxmemory-policy"}, contain: "maxmemory-policy"},
		{cmd: []string{"CONFIG", "SET", "maxmemory", "1"}, prefix: true, want: "-ERR CONFIG SET is refused by the hotcount proxy"},
		{cmd: []string{"HELLO", "4"}, want: "-NOPROTO unsupported protocol version\r\n"},
		{cmd: []string{"HELLO", "3"}, prefix: true, want: "%7\r\n"},
		{cmd: []string{"CLIENT", "INFO"}, prefix: true, want: "="},
		{cmd: []string{"GET", "nope:" + uniq(t)}, want: "_\r\n"},
		{cmd: []string{"RESET"}, want: "+RESET\r\n"},
		{cmd: []string{"GET", "nope:" + uniq(t)}, want: "$-1\r\n"},
		{cmd: []string{"QUIT"}, want: "+OK\r\n"},
	} {
		got := r.do(step.cmd...)
		switch {
		case step.contain != "":
			if !strings.Contains(got, step.contain) {
				t.Errorf("%q: %q does not contain %q", step.cmd, got, step.contain)
			}
		case step.prefix:
			if !strings.HasPrefix(got, step.want) {
				t.Errorf("%q: %q does not start with %q", step.cmd, got, step.want)
			}
		case got != step.want:
			t.Errorf("%q: got %q, want %q", step.cmd, got, step.want)
		}
	}
	if _, err := readRaw(r.br); err == nil {
		t.Fatal("the connection is open after QUIT")
	}
}

// TestAdmin: /metrics (the proxy's counters, the Client's buffer gauges,
// Go and process metrics), /healthz and /readyz.
func TestAdmin(t *testing.T) {
	p := uniq(t)
	e := startProxy(t, []hotcount.Namespace{{Prefix: p, Buffered: true}}, proxy.Config{})
	r := dialRaw(t, e.addr)
	r.do("INCR", p+"x")
	r.do("SET", "plain:"+p, "1")
	h, err := e.srv.AdminHandler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/metrics")
	for _, want := range []string{
		"hotcount_proxy_increments_total 1", "hotcount_proxy_passthrough_total 1",
		"hotcount_proxy_clients 1", "hotcount_buffer_unflushed_delta", "go_goroutines", "process_resident_memory_bytes",
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("/metrics: %d, no %q in\n%s", code, want, body)
		}
	}
	if code, body := get("/healthz"); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	// A path no route serves is a 404, another method on a route's path a
	// 405 with Allow: each in JSON, as serve answers them.
	for _, tc := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"GET", "/nope", 404, ""},
		{"POST", "/v1/counters/x/incr", 404, ""},
		{"POST", "/healthz", 405, "GET, HEAD"},
		{"DELETE", "/metrics", 405, "GET, HEAD"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		testenv.CheckJSONError(t, nil, req, tc.code, tc.allow)
	}
	e.srv.Drain()
	code, body = get("/readyz")
	var m map[string]string
	if code != 503 || json.Unmarshal([]byte(body), &m) != nil || m["error"] == "" {
		t.Fatalf("/readyz while draining: %d %s", code, body)
	}
}

// TestInputInPieces: a client that writes while its replies are still
// coming (commands cut at every kind of point, a pipeline larger than the
// read buffer, writes that arrive while the proxy runs the commands before
// them) gets every reply, in order. A connection that waited for more
// input with some already in its socket would hang here (the read
// deadline ends the test).
func TestInputInPieces(t *testing.T) {
	p := uniq(t)
	e := startProxy(t, nil, proxy.Config{})
	r := dialRaw(t, e.addr)
	r.nc.SetDeadline(time.Now().Add(60 * time.Second)) // a hang check
	const n = 3000
	val := strings.Repeat("v", 100)
	var in []byte
	for i := 0; i < n; i++ {
		key := "{" + p + "}" + itoa(i/2%7) // a GET reads the SET before it
		if i%2 == 0 {
			in = append(in, encode("SET", key, val+itoa(i))...)
		} else {
			in = append(in, encode("GET", key)...)
		}
	}
	errc := make(chan error, 1)
	go func() {
		// Cut points cycle through sizes from 1 byte to past the read
		// buffer (16 KiB at first), with a pause now and then so that a write finds
		// the proxy busy with the commands before it.
		sizes := []int{1, 2, 3, 5, 7, 13, 100, 1000, 70000}
		for i, off := 0, 0; off < len(in); i++ {
			end := min(off+sizes[i%len(sizes)], len(in))
			if _, err := r.nc.Write(in[off:end]); err != nil {
				errc <- err
				return
			}
			off = end
			if i%5 == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
		errc <- nil
	}()
	for i := 0; i < n; i++ {
		got, err := readRaw(r.br)
		if err != nil {
			t.Fatalf("reply %d of %d: %v", i, n, err)
		}
		want := "+OK\r\n"
		if i%2 == 1 {
			want = "$" + itoa(len(val)+len(itoa(i-1))) + "\r\n" + val + itoa(i-1) + "\r\n"
		}
		if got != want {
			t.Fatalf("reply %d = %q, want %q", i, got, want)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestClientUnblock: CLIENT UNBLOCK id [TIMEOUT|ERROR] ends a client's
// blocking command as Redis does: the blocked client gets the command's
// timeout reply, or the UNBLOCKED error, and UNBLOCK answers 1; a client
// that is not blocked answers 0. The upstream wait ends with it, so an
// element pushed afterwards stays in the list.
func TestClientUnblock(t *testing.T) {
	p := uniq(t)
	e := startProxy(t, nil, proxy.Config{})
	key := "{" + p + "}q"
	owner := ownerOf(t, key)
	r := dialRaw(t, e.addr)
	cases := []struct {
		cmd    []string
		reason []string
		want   string
	}{
		{[]string{"BLPOP", key, "0"}, nil, "*-1\r\n"},
		{[]string{"BLMOVE", key, key + "2", "LEFT", "LEFT", "0"}, []string{"TIMEOUT"}, "$-1\r\n"},
		{[]string{"BLPOP", key, "0"}, []string{"error"}, "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"},
	}
	for _, tc := range cases {
		b := dialRaw(t, e.addr)
		id := strings.Trim(b.do("CLIENT", "ID"), ":\r\n")
		if got := r.do("CLIENT", "UNBLOCK", id); got != ":0\r\n" {
			t.Fatalf("CLIENT UNBLOCK of a client not blocked: %q", got)
		}
		b.nc.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := b.nc.Write(encode(tc.cmd...)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "blocked on the node", func() bool {
			out, err := testenv.Do(context.Background(), owner, "CLIENT", "LIST")
			return err == nil && strings.Contains(out, "cmd="+strings.ToLower(tc.cmd[0]))
		})
		if got := r.do(append([]string{"CLIENT", "UNBLOCK", id}, tc.reason...)...); got != ":1\r\n" {
			t.Fatalf("%q: CLIENT UNBLOCK %q", tc.cmd, got)
		}
		if got, err := readRaw(b.br); err != nil || got != tc.want {
			t.Fatalf("%q after CLIENT UNBLOCK %q: %q, %v; want %q", tc.cmd, tc.reason, got, err, tc.want)
		}
		if got := b.do("ECHO", "still here"); got != "$10\r\nstill here\r\n" {
			t.Fatalf("the unblocked connection: %q", got)
		}
		waitFor(t, "the upstream wait ended", func() bool {
			out, err := testenv.Do(context.Background(), owner, "CLIENT", "LIST")
			return err == nil && !strings.Contains(out, "cmd="+strings.ToLower(tc.cmd[0]))
		})
	}
	if _, err := testenv.Do(context.Background(), owner, "RPUSH", key, "v"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a stray wait would take it now
	if n, err := testenv.Do(context.Background(), owner, "LLEN", key); err != nil || n != "1" {
		t.Fatalf("LLEN after the unblocks = %q, %v; a blocked pop outlived CLIENT UNBLOCK", n, err)
	}
	if got := r.do("CLIENT", "UNBLOCK", "x"); got != "-ERR value is not an integer or out of range\r\n" {
		t.Errorf("CLIENT UNBLOCK x: %q", got)
	}
	if got := r.do("CLIENT", "UNBLOCK", "1", "LATER"); got != "-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n" {
		t.Errorf("CLIENT UNBLOCK 1 LATER: %q", got)
	}
}
