package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/proxy"
)

// need returns the path of a program the test needs; it fails (never
// skips) when the program is missing: scripts/test installs them.
func need(t testing.TB, name, path, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil && (path == "" || p == path) {
		return p
	}
	if path != "" {
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	t.Fatalf("%s is needed (apt-get install -y %s; scripts/test installs it)", name, pkg)
	return ""
}

// runTool runs a program with a bound on its time and returns its output.
func runTool(t testing.TB, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func hostPort(t testing.TB, addr string) (string, string) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}

// TestRedisCLI: concurrent redis-cli processes (RESP2, and RESP3 with -3)
// increment one counter key through the proxy; redis-cli reads the exact
// total back, and a plain key and an error pass through.
func TestRedisCLI(t *testing.T) {
	cli := need(t, "redis-cli", "", "redis-tools")
	p := uniq(t)
	e := startProxy(t, []hotcount.Namespace{{Prefix: p + "likes:", Buffered: true, ReadCacheTTL: readCacheTTL}}, proxy.Config{})
	host, port := hostPort(t, e.addr)
	key := p + "likes:post:42"
	const procs, each = 4, 100
	var wg sync.WaitGroup
	for i := 0; i < procs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := []string{"-h", host, "-p", port, "-r", strconv.Itoa(each), "INCR", key}
			if i%2 == 1 {
				args = append([]string{"-3"}, args...)
			}
			runTool(t, cli, args...)
		}()
	}
	wg.Wait()
	get := func() (int64, error) {
		return strconv.ParseInt(strings.TrimSpace(runTool(t, cli, "-h", host, "-p", port, "GET", key)), 10, 64)
	}
	waitValue(t, key, procs*each, get)
	if out := strings.TrimSpace(runTool(t, cli, "-3", "-h", host, "-p", port, "GET", key)); out != strconv.Itoa(procs*each) {
		t.Fatalf("redis-cli -3 GET = %q", out)
	}
	if out := runTool(t, cli, "-h", host, "-p", port, "SET", p+"plain", "hello"); strings.TrimSpace(out) != "OK" {
		t.Fatalf("SET: %q", out)
	}
	if out := runTool(t, cli, "-h", host, "-p", port, "GET", p+"plain"); strings.TrimSpace(out) != "hello" {
		t.Fatalf("GET: %q", out)
	}
	if out := runTool(t, cli, "-h", host, "-p", port, "APPEND", key, "x"); !strings.Contains(out, "counter keys accept") {
		t.Fatalf("APPEND on a counter key: %q", out)
	}
	if out := runTool(t, cli, "-h", host, "-p", port, "INFO", "server"); !strings.Contains(out, "redis_mode:standalone") {
		t.Fatalf("INFO server: %q", out)
	}
}

// TestRedisBenchmark: redis-benchmark runs INCR on a counter key through
// the proxy from many connections; the total is exact afterwards. Its
// own start-up (CONFIG GET) passes through too.
func TestRedisBenchmark(t *testing.T) {
	bench := need(t, "redis-benchmark", "", "redis-tools")
	cli := need(t, "redis-cli", "", "redis-tools")
	p := uniq(t)
	e := startProxy(t, []hotcount.Namespace{{Prefix: p + "likes:", Buffered: true, ReadCacheTTL: readCacheTTL}}, proxy.Config{})
	host, port := hostPort(t, e.addr)
	key := p + "likes:post:42"
	const n = 4800 // a multiple of the pipeline depth: redis-benchmark sends whole pipelines
	out := runTool(t, bench, "-h", host, "-p", port, "-c", "20", "-n", strconv.Itoa(n), "INCR", key)
	if !strings.Contains(out, "requests per second") || strings.Contains(out, "ERR") {
		t.Fatalf("redis-benchmark output:\n%s", out)
	}
	// And pipelined, in RESP3.
	runTool(t, bench, "-3", "-h", host, "-p", port, "-c", "10", "-P", "16", "-n", strconv.Itoa(n), "INCR", key)
	waitValue(t, key, 2*n, func() (int64, error) {
		return strconv.ParseInt(strings.TrimSpace(runTool(t, cli, "-h", host, "-p", port, "GET", key)), 10, 64)
	})
	// Plain-key tests of redis-benchmark itself (keys __rand_int__ etc.).
	out = runTool(t, bench, "-h", host, "-p", port, "-c", "10", "-n", "2000", "-t", "set,get,incr,lpush,lpop,mset", "-q")
	for _, test := range []string{"SET", "GET", "INCR", "LPUSH", "LPOP", "MSET"} {
		if !strings.Contains(out, test) {
			t.Fatalf("redis-benchmark -t: no %s line in\n%s", test, out)
		}
	}
}

// pythonScript increments one key from 4 threads with redis-py, then
// prints the value read back.
const pythonScript = `
import sys, threading, time, redis
host, port, key, plain, each = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
def work():
    r = redis.Redis(host=host, port=port)
    for i in range(each):
        r.incr(key)
ts = [threading.Thread(target=work) for _ in range(4)]
for t in ts: t.start()
for t in ts: t.join()
r = redis.Redis(host=host, port=port)
want = 4 * each
for _ in range(100):
    v = int(r.get(key))
    if v < want:
        sys.exit("read %d, below the %d increments made" % (v, want))
    if v == want:
        break
    time.sleep(0.025)
r.set(plain, "x")
assert r.get(plain) == b"x"
print(v)
`

// TestPythonRedis: Debian's python3-redis increments a counter key from
// threads and reads the exact total.
func TestPythonRedis(t *testing.T) {
	py := need(t, "python3", "/usr/bin/python3", "python3")
	if out, err := exec.Command(py, "-c", "import redis").CombinedOutput(); err != nil {
		t.Fatalf("python3-redis is needed (apt-get install -y python3-redis; scripts/test installs it): %v %s", err, out)
	}
	p := uniq(t)
	e := startProxy(t, []hotcount.Namespace{{Prefix: p + "likes:", Buffered: true, ReadCacheTTL: readCacheTTL}}, proxy.Config{})
	host, port := hostPort(t, e.addr)
	const each = 150
	out := runTool(t, py, "-c", pythonScript, host, port, p+"likes:post:42", p+"plain", strconv.Itoa(each))
	if strings.TrimSpace(out) != fmt.Sprint(4*each) {
		t.Fatalf("python3-redis read %q, want %d", out, 4*each)
	}
}

// TestMetricsPromtool: the admin port's /metrics, scraped after counter
// and plain traffic driven by redis-cli through a proxy with a buffered
// namespace and a durable store, passes `promtool check metrics` (its lint
// of names, help and types), as the server's does, and has every series
// docs/proxy.md names, the durable store's (checkpoints) among them.
func TestMetricsPromtool(t *testing.T) {
	bin := need(t, "promtool", "", "prometheus")
	cli := need(t, "redis-cli", "", "redis-tools")
	p := uniq(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "hc.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	hc, err := hotcount.New(ctx, hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
		Defaults:   hotcount.Namespace{FlushInterval: 50 * time.Millisecond},
		Namespaces: []hotcount.Namespace{{Prefix: p + "tl:", Buffered: true, ReadCacheTTL: readCacheTTL}},
		Durability: hotcount.DurabilityConfig{Store: db, CheckpointInterval: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close(context.Background())
	e := startProxyWith(t, hc, proxy.Config{Durable: true})
	host, port := hostPort(t, e.addr)
	runTool(t, cli, "-h", host, "-p", port, "-r", "20", "INCR", p+"tl:a")
	runTool(t, cli, "-h", host, "-p", port, "GET", p+"tl:a")
	runTool(t, cli, "-h", host, "-p", port, "DEL", p+"tl:b")
	runTool(t, cli, "-h", host, "-p", port, "SET", p+"plain", "1")
	runTool(t, cli, "-h", host, "-p", port, "GET", p+"plain")
	h, err := e.srv.AdminHandler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	var body []byte
	// The time of the last checkpoint is there once one succeeded.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(string(body), "\nhotcount_checkpoint_last_success_timestamp_seconds "); {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint in 20 s:\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
		}
	}
	for _, want := range []string{"hotcount_proxy_commands_total", "hotcount_buffer_unflushed_delta", "go_goroutines", "hotcount_checkpoints_total"} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics has no %s:\n%s", want, body)
		}
	}
	// The metrics docs/proxy.md says the admin port serves: every name
	// (a family, `hotcount_buffer_*`, at least one) is in the scrape.
	doc, err := os.ReadFile("../docs/proxy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, admin, _ := strings.Cut(string(doc), "**Admin port**")
	admin, _, _ = strings.Cut(admin, "\n\n")
	names := regexp.MustCompile(`hotcount_[a-z0-9_]*(?:[a-z0-9]|_\*)`).FindAllString(admin, -1)
	if len(names) < 3 {
		t.Fatalf("docs/proxy.md's Admin port paragraph names %d metrics", len(names))
	}
	for _, name := range names {
		if !regexp.MustCompile(`(?m)^# TYPE ` + strings.ReplaceAll(regexp.QuoteMeta(name), `\*`, `\w*`) + ` `).Match(body) {
			t.Errorf("docs/proxy.md says the admin port's /metrics has %s; it has not", name)
		}
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(string(body))
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
