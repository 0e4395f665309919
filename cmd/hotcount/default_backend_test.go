package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/server"
)

// startTestServer runs the HTTP API over an embedded Client in this process
// and returns its URL.
func startTestServer(t *testing.T) string {
	t.Helper()
	c, err := hotcount.New(t.Context(), hotcount.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Client: c, NoDashboard: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		c.Close(context.Background())
	})
	return ts.URL
}

// closedURL returns the URL of a loopback port that nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// clearBackendEnv empties the variables that choose a backend.
func clearBackendEnv(t *testing.T) {
	for _, v := range []string{envServer, envRedis, envClientToken, envRedisPass} {
		t.Setenv(v, "")
	}
}

// TestCLIDefaultsToServer: with neither --server nor --redis, the counter
// commands talk to $HOTCOUNT_SERVER, so what incr wrote, get reads; with no
// server there they fail (exit 1) saying how to point them at one, and
// nothing is counted in a store that vanishes with the process.
func TestCLIDefaultsToServer(t *testing.T) {
	clearBackendEnv(t)
	t.Setenv(envServer, startTestServer(t))
	for range 3 {
		if code, out, stderr := runCLI("incr", "--key", "cli:default", "--by", "2"); code != exitOK {
			t.Fatalf("incr: exit %d %q %s", code, out, stderr)
		}
	}
	code, out, stderr := runCLI("get", "--key", "cli:default", "--json")
	var got struct {
		Value int64 `json:"value"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || got.Value != 6 {
		t.Fatalf("get: exit %d %q %s; want value 6", code, out, stderr)
	}
	if code, out, stderr := runCLI("resize", "--key", "cli:default", "--n", "2"); code != exitOK || !strings.Contains(out, "n=2") {
		t.Fatalf("resize: exit %d %q %s", code, out, stderr)
	}
	if code, out, stderr := runCLI("shards", "--key", "cli:default"); code != exitOK || !strings.Contains(out, "value=6") {
		t.Fatalf("shards: exit %d %q %s", code, out, stderr)
	}

	dead := closedURL(t)
	t.Setenv(envServer, dead)
	for _, args := range [][]string{
		{"incr", "--key", "cli:default"}, {"get", "--key", "cli:default"},
		{"shards", "--key", "cli:default"}, {"resize", "--key", "cli:default", "--n", "2"},
	} {
		code, out, stderr := runCLI(args...)
		if code != exitFailure || out != "" || !strings.Contains(stderr, dead) ||
			!strings.Contains(stderr, "--server") || !strings.Contains(stderr, "--redis") ||
			!strings.HasPrefix(stderr, "hotcount: "+args[0]+": ") || strings.Count(stderr, "\n") > 1 {
			t.Errorf("%q with no server: exit %d, stdout %q, stderr %q; want exit 1 naming %s and how to point elsewhere", args, code, out, stderr, dead)
		}
	}
	// With no variable at all the default is the server's default address.
	t.Setenv(envServer, "")
	var b backendFlags
	fs := newFlagSet("get", nil, nil)
	b.register(fs, "n")
	if _, done := fs.parse(nil); done {
		t.Fatal("parse")
	}
	if _, ok := b.choose(); !ok || b.server != DefaultServer || b.redis != "" {
		t.Fatalf("default backend: server %q redis %q", b.server, b.redis)
	}
}

// TestCLIRedisFromEnv: $HOTCOUNT_REDIS stands for --redis; a flag beats a
// variable; both flags, or both variables, are a usage error.
func TestCLIRedisFromEnv(t *testing.T) {
	clearBackendEnv(t)
	cases := []struct {
		name         string
		envS, envR   string
		args         []string
		server, redi string
		ok           bool
	}{
		{"env redis", "", "10.0.0.1:6379", nil, "", "10.0.0.1:6379", true},
		{"env server", "http://h:1", "", nil, "http://h:1", "", true},
		{"flag redis beats env server", "http://h:1", "", []string{"--redis", "a:1"}, "", "a:1", true},
		{"flag server beats env redis", "", "a:1", []string{"--server", "http://h:2"}, "http://h:2", "", true},
		{"both variables", "http://h:1", "a:1", nil, "", "", false},
		{"both flags", "", "", []string{"--server", "http://h:2", "--redis", "a:1"}, "", "", false},
		{"redis tls without redis", "", "", []string{"--redis-tls"}, "", "", false},
		{"empty redis flag", "", "", []string{"--redis", ""}, "", "", false},
		{"redis flag of commas", "", "", []string{"--redis", " , "}, "", "", false},
		{"empty redis flag beats env server", "http://h:1", "", []string{"--redis", ""}, "", "", false},
		{"empty server flag", "", "", []string{"--server", ""}, "", "", false},
		{"blank redis variable", "", " ", nil, "", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envServer, tc.envS)
			t.Setenv(envRedis, tc.envR)
			var b backendFlags
			var errb strings.Builder
			fs := newFlagSet("get", &errb, &errb)
			b.register(fs, "n")
			if _, done := fs.parse(tc.args); done {
				t.Fatal("parse")
			}
			code, ok := b.choose()
			if ok != tc.ok || (!ok && code != exitUsage) {
				t.Fatalf("choose: ok %v code %d (%s), want ok %v", ok, code, errb.String(), tc.ok)
			}
			if ok && (b.server != tc.server || b.redis != tc.redi) {
				t.Fatalf("server %q redis %q, want %q %q", b.server, b.redis, tc.server, tc.redi)
			}
		})
	}
	// The variable reaches a real command: an address that is not host:port
	// is refused as --redis would be.
	t.Setenv(envRedis, "nohost")
	if code, _, stderr := runCLI("get", "--key", "a"); code != exitUsage || !strings.Contains(stderr, "nohost") {
		t.Fatalf("$%s=nohost: exit %d %q", envRedis, code, stderr)
	}
}

// TestCLIFlagN: --n creates a counter that does not exist yet with that
// many sub-counters, pinned, through the server; shards --n shows what a
// counter that does not exist would get and says so; --n on a counter
// that exists with another N, and --n on get, are usage errors.
func TestCLIFlagN(t *testing.T) {
	clearBackendEnv(t)
	t.Setenv(envServer, startTestServer(t))
	if code, out, stderr := runCLI("incr", "--key", "flag:new", "--n", "8"); code != exitOK {
		t.Fatalf("incr --n 8: exit %d %q %s", code, out, stderr)
	}
	code, out, stderr := runCLI("shards", "--key", "flag:new", "--json")
	var rep hotcount.ShardReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.N != 8 || !rep.Pinned || rep.Value != 1 {
		t.Fatalf("shards after incr --n 8: exit %d %q %s; want n 8, pinned, value 1", code, out, stderr)
	}
	if code, out, stderr := runCLI("incr", "--key", "flag:new", "--n", "3"); code != exitUsage || !strings.Contains(stderr, "n=8") {
		t.Fatalf("incr --n 3 on a counter with n 8: exit %d %q %s; want exit 2", code, out, stderr)
	}
	if code, out, stderr := runCLI("incr", "--key", "flag:new", "--n", "8"); code != exitOK {
		t.Fatalf("incr --n 8 again: exit %d %q %s", code, out, stderr)
	}
	code, out, stderr = runCLI("shards", "--key", "flag:absent", "--n", "6")
	if code != exitOK || !strings.Contains(out, "n=6") || !strings.Contains(out, "does not exist") || strings.Count(out, "{flag:absent#") != 6 {
		t.Fatalf("shards --n 6 of a counter that does not exist: exit %d %q %s", code, out, stderr)
	}
	if code, _, _ := runCLI("get", "--key", "flag:new", "--n", "2"); code != exitUsage {
		t.Fatalf("get --n: exit %d, want 2", code)
	}
	if code, out, stderr := runCLI("resize", "--key", "flag:new", "--auto"); code != exitOK || !strings.Contains(out, "pinned=false") {
		t.Fatalf("resize --auto: exit %d %q %s", code, out, stderr)
	}
}

// TestCLIFlagNRedis: --n works the same on a cluster directly (--redis):
// incr --n 8 creates the counter with 8 sub-counters, pinned, and a later
// command sees them.
func TestCLIFlagNRedis(t *testing.T) {
	clearBackendEnv(t)
	n, err := testenv.StartNode(t.Context(), testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	if code, out, stderr := runCLI("incr", "--redis", n.Addr, "--key", "flag:redis", "--n", "8"); code != exitOK {
		t.Fatalf("incr --redis --n 8: exit %d %q %s", code, out, stderr)
	}
	t.Setenv(envRedis, n.Addr) // $HOTCOUNT_REDIS stands for --redis
	code, out, stderr := runCLI("shards", "--key", "flag:redis", "--json")
	var rep hotcount.ShardReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.N != 8 || !rep.Pinned || rep.Value != 1 {
		t.Fatalf("shards after incr --n 8: exit %d %q %s; want n 8, pinned, value 1", code, out, stderr)
	}
}
