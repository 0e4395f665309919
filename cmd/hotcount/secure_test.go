package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/internal/testenv"
)

// inProcessServe runs `serve` in this process and returns its base URL and
// a stop function that cancels it (as SIGTERM does) and returns its exit
// status and stderr.
func inProcessServe(t *testing.T, args ...string) (string, func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runServe(ctx, append([]string{"--listen", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "data")}, args...), pw, stderr)
		pw.Close()
	}()
	line := make(chan string, 1)
	go func() {
		b := make([]byte, 256)
		n, _ := pr.Read(b)
		line <- strings.TrimSpace(string(b[:n]))
		io.Copy(io.Discard, pr)
	}()
	var addr string
	select {
	case l := <-line:
		addr = strings.TrimPrefix(l, "listening on ")
	case code := <-done:
		cancel()
		t.Fatalf("serve %q exited %d before listening: %s", args, code, stderr.String())
	}
	if !strings.HasPrefix(addr, "http") {
		cancel()
		t.Fatalf("serve printed %q", addr)
	}
	var stopped bool
	var code int
	stop := func() (int, string) {
		if !stopped {
			cancel()
			code, stopped = <-done, true
		}
		return code, stderr.String()
	}
	t.Cleanup(func() { stop() })
	return addr, stop
}

// serveFails runs `serve` and expects it to exit with a failure before it
// listens; it returns the exit status and stderr.
func serveFails(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb syncBuffer
	code := runServe(ctx, append([]string{"--listen", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "data")}, args...), &out, &errb)
	if strings.Contains(out.String(), "listening") {
		t.Fatalf("serve %q listened: %s", args, errb.String())
	}
	return code, errb.String()
}

// counterRoundTrip increments a counter through the API and reads it back.
func counterRoundTrip(t *testing.T, hc *http.Client, base, key string) {
	t.Helper()
	resp, err := hc.Post(base+"/v1/counters/"+key+"/incr", "application/json", strings.NewReader(`{"by":7}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("incr: %d", resp.StatusCode)
	}
	resp, err = hc.Get(base + "/v1/counters/" + key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"value":7`) {
		t.Fatalf("get: %d %s", resp.StatusCode, b)
	}
}

// secureNode starts a redis-server that asks for a password ("node-pass"),
// has an ACL user (hc, "user-pass") and serves TLS with a CA made for the
// test, and writes the password to a file; both go at the end of the
// test, and the context bounds it.
func secureNode(t *testing.T) (context.Context, *testenv.SecureNode, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	n, err := testenv.StartSecureNode(ctx, testenv.SecureOptions{Password: "node-pass", User: "hc", UserPassword: "user-pass", TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	passFile := filepath.Join(t.TempDir(), "redis-pass")
	if err := os.WriteFile(passFile, []byte("node-pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return ctx, n, passFile
}

// TestServeRedisAuthAndTLS runs serve against a real redis-server that
// asks for a password, has an ACL user and serves TLS with a CA made for
// the test: each way in works and stores the counter in that Redis; a
// missing or wrong password, and TLS without the CA, fail at start with a
// message.
func TestServeRedisAuthAndTLS(t *testing.T) {
	clearServeEnv(t)
	ctx, n, passFile := secureNode(t)

	for _, tc := range loginCases(n, passFile, "auth:") {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			base, stop := inProcessServe(t, tc.args...)
			counterRoundTrip(t, http.DefaultClient, base, tc.key)
			if code, stderr := stop(); code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			keys, err := n.Do(ctx, "KEYS", "{"+tc.key+"#*")
			if err != nil || keys == "" {
				t.Fatalf("the counter is not in the Redis: %q %v", keys, err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no password", []string{"--redis", n.Addr}, "NOAUTH"},
		{"wrong password", []string{"--redis", n.Addr, "--redis-password", "nope"}, "WRONGPASS"},
		{"TLS without the CA", []string{"--redis", n.TLSAddr, "--redis-tls", "--redis-password-file", passFile}, "certificate"},
		{"plain text to the TLS port", []string{"--redis", n.TLSAddr, "--redis-password-file", passFile}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := serveFails(t, tc.args...)
			if code != exitFailure || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 1 mentioning %q", code, stderr, tc.want)
			}
		})
	}
}

// TestServeHTTPS serves the API over TLS from a certificate and key: a
// client that trusts the CA gets its answers, and plain HTTP is refused.
func TestServeHTTPS(t *testing.T) {
	clearServeEnv(t)
	f, err := testenv.WriteTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base, stop := inProcessServe(t, "--tls-cert", f.ServerCert, "--tls-key", f.ServerKey)
	if !strings.HasPrefix(base, "https://127.0.0.1:") {
		t.Fatalf("listening on %q", base)
	}
	pem, _ := os.ReadFile(f.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	counterRoundTrip(t, hc, base, "https:1")
	resp, err := http.Get("http://" + strings.TrimPrefix(base, "https://") + "/healthz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("plain HTTP to the HTTPS port: %d", resp.StatusCode)
		}
	}
	if code, stderr := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if code, stderr := serveFails(t, "--tls-cert", f.ServerCert); code != exitUsage || !strings.Contains(stderr, "tls_key") {
		t.Fatalf("cert without key: exit %d %q", code, stderr)
	}
}

// TestServePostgresTLS: with sslmode=require in the URL the durable store's
// connections to the real PostgreSQL are encrypted (pg_stat_ssl says so);
// with sslmode=verify-full and a CA that did not sign the server's
// certificate, serve refuses to start.
func TestServePostgresTLS(t *testing.T) {
	clearServeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ssl string
	if err := conn.QueryRow(ctx, "SHOW ssl").Scan(&ssl); err != nil {
		t.Fatal(err)
	}
	if ssl != "on" {
		t.Skip("the test PostgreSQL serves no TLS (ssl = off)")
	}
	schema := testenv.PostgresSchema(t)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	app := "hotcount-tls-" + schema
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("sslmode", "require")
	q.Set("application_name", app)
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	base, stop := inProcessServe(t, "--postgres", u.String(), "--mode", "durable", "--data", "")
	counterRoundTrip(t, http.DefaultClient, base, "pg:tls")
	var n, encrypted int
	err = conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = $1`, app).Scan(&n, &encrypted)
	if err != nil || n == 0 || encrypted != n {
		t.Fatalf("%d connections of serve, %d encrypted (%v)", n, encrypted, err)
	}
	t.Logf("%d connections of serve, all encrypted", n)
	if code, stderr := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}

	f, err := testenv.WriteTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	q.Set("sslmode", "verify-full")
	q.Set("sslrootcert", f.CA)
	u.RawQuery = q.Encode()
	code, stderr := serveFails(t, "--postgres", u.String(), "--data", "")
	if code != exitFailure || !strings.Contains(stderr, "certificate") {
		t.Fatalf("verify-full with a foreign CA: exit %d, %q", code, stderr)
	}
}

// inProcessProxy runs `hotcount proxy` in this process (admin port off
// unless args set --admin-listen) and returns its Redis address, its admin
// base URL ("" when off) and a stop function that cancels it (as SIGTERM
// does) and returns its exit status and stderr.
func inProcessProxy(t *testing.T, args ...string) (string, string, func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runProxy(ctx, append([]string{"--resp-listen", "127.0.0.1:0", "--admin-listen", "off"}, args...), pw, stderr)
		pw.Close()
	}()
	type addrs struct{ resp, admin string }
	got := make(chan addrs, 1)
	go func() {
		var a addrs
		br := bufio.NewReader(pr)
		for {
			l, err := br.ReadString('\n')
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "admin on "); ok {
				a.admin = v
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "listening on redis://"); ok {
				a.resp = v
				break
			}
			if err != nil {
				break
			}
		}
		got <- a
		io.Copy(io.Discard, br)
	}()
	var a addrs
	select {
	case a = <-got:
	case code := <-done:
		cancel()
		t.Fatalf("proxy %q exited %d before listening: %s", args, code, stderr.String())
	}
	if a.resp == "" {
		cancel()
		t.Fatalf("proxy %q did not say where it listens: %s", args, stderr.String())
	}
	var stopped bool
	var code int
	stop := func() (int, string) {
		if !stopped {
			cancel()
			code, stopped = <-done, true
		}
		return code, stderr.String()
	}
	t.Cleanup(func() { stop() })
	return a.resp, a.admin, stop
}

// TestProxyRedisAuthAndTLS runs the proxy against a real redis-server that
// asks for a password, has an ACL user and serves TLS with a CA made for
// the test, with serve's --redis-* flags (and the environment): through
// each way in, an INCR on a counter key lands in that Redis as
// sub-counters and a plain SET/GET passes through; a missing or wrong
// password and TLS without the CA fail at start with a message.
func TestProxyRedisAuthAndTLS(t *testing.T) {
	clearServeEnv(t)
	ctx, n, passFile := secureNode(t)
	conf := filepath.Join(t.TempDir(), "proxy.yaml")
	os.WriteFile(conf, []byte("namespaces: [{prefix: \"px:\", n: 4}]\n"), 0o644)

	for _, tc := range loginCases(n, passFile, "") {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			addr, _, stop := inProcessProxy(t, append(tc.args, "--config", conf)...)
			rc := redis.NewClient(&redis.Options{Addr: addr})
			defer rc.Close()
			counter, plain := "px:"+tc.key, "plain:"+tc.key
			for range 5 {
				if err := rc.IncrBy(ctx, counter, 3).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if v, err := rc.Get(ctx, counter).Int64(); err != nil || v != 15 {
				t.Fatalf("GET %s through the proxy: %d %v, want 15", counter, v, err)
			}
			if err := rc.Set(ctx, plain, "v-"+tc.key, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := rc.Get(ctx, plain).Result(); err != nil || v != "v-"+tc.key {
				t.Fatalf("GET %s through the proxy: %q %v", plain, v, err)
			}
			rc.Close()
			if code, stderr := stop(); code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if v, err := n.Do(ctx, "GET", plain); err != nil || v != "v-"+tc.key {
				t.Fatalf("the plain key in the Redis: %q %v", v, err)
			}
			keys, err := n.Do(ctx, "KEYS", "{"+counter+"#*")
			if err != nil || keys == "" {
				t.Fatalf("the counter is not in the Redis: %q %v", keys, err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no password", []string{"--redis", n.Addr}, "NOAUTH"},
		{"wrong password", []string{"--redis", n.Addr, "--redis-password", "nope"}, "WRONGPASS"},
		{"TLS without the CA", []string{"--redis", n.TLSAddr, "--redis-tls", "--redis-password-file", passFile}, "certificate"},
		{"user without a password", []string{"--redis", n.Addr, "--redis-username", "hc"}, "redis_username needs a password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out, errb syncBuffer
			code := runProxy(ctx, append([]string{"--resp-listen", "127.0.0.1:0", "--admin-listen", "off", "--config", conf}, tc.args...), &out, &errb)
			if strings.Contains(out.String(), "listening") || code == exitOK || !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want a failure before listening mentioning %q", code, out.String(), errb.String(), tc.want)
			}
		})
	}
}

// loginCase is one way into a secure test node with the --redis-* flags:
// args (and env) for the command, and a key (prefix + a name) to use.
type loginCase struct {
	name string
	args []string
	env  map[string]string
	key  string
}

// loginCases are the ways into n that must work, for serve and the proxy
// alike: a password from a file, an ACL user with its password from the
// environment, TLS with the test CA, and TLS with a client certificate.
func loginCases(n *testenv.SecureNode, passFile, prefix string) []loginCase {
	return []loginCase{
		{"requirepass from a file", []string{"--redis", n.Addr, "--redis-password-file", passFile}, nil, prefix + "file"},
		{"ACL user, password from the environment", []string{"--redis", n.Addr, "--redis-username", "hc"}, map[string]string{"HOTCOUNT_REDIS_PASSWORD": "user-pass"}, prefix + "acl"},
		{"TLS with the test CA", []string{"--redis", n.TLSAddr, "--redis-tls-ca", n.Files.CA, "--redis-password-file", passFile}, nil, prefix + "tls"},
		{"TLS with a client certificate", []string{"--redis", n.TLSAddr, "--redis-tls-ca", n.Files.CA, "--redis-tls-cert", n.Files.ClientCert,
			"--redis-tls-key", n.Files.ClientKey, "--redis-username", "hc", "--redis-password", "user-pass"}, nil, prefix + "mtls"},
	}
}

// TestRebuildRedisAuthAndTLS: rebuild reaches a Redis that asks for a
// password, has an ACL user and serves TLS, as the counter commands do:
// with each way in it corrects the view of a durable counter whose cache
// node lost it; without the password it fails.
func TestRebuildRedisAuthAndTLS(t *testing.T) {
	ctx, n, passFile := secureNode(t)
	userPass := filepath.Join(t.TempDir(), "user-pass")
	if err := os.WriteFile(userPass, []byte("user-pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	be, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	c, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: []string{n.Addr}, Password: "node-pass"},
		Defaults: hotcount.Namespace{Mode: hotcount.ModeDurable}, Durability: hotcount.DurabilityConfig{Store: be}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.IncrID(ctx, "sec:rebuild", 7, "id-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	be.Close()
	rdb := redis.NewClient(&redis.Options{Addr: n.Addr, Password: "node-pass"})
	defer rdb.Close()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"requirepass from a file", []string{"--redis", n.Addr, "--redis-password-file", passFile}, nil},
		{"ACL user, password from the environment", []string{"--redis", n.Addr, "--redis-username", "hc"}, map[string]string{"HOTCOUNT_REDIS_PASSWORD": "user-pass"}},
		{"TLS with the test CA", []string{"--redis", n.TLSAddr, "--redis-tls-ca", n.Files.CA, "--redis-password-file", passFile}, nil},
		{"TLS with a client certificate", []string{"--redis", n.TLSAddr, "--redis-tls-ca", n.Files.CA, "--redis-tls-cert", n.Files.ClientCert,
			"--redis-tls-key", n.Files.ClientKey, "--redis-username", "hc", "--redis-password-file", userPass}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			// The view of the counter is lost; the log has it.
			if err := rdb.Del(ctx, "{sec:rebuild#0}").Err(); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"rebuild", "--data", dir, "--key", "sec:rebuild", "--json"}, tc.args...)
			code, out, errOut := clusterCLI(t, ctx, args...)
			if code != exitOK {
				t.Fatalf("rebuild %q: exit %d, stderr %q", tc.args, code, errOut)
			}
			var rep struct{ Keys, Corrected int }
			if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Corrected != 1 {
				t.Fatalf("rebuild printed %q (%v), want 1 corrected", out, err)
			}
			if v, err := rdb.Get(ctx, "{sec:rebuild#0}").Int64(); err != nil || v != 7 {
				t.Fatalf("after rebuild {sec:rebuild#0} = %d, %v; want 7", v, err)
			}
		})
	}
	t.Run("no password", func(t *testing.T) {
		t.Setenv("HOTCOUNT_REDIS_PASSWORD", "")
		code, _, errOut := clusterCLI(t, ctx, "rebuild", "--data", dir, "--redis", n.Addr)
		if code == exitOK || !strings.Contains(errOut, "NOAUTH") {
			t.Fatalf("rebuild without the password: exit %d, stderr %q; want a failure naming NOAUTH", code, errOut)
		}
	})
}
