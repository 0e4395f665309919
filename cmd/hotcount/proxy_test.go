package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/proxy"
)

func TestProxyUsage(t *testing.T) {
	clearServeEnv(t)
	dir := t.TempDir()
	badReply := filepath.Join(dir, "reply.yaml")
	os.WriteFile(badReply, []byte("namespaces: [{prefix: \"likes:\", reply: fresh}]\n"), 0o644)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no redis", nil, "--redis is required"},
		{"bad resp listen", []string{"--redis", "127.0.0.1:1", "--resp-listen", "nowhere"}, "resp_listen (from flag --resp-listen)"},
		{"bad admin listen", []string{"--redis", "127.0.0.1:1", "--admin-listen", "on"}, "admin_listen"},
		{"bad reply", []string{"--redis", "127.0.0.1:1", "--config", badReply}, "reply must be estimate or exact"},
		// A bulk limit of a few bytes refuses every real command.
		{"tiny max bulk", []string{"--redis", "127.0.0.1:1", "--resp-max-bulk-len", "1"}, "resp_max_bulk_len (from flag --resp-max-bulk-len): must be at least 1 MiB (1048576)"},
		{"unknown flag", []string{"--listen", "127.0.0.1:1"}, "listen"},
		{"stray argument", []string{"now"}, "unexpected argument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(append([]string{"proxy"}, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line mentioning %q", code, stderr, tc.want)
			}
		})
	}
	if code, out, _ := runCLI("help", "proxy"); code != exitOK || !strings.Contains(out, "-resp-listen") {
		t.Fatalf("help proxy: %d %q", code, out)
	}
	if code, out, _ := runCLI("help"); code != exitOK || !strings.Contains(out, "proxy") {
		t.Fatalf("help: %d %q", code, out)
	}
}

// proxyProcess is `hotcount proxy` running as a child process.
type proxyProcess struct {
	cmd         *exec.Cmd
	resp, admin string
	stderr      *syncBuffer
}

// startProxyBinary runs the built binary as a proxy on free ports.
func startProxyBinary(t *testing.T, bin string, args ...string) *proxyProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"proxy", "--resp-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = os.Environ()
	for _, s := range settings {
		cmd.Env = append(cmd.Env, s.env()+"=")
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	pp := &proxyProcess{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = pp.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	br := bufio.NewReader(stdout)
	for pp.resp == "" || pp.admin == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the proxy's addresses: %v; stderr %s", err, pp.stderr.String())
		}
		line = strings.TrimSpace(line)
		if a, ok := strings.CutPrefix(line, "listening on redis://"); ok {
			pp.resp = a
		}
		if a, ok := strings.CutPrefix(line, "admin on http://"); ok {
			pp.admin = a
		}
	}
	go io.Copy(io.Discard, br)
	return pp
}

// gauge scrapes one unlabelled series from the proxy's /metrics.
func (pp *proxyProcess) gauge(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + pp.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// incrLoad runs INCR on key from workers until stopped, counting
// acknowledged and attempted increments.
type incrLoad struct {
	acked, attempted atomic.Int64
	stop             chan struct{}
	wg               sync.WaitGroup
}

func startIncrLoad(addr, key string, workers int) (*incrLoad, *redis.Client) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: workers, MaxRetries: -1})
	l := &incrLoad{stop: make(chan struct{})}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				l.attempted.Add(1)
				if rdb.Incr(context.Background(), key).Err() != nil {
					return // the proxy is gone
				}
				l.acked.Add(1)
			}
		}()
	}
	return l, rdb
}

func (l *incrLoad) halt() { close(l.stop); l.wg.Wait() }

// clusterTotal reads a counter as the cluster holds it, afresh.
func clusterTotal(t *testing.T, seeds []string, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: seeds}, Reads: hotcount.ReadConfig{NoCache: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	r, err := c.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return r.Value
}

// TestProxyBinaryKill runs `hotcount proxy` as a process in front of a
// 3-primary Redis Cluster, with a buffered namespace flushed every 100 ms,
// under INCR load from go-redis:
//
//   - SIGTERM: the proxy drains (exit 0) and the cluster holds every
//     acknowledged increment.
//   - SIGKILL: the loss is at most what the proxy held unflushed — its
//     /metrics gauge, read just before the kill — plus what it
//     acknowledged between that reading and the kill: one flush interval
//     of increments (and one flush in flight). Nothing is counted twice.
func TestProxyBinaryKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	cfgFile := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfgFile, []byte("namespaces:\n  - {prefix: \"likes:\", buffered: true, flush_interval: 100ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t)
	seeds := strings.Join(cl.Seeds(), ",")

	t.Run("term", func(t *testing.T) {
		pp := startProxyBinary(t, bin, "--redis", seeds, "--config", cfgFile)
		key := "likes:term:" + strconv.FormatInt(time.Now().UnixNano(), 36)
		l, rdb := startIncrLoad(pp.resp, key, 8)
		time.Sleep(500 * time.Millisecond)
		l.halt()
		rdb.Close()
		if err := pp.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := pp.cmd.Wait(); err != nil {
			t.Fatalf("after SIGTERM: %v; stderr %s", err, pp.stderr.String())
		}
		if !strings.Contains(pp.stderr.String(), "stopped cleanly") {
			t.Fatalf("stderr %q", pp.stderr.String())
		}
		if got, acked := clusterTotal(t, cl.Seeds(), key), l.acked.Load(); got != acked {
			t.Fatalf("after SIGTERM the cluster holds %d, %d were acknowledged", got, acked)
		}
		t.Logf("SIGTERM: %d acknowledged, all in the cluster", l.acked.Load())
	})

	// resp_procs: one CPU by default, as many as it says, and a
	// GOMAXPROCS variable kept when it is not set; read off the Go
	// runtime's own gauge on /metrics.
	t.Run("procs", func(t *testing.T) {
		for _, c := range []struct {
			env  string
			args []string
			want float64
		}{
			{"", nil, 1},
			{"", []string{"--resp-procs", "2"}, 2},
			{"2", nil, 2},
			{"2", []string{"--resp-procs", "1"}, 1},
		} {
			t.Setenv("GOMAXPROCS", c.env)
			pp := startProxyBinary(t, bin, append([]string{"--redis", seeds}, c.args...)...)
			if got := pp.gauge(t, "go_sched_gomaxprocs_threads"); got != c.want {
				t.Errorf("GOMAXPROCS=%q %v: the proxy runs on %v CPUs, want %v", c.env, c.args, got, c.want)
			}
			pp.cmd.Process.Kill()
			pp.cmd.Wait()
		}
	})

	t.Run("kill", func(t *testing.T) {
		// The fault is meaningful only if something was unflushed at
		// the kill; a try that found nothing held is retried.
		for try := 1; ; try++ {
			pp := startProxyBinary(t, bin, "--redis", seeds, "--config", cfgFile)
			key := "likes:kill:" + strconv.FormatInt(time.Now().UnixNano(), 36)
			l, rdb := startIncrLoad(pp.resp, key, 8)
			time.Sleep(700 * time.Millisecond)
			ackedBefore := l.acked.Load()
			unflushed := pp.gauge(t, "hotcount_buffer_unflushed_delta")
			if err := pp.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			ackedAtKill := l.acked.Load()
			pp.cmd.Wait()
			l.halt()
			rdb.Close()
			got := clusterTotal(t, cl.Seeds(), key)
			acked, attempted := l.acked.Load(), l.attempted.Load()
			loss := acked - got
			bound := int64(unflushed) + (ackedAtKill - ackedBefore) + (acked - ackedAtKill)
			t.Logf("try %d: acknowledged %d (attempted %d), cluster %d, loss %d; unflushed just before the kill %d, acknowledged after that reading %d: bound %d",
				try, acked, attempted, got, loss, int64(unflushed), acked-ackedBefore, bound)
			if got > attempted {
				t.Fatalf("the cluster holds %d, more than the %d increments sent: double count", got, attempted)
			}
			if loss > bound {
				t.Fatalf("lost %d, more than the %d the proxy held unflushed", loss, bound)
			}
			if unflushed > 0 {
				return
			}
			if try == 3 {
				t.Fatal("three kills found nothing unflushed: the loss window was never exercised")
			}
		}
	})
}

// TestProxyAdminDashboard: the proxy's admin port serves the dashboard and
// the read-only routes it draws from, over the proxy's Client: after
// INCRs through the Redis protocol, the counter shows among the hot keys
// with its value and the cluster's nodes are listed; /metrics counts the
// commands; the routes that write are not served there.
func TestProxyAdminDashboard(t *testing.T) {
	clearServeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	conf := filepath.Join(t.TempDir(), "proxy.yaml")
	os.WriteFile(conf, []byte("namespaces: [{prefix: \"likes:\", buffered: true}]\n"), 0o644)
	addr, admin, stop := inProcessProxy(t, "--redis", n.Addr, "--config", conf, "--admin-listen", "127.0.0.1:0")
	if admin == "" {
		t.Fatal("the proxy did not print its admin address")
	}
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	for range 200 {
		if err := rc.Incr(ctx, "likes:post:42").Err(); err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/"); code != 200 || !strings.Contains(body, "<html") {
		t.Fatalf("GET /: %d %.200s", code, body)
	}
	// Arrival rates are taken over a window: keep incrementing until the
	// key shows (bounded).
	for deadline := time.Now().Add(30 * time.Second); ; {
		code, body := get("/v1/hotkeys?n=10")
		if code == 200 && strings.Contains(body, `"likes:post:42"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/hotkeys: %d %s", code, body)
		}
		for range 50 {
			if err := rc.Incr(ctx, "likes:post:42").Err(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	total, err := rc.Get(ctx, "likes:post:42").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get("/v1/counters/likes:post:42"); code != 200 || !strings.Contains(body, fmt.Sprintf(`"value":%d`, total)) {
		t.Fatalf("GET /v1/counters/likes:post:42: %d %s", code, body)
	}
	if code, body := get("/v1/nodes"); code != 200 || !strings.Contains(body, n.Addr[strings.LastIndex(n.Addr, ":"):]) {
		t.Fatalf("GET /v1/nodes: %d %s", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, fmt.Sprintf("hotcount_proxy_increments_total %d\n", total)) {
		t.Fatalf("GET /metrics: %d, no hotcount_proxy_increments_total %d", code, total)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("GET /healthz: %d", code)
	}
	// The routes that write are not served: a path no route serves is a
	// 404, a method a served path does not take a 405 with Allow, each
	// with a JSON error body.
	for _, w := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"POST", "/v1/counters/likes:post:42/incr", 404, ""}, {"DELETE", "/v1/counters/likes:post:42", 405, "GET, HEAD"},
		{"PUT", "/v1/counters/likes:post:42/shards", 405, "GET, HEAD"}, {"PUT", "/v1/counters/likes:post:42/ttl", 404, ""},
		{"POST", "/v1/nodes", 405, "GET, HEAD"}, {"GET", "/v1/nope", 404, ""},
		// A path the mux would redirect to another (another counter) is
		// refused, as serve refuses it.
		{"GET", "/v1/counters/likes:post:42/../likes:post:1", 400, ""}, {"GET", "//v1/nodes", 400, ""},
	} {
		req, _ := http.NewRequest(w.method, admin+w.path, strings.NewReader(`{"by":1,"n":4,"ttl_ms":1000}`))
		req.Header.Set("Content-Type", "application/json")
		testenv.CheckJSONError(t, nil, req, w.code, w.allow)
	}
	// GET /assets is redirected to /assets/ as serve redirects it: with a
	// JSON body, not the mux's HTML.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("GET", admin+"/assets", nil)
	if resp, _ := testenv.CheckJSONError(t, noFollow, req, http.StatusTemporaryRedirect, ""); resp.Header.Get("Location") != "/assets/" {
		t.Errorf("GET /assets on the admin port: Location %q, want /assets/", resp.Header.Get("Location"))
	}
	if v, err := rc.Get(ctx, "likes:post:42").Int64(); err != nil || v != total {
		t.Fatalf("after the refused writes the counter reads %d %v, want %d", v, err, total)
	}
	rc.Close()
	if code, stderr := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// TestProxyCountersFlushDelay: the proxy's counters share each node's
// connection among many clients, so their writes are gathered as the
// pass-through ones are, and their cold INCRs go in shared batches
// (IncrBatchWindow); serve keeps the library's default of none.
func TestProxyCountersFlushDelay(t *testing.T) {
	cfg, err := loadConfig(map[string]string{"redis": "127.0.0.1:7000"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if hc, _ := proxyClientConfig(cfg, nil); hc.Redis.FlushDelay != proxy.CounterFlushDelay || hc.Redis.IncrBatchWindow != proxy.CounterBatchWindow {
		t.Fatalf("proxy: Redis.FlushDelay = %v, IncrBatchWindow %v, want %v, %v", hc.Redis.FlushDelay, hc.Redis.IncrBatchWindow, proxy.CounterFlushDelay, proxy.CounterBatchWindow)
	}
	if hc := clientConfig(cfg, nil); hc.Redis.FlushDelay != 0 || hc.Redis.IncrBatchWindow != 0 {
		t.Fatalf("serve: Redis.FlushDelay = %v, IncrBatchWindow %v, want 0, 0", hc.Redis.FlushDelay, hc.Redis.IncrBatchWindow)
	}
}

// TestProxyDurableNeedsStore: a proxy whose configuration puts counters in
// durable mode without a durable store is a usage error (exit 2) whose
// message names what the operator sets (--data, --postgres, their keys
// and variables), not the library's field.
func TestProxyDurableNeedsStore(t *testing.T) {
	clearServeEnv(t)
	dir := t.TempDir()
	nsConf := filepath.Join(dir, "ns.yaml")
	os.WriteFile(nsConf, []byte("namespaces: [{prefix: \"likes:\"}, {prefix: \"orders:\", mode: durable}]\n"), 0o644)
	modeConf := filepath.Join(dir, "mode.yaml")
	os.WriteFile(modeConf, []byte("mode: durable\nnamespaces: [{prefix: \"likes:\"}]\n"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		env  string
		what string
	}{
		{"namespace", []string{"--config", nsConf}, "", `namespaces[1] (prefix "orders:", from file ` + nsConf + `)`},
		{"default mode", []string{"--config", modeConf}, "", "mode (from file " + modeConf + ")"},
		{"mode flag", []string{"--config", nsConf, "--mode", "durable"}, "", "mode (from flag --mode)"},
		{"mode env", []string{"--config", nsConf}, "durable", "mode (from env HOTCOUNT_MODE)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HOTCOUNT_MODE", tc.env)
			code, _, stderr := runCLI(append([]string{"proxy", "--redis", "127.0.0.1:1"}, tc.args...)...)
			if code != exitUsage || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line", code, stderr)
			}
			for _, w := range []string{tc.what, "durable", "--data", "--postgres", "HOTCOUNT_DATA", "HOTCOUNT_POSTGRES"} {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
			if strings.Contains(stderr, "Durability.Store") {
				t.Errorf("stderr %q names the library's field", stderr)
			}
		})
	}
}

// proxyDurableSeries are series of the durable store that the shipped
// alert rules and dashboard read; serve exports them, and so does a
// proxy with --data or --postgres.
var proxyDurableSeries = []string{
	"hotcount_checkpoints_total", "hotcount_checkpoint_errors_total", "hotcount_checkpoint_saved_total",
	"hotcount_checkpoint_tracked_counters", "hotcount_checkpoint_last_success_timestamp_seconds",
	"hotcount_restores_total", "hotcount_durable_events_total", "hotcount_durable_failed_events_total",
	"hotcount_durable_view_misses_total", "hotcount_rollup_errors_total", "hotcount_heal_errors_total",
	"hotcount_cleanup_errors_total", "hotcount_cleanup_passes_total",
}

// TestProxyDurableMetrics: `hotcount proxy --data DIR` takes checkpoints,
// and its admin port's /metrics has the durable store's series under
// serve's names (the checkpoint alerts of deploy/prometheus watch it),
// the last checkpoint's time among them once one succeeded; it passes
// `promtool check metrics`. Without a durable store it has none.
func TestProxyDurableMetrics(t *testing.T) {
	clearServeEnv(t)
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install it with `apt-get install -y prometheus` (scripts/test does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	conf := filepath.Join(t.TempDir(), "proxy.yaml")
	os.WriteFile(conf, []byte("namespaces: [{prefix: \"likes:\", buffered: true}]\n"), 0o644)
	scrape := func(admin string) string {
		t.Helper()
		resp, err := http.Get(admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
		}
		return string(b)
	}
	has := func(body, name string) bool { return strings.Contains(body, "\n# TYPE "+name+" ") }

	addr, admin, stop := inProcessProxy(t, "--redis", n.Addr, "--config", conf, "--admin-listen", "127.0.0.1:0",
		"--data", filepath.Join(t.TempDir(), "data"), "--checkpoint-interval", "100ms")
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	var body string
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := rc.Incr(ctx, "likes:post:42").Err(); err != nil {
			t.Fatal(err)
		}
		body = scrape(admin)
		if has(body, "hotcount_checkpoint_last_success_timestamp_seconds") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint in 30 s: /metrics of a proxy with --data:\n%s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, name := range proxyDurableSeries {
		if !has(body, name) {
			t.Errorf("/metrics of a proxy with --data has no %s", name)
		}
	}
	if !strings.Contains(body, "\nhotcount_checkpoint_tracked_counters 1\n") {
		t.Errorf("/metrics of a proxy with --data: want hotcount_checkpoint_tracked_counters 1")
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	rc.Close()
	if code, stderr := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}

	addr, admin, stop = inProcessProxy(t, "--redis", n.Addr, "--config", conf, "--admin-listen", "127.0.0.1:0")
	rc = redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	if err := rc.Incr(ctx, "likes:post:42").Err(); err != nil {
		t.Fatal(err)
	}
	body = scrape(admin)
	for _, name := range proxyDurableSeries {
		if has(body, name) {
			t.Errorf("/metrics of a proxy without a durable store has %s", name)
		}
	}
	rc.Close()
	if code, stderr := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}
